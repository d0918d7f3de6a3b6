"""The change a reviewer is sent: a stat for all of it, the patch capped with the rest
listed by path (workspace/changes.py). The custodiet's and judges' cases are in
tests/unit/test_audit_evidence.py; these are QA's: a stat past its file limit, and the
diff read from a real repository as `git diff` reads it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loopworks.workspace.changes import FileChange, changes_between, diff_stat

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


@pytest.mark.integration
def test_changes_read_a_real_repository_as_git_diff_does(tmp_path: Path) -> None:
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

    changes = changes_between(tmp_path, base, git("rev-parse", "HEAD"))

    assert [(c.path, c.status, c.added, c.removed) for c in changes] == [
        ("gone.py", "D", 0, 1),
        ("keep.py", "M", 2, 1),
        ("new.py", "A", 1, 0),
    ]
    assert git("diff", "--numstat", base, "HEAD").splitlines() == [
        "0\t1\tgone.py",
        "2\t1\tkeep.py",
        "1\t0\tnew.py",
    ]
    keep = next(c for c in changes if c.path == "keep.py")
    assert "-b = 2\n+b = 3\n+c = 4\n" in keep.patch
