"""The change a reviewer is sent: a stat for all of it, the patch capped with the rest
listed by path (workspace/changes.py). The other cases, and the diff read from a real
repository, are in tests/unit/test_audit_evidence.py; this is QA's stat past its file
limit."""

from __future__ import annotations

import pytest

from loopworks.workspace.changes import FileChange, diff_stat

pytestmark = pytest.mark.unit


def _change(path: str, added: int, removed: int) -> FileChange:
    return FileChange(path=path, status="M", added=added, removed=removed, patch="+x\n")


def test_stat_past_max_files_counts_the_rest_and_totals_all() -> None:
    changes = [_change(f"f{n}.py", 2, 1) for n in range(5)]
    assert diff_stat(changes, max_files=2).splitlines() == [
        "M +2 -1 f0.py",
        "M +2 -1 f1.py",
        "... and 3 more files",
        "5 files changed, +10 -5",
    ]
