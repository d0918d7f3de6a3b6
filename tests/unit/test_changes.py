"""The change a reviewer is sent: a stat for all of it, the patch capped with the rest
listed by path (workspace/changes.py)."""

from __future__ import annotations

import pytest

from loopworks.workspace.changes import FileDiff, capped_patch, diff_stat

pytestmark = pytest.mark.unit


def _diff(path: str, size: int, added: int = 1, deleted: int = 0) -> FileDiff:
    header = f"diff --git a/{path} b/{path}\n"
    return FileDiff(path, added, deleted, header + "+" * (size - len(header) - 1) + "\n")


def test_stat_lists_every_file_and_the_totals() -> None:
    stat = diff_stat([_diff("a.py", 50, 3, 1), FileDiff("img.png", 0, 0, "", binary=True)])
    assert stat.splitlines() == [
        " a.py    | +3 -1",
        " img.png | binary",
        " 2 files changed, 3 insertions(+), 1 deletions(-)",
    ]
    assert diff_stat([]) == ""


def test_patch_under_the_cap_is_whole() -> None:
    diffs = [_diff("a.py", 100), _diff("b.py", 100)]
    assert capped_patch(diffs, 200) == diffs[0].patch + diffs[1].patch


def test_patch_past_the_cap_lists_the_rest_by_path_and_cuts_no_file() -> None:
    diffs = [_diff("a.py", 100), _diff("b.py", 100), _diff("c.py", 10)]
    text = capped_patch(diffs, 150)
    assert text.startswith(diffs[0].patch)
    assert "+" * 50 not in text.removeprefix(diffs[0].patch)  # b.py not half-shown
    # c.py would fit, but the patch stops at the first file past the cap: what is shown
    # is a prefix of the whole, what is not is listed, in order.
    assert text.endswith("read them yourself:]\nb.py\nc.py\n")
    assert "[patch capped at 150 characters" in text


def test_a_zero_cap_lists_every_path() -> None:
    text = capped_patch([_diff("a.py", 10), _diff("b.py", 10)], 0)
    assert text.splitlines()[1:] == ["a.py", "b.py"]
