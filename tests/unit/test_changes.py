"""The change a reviewer is sent: a stat for all of it, the patch capped with the rest
listed by path (workspace/changes.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loopworks.workspace.changes import FileDiff, capped_patch, diff_stat
from loopworks.workspace.objects import file_diffs

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


def test_stat_past_max_files_counts_the_rest_and_totals_all() -> None:
    diffs = [_diff(f"f{n}.py", 40, 2, 1) for n in range(5)]
    assert diff_stat(diffs, max_files=2).splitlines() == [
        " f0.py | +2 -1",
        " f1.py | +2 -1",
        " ... and 3 more files",
        " 5 files changed, 10 insertions(+), 5 deletions(-)",
    ]


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


@pytest.mark.integration
def test_file_diffs_read_a_real_repository_as_git_diff_does(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "keep.py").write_text("a = 1\nb = 2\n")
    (tmp_path / "gone.py").write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    (tmp_path / "keep.py").write_text("a = 1\nb = 3\nc = 4\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "new.py").write_text("n\n")
    git("add", "-A")
    git("commit", "-qm", "work")

    diffs = file_diffs(tmp_path, base, git("rev-parse", "HEAD"))

    assert [(d.path, d.added, d.deleted) for d in diffs] == [
        ("gone.py", 0, 1),
        ("keep.py", 2, 1),
        ("new.py", 1, 0),
    ]
    assert git("diff", "--numstat", base, "HEAD").splitlines() == [
        "0\t1\tgone.py",
        "2\t1\tkeep.py",
        "1\t0\tnew.py",
    ]
    keep = next(d for d in diffs if d.path == "keep.py")
    assert "-b = 2\n+b = 3\n+c = 4\n" in keep.patch
