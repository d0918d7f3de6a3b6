"""Object stores a clone reads from besides its own (git alternates), and the origins whose
store a run's clone writes into directly.

Plain functions over files: no git process, so a step can ask them on every call.
"""

from __future__ import annotations

import os
from pathlib import Path

# A file in a bare origin this service created (the embedded default origin). Its presence
# lets the service's own clones write objects into the origin's store and move its refs
# without a push (workspace/commits.py); an origin without it is only ever pushed to.
OWN_ORIGIN_MARK = "loopworks-origin"
_OWN_ORIGIN_TEXT = (
    "This bare repository was created by loopworks as its default origin. loopworks\n"
    "workers on this machine write objects into it and move its refs directly, as a push\n"
    "would; it runs no hooks. Delete this file to make them push instead.\n"
)

# As git itself: alternates of alternates are followed this deep and no deeper.
_ALTERNATES_DEPTH = 5


def mark_own_origin(bare: Path) -> None:
    (bare / OWN_ORIGIN_MARK).write_text(_OWN_ORIGIN_TEXT, encoding="utf-8")


def own_origin_store(origin: str) -> Path | None:
    """The object store of `origin` (an absolute path) when this service created it and
    its clones may write there directly; None for any other origin."""
    path = Path(origin)
    if not path.is_absolute() or not (path / OWN_ORIGIN_MARK).is_file():
        return None
    return path / "objects"


def borrowed_stores(git_dir: Path) -> list[Path]:
    """Every object store a clone reads besides its own, whether it still exists or not:
    its git alternates and theirs (an evaluation slot borrows its run's clone's store,
    which borrows the embedded origin's)."""
    found: list[Path] = []
    level = [git_dir / "objects"]
    for _ in range(_ALTERNATES_DEPTH):
        level = [store for objects in level for store in _alternates(objects)]
        level = [store for store in dict.fromkeys(level) if store not in found]
        found += level
    return found


# The most of a `.git` file or a `commondir` file read: a path, not a document.
_POINTER_BYTES = 4096


def reached_by_git(repository: str) -> list[str]:
    """Where git and libgit2 go besides the repository at `repository` (a work tree or a
    git dir, its path resolved) when they open it, each resolved: the git dir its `.git`
    file names, the common dir a `commondir` file names, and the object stores its
    alternates name, theirs too. A repository on this machine is judged by these as well
    as by its own path (workspace/origin_policy.py)."""
    root = Path(repository)
    git_dir = root
    dotgit = root / ".git"
    if dotgit.is_file():
        named = _pointer(dotgit)
        if named is not None and named.startswith("gitdir:"):
            git_dir = root / named.removeprefix("gitdir:").strip()
    elif dotgit.is_dir():
        git_dir = dotgit
    common = git_dir
    if (git_dir / "commondir").is_file():
        named = _pointer(git_dir / "commondir")
        if named:
            common = git_dir / named
    reached = [git_dir, common, *borrowed_stores(common)]
    real = dict.fromkeys(os.path.realpath(path) for path in reached)
    return [path for path in real if path not in (str(root), os.path.join(root, ".git"))]


def _pointer(path: Path) -> str | None:
    """The first line of a small pointer file, or None when it cannot be read."""
    try:
        with path.open("rb") as handle:
            return handle.read(_POINTER_BYTES).decode("utf-8", "replace").splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def _alternates(objects: Path) -> list[Path]:
    try:
        lines = (objects / "info" / "alternates").read_text().splitlines()
    except OSError:
        return []
    # As git reads them: not resolved, for a symlink on the way stays in the path git uses
    # (and the sandbox must bind that path).
    return [Path(os.path.normpath(objects / line.strip())) for line in lines if line.strip()]


def writes_into(git_dir: Path, origin: str) -> Path | None:
    """The object store of `origin` when the clone at `git_dir` borrows it and may write
    into it (its origin is this service's own): commits made there need no push."""
    store = own_origin_store(origin)
    if store is None:
        return None
    direct = {os.path.realpath(borrowed) for borrowed in _alternates(git_dir / "objects")}
    return store if os.path.realpath(store) in direct else None
