"""The worker's clones on disk, as retention sees them: when each was last used, how
large it is, and removing those workspace/retention.py decides to.

A step marks the clone it uses (`used`: the entry's mtime, one syscall); what git writes
deep inside a clone does not move its top directory's mtime, so that mark is the age.
Plain synchronous code (no Temporal imports): the worker sweeps from a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from loopworks.workspace.refs import RUN_ID_SEGMENTS
from loopworks.workspace.retention import Clone, Decision, RetentionPolicy, to_remove
from loopworks.workspace.runner import _rmtree, tree_bytes

logger = logging.getLogger(__name__)

# Origins' bare caches, one directory each beside its lock file (workspace/origin.py).
CACHE_DIR = ".cache"
# Merge queues' lock files (workspace/integration.py): kept, they are what excludes.
LOCKS_DIR = ".locks"
# A removal in progress: renamed first, so no step finds half a clone.
_SWEPT = ".swept-"


def entry_of(root: Path, path: Path) -> Path | None:
    """The entry under `root` that `path` belongs to: `<root>/<first component>`, or
    `<root>/.cache/<key>` for an origin's cache; None for a path outside `root`."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return None
    if not parts or parts[0] == LOCKS_DIR:
        return None
    if parts[0] == CACHE_DIR:
        return root / CACHE_DIR / parts[1] if len(parts) > 1 else None
    return root / parts[0]


def used(root: Path, path: Path) -> None:
    """Mark the entry holding `path` as used now: retention keeps it for as long again."""
    entry = entry_of(root, path)
    if entry is not None:
        with contextlib.suppress(OSError):  # gone meanwhile: nothing to keep
            os.utime(entry)


def clones(root: Path, measure: bool, now: float | None = None) -> list[Clone]:
    """Every removable entry under `root`, with its idle time (and size, if `measure`):
    only what the workspace code makes, so a LOOPS_WORKSPACES_DIR shared with anything
    else loses nothing else."""
    now = time.time() if now is None else now
    found: list[Clone] = []
    for path in _entries(root):
        if path.name.startswith(_SWEPT):
            continue  # already decided: `sweep` finishes it whatever its age
        if not _ours(path, cache=path.parent != root):
            continue
        try:
            mtime = path.lstat().st_mtime
        except OSError:
            continue
        size = tree_bytes(path) if measure else 0
        name = path.relative_to(root).as_posix()
        found.append(Clone(name=name, idle_seconds=max(0.0, now - mtime), bytes=size))
    return found


# A clone being made, beside where it goes (workspace/git.py `_clone`).
_STAGING = re.compile(r"^\..+\.clone-[0-9a-f]{32}$")
# An origin's cache: a digest of its URL (workspace/origin.py).
_CACHE_KEY = re.compile(r"^[0-9a-f]{16}$")


def _ours(path: Path, cache: bool, depth: int = RUN_ID_SEGMENTS) -> bool:
    """Whether `path` is something the workspace code made: a clone (its `.git` a
    directory), one being made, an origin's bare cache, or a task graph's directory of
    its tasks' clones (run ids nest up to RUN_ID_SEGMENTS deep). Never a link."""
    if path.is_symlink() or not path.is_dir():
        return False
    if cache:
        return _CACHE_KEY.match(path.name) is not None
    if _STAGING.match(path.name) or (path / ".git").is_dir():
        return True
    if depth <= 1:
        return False
    inside = list(path.iterdir())
    if not inside:  # a task's directory whose clones went: ours inside a graph's only
        return depth < RUN_ID_SEGMENTS
    return all(_ours(p, False, depth - 1) for p in inside)


def _entries(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    entries: list[Path] = []
    for path in root.iterdir():
        if path.name == LOCKS_DIR:
            continue
        if path.name == CACHE_DIR and path.is_dir() and not path.is_symlink():
            entries.extend(p for p in path.iterdir() if p.suffix != ".lock")
        else:
            entries.append(path)
    return entries


def remove(root: Path, name: str) -> bool:
    """Remove the entry `name` (as `clones` names it); False when it is in use (a cache
    whose lock is held) or already gone. A symlink is removed, never followed."""
    path = root / name
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            return True
        return False
    if path.parent != root:
        return _under_lock(path, lambda: _aside_and_remove(path))
    return _aside_and_remove(path)


def _aside_and_remove(path: Path) -> bool:
    """Renamed first: a step that looks for it finds no clone (and clones again), never
    a half-removed one; a worker stopped mid-removal leaves a name the next sweep takes."""
    aside = path.with_name(f"{_SWEPT}{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    _rmtree(aside)
    return True


def _under_lock(path: Path, action: Callable[[], bool]) -> bool:
    """`action` on an origin's cache, only while nobody reads it: its lock (the one
    workspace/origin.py holds while reading) taken without waiting."""
    lock = path.with_name(f"{path.name}.lock")
    try:
        handle = lock.open("a")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            return action()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sweep(root: Path, policy: RetentionPolicy, now: float | None = None) -> Decision:
    """Remove what retention decides; answer the decision (what was removed, and by how
    much the clones in use still exceed the total, when they do)."""
    for path in _entries(root):
        if path.name.startswith(_SWEPT):  # a removal a stopped worker left half done
            _rmtree(path)
    decision = to_remove(clones(root, policy.measures, now), policy)
    for name in decision.remove:
        if remove(root, name):
            logger.info("removed %s: no step used it within the retention policy", name)
    if decision.over_by:
        logger.warning(
            "the clones in use take %d bytes more than LOOPS_CLONES_MAX_BYTES=%d; "
            "none of them is removed while a step may be using it",
            decision.over_by,
            policy.max_bytes,
        )
    return decision
