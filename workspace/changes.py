"""A run's change as a model reads it: a stat of every file, and the patch cut at a size
with the rest named by path. The gates (the custodiet, QA, an `llm` judge) read the change
rather than the agent's account of it.

`diff_stat` and `capped_patch` are pure; `changes_between` reads a repository's objects
(libgit2, as workspace/objects.py) and nothing else; `changes_to_worktree` reads a work
tree's files too, as `git add -A` would stage them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pygit2
from pydantic import BaseModel
from pygit2.enums import DiffOption

from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workspace.objects import open_repository
from loopworks.workspace.runner import GIT_IN_PROCESS, GitError

# What a model is shown of a change's patch: enough for a focused change, where a generated
# file or a vendored tree would crowd out everything else.
PATCH_CAP_CHARS = 24_000
# The run's own records (events, trajectories) are not the work; readers take them apart.
RECORDS_PREFIX = ".loops/"


class FileChange(BaseModel):
    """One path's change between two commits, as `git diff --numstat` and `-p` show it."""

    path: str
    # git's status letter: A added, M modified, D deleted, R renamed, T type changed.
    status: str
    added: int = 0
    removed: int = 0
    binary: bool = False
    patch: str = ""


def diff_stat(changes: Sequence[FileChange], max_files: int | None = None) -> str:
    """One line a file, `M +3 -1 src/app.py` (the first `max_files` of them, then how many
    more), then the totals of all; empty for no change."""
    if not changes:
        return ""
    shown = changes if max_files is None else changes[:max_files]
    lines = [
        f"{c.status} {'binary' if c.binary else f'+{c.added} -{c.removed}'} {c.path}" for c in shown
    ]
    if len(shown) < len(changes):
        lines.append(f"... and {len(changes) - len(shown)} more files")
    added, removed = sum(c.added for c in changes), sum(c.removed for c in changes)
    lines.append(f"{len(changes)} files changed, +{added} -{removed}")
    return "\n".join(lines)


def capped_patch(changes: Sequence[FileChange], cap: int = PATCH_CAP_CHARS) -> str:
    """The files' patches in order while they fit in `cap` characters; a file that does not
    fit is left out whole (half a hunk misleads), and the left-out ones are named last."""
    kept: list[str] = []
    left_out: list[str] = []
    used = 0
    for change in changes:
        text = change.patch
        if not text:
            continue
        if left_out or used + len(text) > cap:
            left_out.append(change.path)
            continue
        kept.append(text)
        used += len(text)
    if left_out:
        kept.append(f"[patch cut at {cap} characters; not shown: {', '.join(left_out)}]\n")
    return "".join(kept)


def without_records(changes: Sequence[FileChange]) -> list[FileChange]:
    """The work's changes: the run's own records under `.loops/` left out."""
    return [c for c in changes if not c.path.startswith(RECORDS_PREFIX)]


def code_paths(changes: Sequence[FileChange]) -> list[str]:
    """The paths of the work's changes besides its artifact: a run that changed none of
    them is a document task, which needs no proof (docs/loop.md#the-runs-proof)."""
    return [c.path for c in without_records(changes) if c.path != ARTIFACT_PATH]


def changes_between(repository: str | Path, old: str, new: str) -> list[FileChange]:
    """Every path that differs from `old`'s tree to `new`'s in the repository at
    `repository`, in path order (`git diff old new`, no rename detection)."""
    GIT_IN_PROCESS.add(["diff"])
    repo = open_repository(repository)
    try:
        diff = repo.diff(
            repo.revparse_single(old).peel(pygit2.Commit),
            repo.revparse_single(new).peel(pygit2.Commit),
        )
        found = [_change(patch) for patch in diff if patch is not None]
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"diff {old}..{new} failed: {exc}") from exc
    return sorted(found, key=lambda c: c.path)


# A work tree's files as `git add -A` stages them: untracked ones (in untracked folders
# too) with their content, ignored ones left out, as are sockets and FIFOs.
_WORKTREE = (
    DiffOption.INCLUDE_UNTRACKED
    | DiffOption.RECURSE_UNTRACKED_DIRS
    | DiffOption.SHOW_UNTRACKED_CONTENT
)


def changes_to_worktree(workdir: Path, old: str) -> list[FileChange]:
    """Every path that differs from `old`'s tree to the files of the work tree at `workdir`,
    in path order: what `git add -A` then `git diff --cached old` would show, while an agent
    is still at work and nothing is committed (an untracked file is `A`)."""
    GIT_IN_PROCESS.add(["diff"])
    repo = open_repository(workdir)
    try:
        tree = repo.revparse_single(old).peel(pygit2.Tree)
        diff = tree.diff_to_workdir(_WORKTREE)
        found = [_change(patch) for patch in diff if patch is not None]
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"diff {old} to the work tree failed: {exc}") from exc
    return sorted(found, key=lambda c: c.path)


def _change(patch: pygit2.Patch) -> FileChange:
    delta = patch.delta
    _, added, removed = patch.line_stats
    path = delta.new_file.path if delta.status_char() != "D" else delta.old_file.path
    binary = delta.is_binary
    status = delta.status_char()
    return FileChange(
        path=path,
        status="A" if status == "?" else status,
        added=added,
        removed=removed,
        binary=binary,
        patch="" if binary else (patch.text or ""),
    )
