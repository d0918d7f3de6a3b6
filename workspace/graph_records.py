"""Records in a run's workspace that are not the agent's, put back as a commit has them:
a task graph's record in one of its task loops, as the task's base commit has it
(docs/graphs.md#the-ledger-is-the-orchestrators-alone), and the run's own records under
`.loops/`, as the step's start commit has them (docs/workspace.md#the-runs-record-in-git).

The ledger and everything under `docs/tasks/` are the graph's orchestrator's; `.loops/`
is the worker's. An agent's file tools refuse to write them, but its commands run in a
sandbox that may write the whole workspace: what a command changed there is undone here,
by the worker, before the work is committed and judged. The run's branch then never
carries it (a task's merge is never refused for it, a forged event never read back as
the run's); the model is told what was undone of the graph's record, not asked to undo it.

Only paths the given `owned` says are the record's (`schemas.tasks.orchestrator_owned`,
`schemas.steps.run_owned`, each in any case of spelling) are touched, and the
directories on the way to them when a command put something else in their place. Every
read and write goes through workspace/files.py: no symlink a command left is followed.
Plain synchronous code, like the rest of workspace/.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, ObjectType

from loopworks.schemas.steps import run_owned
from loopworks.schemas.tasks import orchestrator_owned
from loopworks.workspace import files
from loopworks.workspace.objects import changed_paths, open_repository, tree_of
from loopworks.workspace.runner import GitError

__all__ = ["keep_run_records", "record_changes", "restore_record"]

# Which repository paths a record is made of.
Owned = Callable[[str], bool]


def keep_run_records(workdir: Path, start: str) -> list[str]:
    """The run's own records (`run_owned`) as the step's start commit has them, before the
    worker writes its own and commits: what a command did to them is undone. Returns the
    paths put back; raises as `restore_record` does (the step then fails rather than
    commit records it did not write)."""
    return restore_record(workdir, start, record_changes(workdir, start, run_owned), run_owned)


def record_changes(workdir: Path, base: str, owned: Owned = orchestrator_owned) -> list[str]:
    """Paths of the record (`owned`: the graph's unless told) that a commit of the
    workspace would record other than `base` has them: changed since HEAD (as `git add -A`
    sees them), or changed between `base` and HEAD. A superset at worst; `restore_record`
    tells what really differs."""
    repo = open_repository(workdir)
    base_tree = _tree(repo, workdir, base)
    found = {path for path in changed_paths(workdir) if owned(path)}
    head = tree_of(repo, "HEAD")
    if head is not None and head.id != base_tree.id:
        for delta in base_tree.diff_to_tree(head).deltas:
            found.update(path for path in (delta.old_file.path, delta.new_file.path) if owned(path))
    return sorted(found)


def restore_record(
    workdir: Path, base: str, paths: Iterable[str], owned: Owned = orchestrator_owned
) -> list[str]:
    """Make each of `paths` (those of the record, `owned`: the graph's unless told; others
    are left alone) what it is at `base`: the file written again, or whatever `base` lacks
    removed; a directory on the way that something else replaced is a directory again.
    Returns the paths that differed and were put back, sorted; a path already as `base`
    has it is not one.

    GitError when the workspace lacks `base`; `files.UnsafePath` or OSError when a path
    cannot be written (the caller says the record is not restored)."""
    repo = open_repository(workdir)
    tree = _tree(repo, workdir, base)
    kept = {path for path in paths if owned(path)}
    undone: list[str] = []
    # Parents first: a directory a command replaced is one again before its files return.
    for path in sorted(kept, key=lambda p: (p.count("/"), p)):
        undone += _restore(repo, tree, workdir, files.checked(path))
    return sorted(set(undone))


def _tree(repo: pygit2.Repository, workdir: Path, commit: str) -> pygit2.Tree:
    tree = tree_of(repo, commit)
    if tree is None:
        raise GitError(f"{workdir} has no commit {commit}")
    return tree


def _restore(repo: pygit2.Repository, tree: pygit2.Tree, workdir: Path, path: str) -> list[str]:
    """`path` as `tree` has it; the paths that differed (it, and any on its way)."""
    entry = _entry(tree, path)
    if entry is None:
        return _absent(workdir, path)
    if entry.type == ObjectType.TREE:
        return _directory(workdir, path)
    if entry.type != ObjectType.BLOB:
        return []  # a submodule's commit: git checks out no file for it
    parent = path.rpartition("/")[0]
    undone = _directory(workdir, parent) if parent else []
    data = repo[entry.id].read_raw()
    here = files.lstat(workdir, path)
    if entry.filemode == FileMode.LINK:
        target = data.decode("utf-8", errors="surrogateescape")
        if here is not None and files.readlink(workdir, path) == target:
            return undone
        files.remove(workdir, path)
        files.symlink(workdir, path, target)
        return [*undone, path]
    executable = entry.filemode == FileMode.BLOB_EXECUTABLE
    if here is not None and _same_file(workdir, path, here, data, executable):
        return undone
    if here is not None and not stat.S_ISREG(here.st_mode):
        files.remove(workdir, path)  # a directory, a link or a FIFO where the file was
    files.write_bytes(workdir, path, data, mode=0o755 if executable else 0o644)
    return [*undone, path]


def _entry(tree: pygit2.Tree, path: str) -> pygit2.Object | None:
    """The tree's entry at `path` itself (no symlink followed), None when there is none."""
    try:
        return tree[path]
    except (KeyError, ValueError):
        return None


def _absent(workdir: Path, path: str) -> list[str]:
    """Nothing at `path`, as at the base."""
    try:
        if files.lstat(workdir, path) is None:
            return []
    except files.Refused:
        return []  # beyond a symlink: not a path a commit records
    files.remove(workdir, path)
    return [path]


def _directory(workdir: Path, path: str) -> list[str]:
    """A directory at `path` and on its way, each thing in their place removed first
    (a missing directory is made, and is no change a commit records)."""
    undone: list[str] = []
    walked = ""
    for part in path.split("/"):
        walked = f"{walked}/{part}" if walked else part
        here = files.lstat(workdir, walked)
        if here is not None and not stat.S_ISDIR(here.st_mode):
            files.remove(workdir, walked)
            undone.append(walked)
        files.mkdir(workdir, walked)
    return undone


def _same_file(
    workdir: Path, path: str, here: os.stat_result, data: bytes, executable: bool
) -> bool:
    """Whether the regular file at `path` holds `data` with the base's executable bit
    (the owner's, as git reads it)."""
    if not stat.S_ISREG(here.st_mode) or here.st_size != len(data):
        return False
    if bool(here.st_mode & stat.S_IXUSR) != executable:
        return False
    return files.read_bytes(workdir, path, len(data), follow=False) == data
