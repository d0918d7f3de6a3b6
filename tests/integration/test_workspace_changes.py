"""What the custodiet and the judges are shown of a change, as git itself sees it: the
changes between two commits, and the changes of a work tree not yet staged
(workspace/changes.py), in real repositories."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from loopworks.workspace.changes import capped_patch, changes_between, changes_to_worktree

pytestmark = pytest.mark.integration


def _git_in(root: Path) -> Callable[..., str]:
    """git in `root`, as a person with a name and an address runs it; its output."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    return git


def test_changes_between_two_commits_are_those_git_diff_shows(tmp_path: Path) -> None:
    git = _git_in(tmp_path)

    git("init", "-q")
    (tmp_path / "keep.py").write_text("a\nb\n")
    (tmp_path / "gone.py").write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "start")
    start = git("rev-parse", "HEAD")
    (tmp_path / "keep.py").write_text("a\nc\nd\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "new.py").write_text("n\n")
    git("add", "-A")
    git("commit", "-qm", "work")
    changes = changes_between(tmp_path, start, git("rev-parse", "HEAD"))
    assert [(c.path, c.status, c.added, c.removed) for c in changes] == [
        ("gone.py", "D", 0, 1),
        ("keep.py", "M", 2, 1),
        ("new.py", "A", 1, 0),
    ]
    assert "-b\n+c\n+d" in capped_patch(changes)


def test_changes_to_the_work_tree_are_those_git_add_all_would_stage(tmp_path: Path) -> None:
    git = _git_in(tmp_path)

    git("init", "-q")
    (tmp_path / "keep.py").write_text("a\nb\n")
    (tmp_path / "gone.py").write_text("x\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    git("add", "-A")
    git("commit", "-qm", "start")
    start = git("rev-parse", "HEAD")
    (tmp_path / "keep.py").write_text("a\nc\nd\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "new.py").write_text("n\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "out.o").write_text("ignored\n")
    os.mkfifo(tmp_path / "pipe")  # git stages no FIFO, and reading one would hang

    changes = changes_to_worktree(tmp_path, start)
    assert [(c.path, c.status, c.added, c.removed) for c in changes] == [
        ("deep/er/new.py", "A", 1, 0),
        ("gone.py", "D", 0, 1),
        ("keep.py", "M", 2, 1),
    ]
    # Nothing was staged or committed to find them, and git agrees once it stages them.
    assert git("rev-parse", "HEAD") == start and not git("diff", "--cached", "--name-only")
    (tmp_path / "pipe").unlink()
    git("add", "-A")
    assert git("diff", "--cached", "--name-only", start).split() == [c.path for c in changes]
