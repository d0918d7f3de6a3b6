"""Git asked in-process (libgit2, through pygit2) wherever no work tree's files or network
are involved: reading objects and refs, moving refs in one locked transaction, a clone's
changed paths, a shared clone of a repository on this machine, and writing trees and
commits (a step's commit once `git add -A` has staged it). What touches a work tree or
the network stays `git` processes (workspace/runner.py): checkout, clean, add, fetch,
push, a clone from elsewhere, merge.

A library here, processes there, because a git process costs many times what libgit2 does to
answer one of these questions (docs/benchmarks.md#figures-behind-individual-choices).
Checkout, clean and add stay processes: git's rules for a work tree (ignored files, nested
repositories, attributes) are what the crash tests pin, and each is one process a step.
Every function here is checked against the git command it stands for
(tests/integration/test_git_objects.py).

Repositories are opened for each call, by path, never searching above it: a clone
deleted under a running step fails here as it does for git with GIT_CEILING_DIRECTORIES.
libgit2 runs no hooks, filters or fsmonitor, so nothing a model wrote runs here either.
Plain synchronous code (no Temporal imports), like the runner.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pygit2
from pygit2.enums import (
    FileMode,
    FileStatus,
    ObjectType,
    ReferenceType,
    RepositoryOpenFlag,
)

from loopworks.workspace.runner import GIT_IN_PROCESS, GitError

# As git's --follow-symlinks: links followed this many times on one path, no more.
_MAX_LINKS = 40
_CHANGED = ~(FileStatus.CURRENT | FileStatus.IGNORED)
# As git's core.filesRefLockTimeout default: how long a locked ref is waited for.
_REF_LOCK_TIMEOUT_S = 0.1


def open_repository(path: str | Path) -> pygit2.Repository:
    """The repository at `path` (a work tree or a git dir), never one above it. As for git,
    a directory whose HEAD is not a ref or a commit is none (libgit2 opens it)."""
    try:
        repo = pygit2.Repository(str(path), RepositoryOpenFlag.NO_SEARCH)
        repo.lookup_reference("HEAD")
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        raise GitError(f"{path} is not a git repository: {exc}") from exc
    return repo


def commit_of(repo: pygit2.Repository, spec: str) -> str | None:
    """The full sha of the commit `spec` names (`rev-parse --verify <spec>^{commit}`), or
    None when it names none there."""
    GIT_IN_PROCESS.add(["rev-parse"])
    try:
        found = repo.revparse_single(spec)
        return str(found.peel(pygit2.Commit).id)
    except (pygit2.GitError, KeyError, ValueError, pygit2.InvalidSpecError):
        return None


def holds_commit(path: str | Path, spec: str) -> bool:
    """Whether the repository at `path` exists and has the commit `spec` names."""
    try:
        repo = open_repository(path)
    except GitError:
        return False
    return commit_of(repo, spec) is not None


def tree_of(repo: pygit2.Repository, spec: str) -> pygit2.Tree | None:
    """The tree of the commit `spec` names, or None when it names no commit there."""
    try:
        return repo.revparse_single(spec).peel(pygit2.Commit).tree
    except (pygit2.GitError, KeyError, ValueError, pygit2.InvalidSpecError):
        return None


def tree_paths(
    repo: pygit2.Repository, spec: str, directory: str | None = None
) -> list[str] | None:
    """What `git ls-tree -r --name-only <spec> -- <directory>/` lists: the path from the
    root of every file, symlink and submodule under `directory` (None: the whole tree), in
    no set order; None when `spec` names no commit there."""
    root = tree_of(repo, spec)
    if root is None:
        return None
    GIT_IN_PROCESS.add(["ls-tree"])
    prefix = ""
    if directory is not None:
        try:
            under = root[directory]
        except (KeyError, ValueError):
            return []
        if under.type != ObjectType.TREE:
            return []
        root, prefix = repo[under.id].peel(pygit2.Tree), f"{directory.rstrip('/')}/"
    paths: list[str] = []
    pending = [(root, prefix)]
    while pending:
        tree, at = pending.pop()
        for entry in tree:
            if entry.type == ObjectType.TREE:
                pending.append((repo[entry.id].peel(pygit2.Tree), f"{at}{entry.name}/"))
            else:
                paths.append(f"{at}{entry.name}")
    return paths


def tree_size(repo: pygit2.Repository, spec: str) -> int | None:
    """Bytes a checkout of the commit `spec` names writes: its blobs' sizes, each path
    counted (`git ls-tree -r -l` summed), read from object headers, never inflated; None
    when `spec` names no commit there. A subtree repeated under many names (a "git
    bomb") is sized once: the cost is the distinct objects, not the paths they make."""
    root = tree_of(repo, spec)
    if root is None:
        return None
    GIT_IN_PROCESS.add(["ls-tree"])
    sizes: dict[pygit2.Oid, int] = {}
    # Depth first without recursion (a tree can nest deeper than Python's stack): a
    # tree is summed once all its subtrees are.
    pending: list[tuple[pygit2.Tree, bool]] = [(root, False)]
    while pending:
        tree, expanded = pending.pop()
        if tree.id in sizes:
            continue
        subtrees = [repo[e.id].peel(pygit2.Tree) for e in tree if e.type == ObjectType.TREE]
        if not expanded:
            pending.append((tree, True))
            pending.extend((sub, False) for sub in subtrees if sub.id not in sizes)
            continue
        # A submodule's commit is not checked out with the tree: it counts nothing.
        blobs = (repo.odb.read_header(e.id)[1] for e in tree if e.type == ObjectType.BLOB)
        sizes[tree.id] = sum(blobs) + sum(sizes[sub.id] for sub in subtrees)
    return sizes[root.id]


def read_path(
    repo: pygit2.Repository, tree: pygit2.Tree, path: str, follow_symlinks: bool = False
) -> tuple[str, bytes] | None:
    """What `path` holds in `tree` as (kind, content), or None when nothing is there, as
    `git cat-file --batch` answers `<commit>:<path>`.

    kind is the object's type ("blob" with its bytes, "tree", "commit" for a submodule).
    Without `follow_symlinks`, a symlink is the blob of its target's name and a symlink on
    the way finds nothing. With it, links inside the tree are followed, and one that leads
    out of it (absolute, or above the root) is ("symlink", b"").

    GitError when the store cannot give an object the tree names (a clone's borrowed
    store deleted under it, say): the caller can ask another repository."""
    GIT_IN_PROCESS.add(["cat-file"])
    try:
        if not follow_symlinks:
            try:
                entry = tree[path]
            except (KeyError, ValueError):
                return None
            return _contents(repo, entry)
        return _follow(repo, tree, path)
    except (KeyError, pygit2.GitError) as exc:
        raise GitError(f"reading {path} from {repo.path} failed: {exc}") from exc


def _contents(repo: pygit2.Repository, entry: pygit2.Object) -> tuple[str, bytes]:
    if entry.type == ObjectType.BLOB:
        return "blob", repo[entry.id].read_raw()
    return ("tree", b"") if entry.type == ObjectType.TREE else ("commit", b"")


def _follow(repo: pygit2.Repository, root: pygit2.Tree, path: str) -> tuple[str, bytes] | None:
    """`path` walked from `root`, symlinks inside the tree followed as a checkout would."""
    pending = [part for part in path.split("/") if part not in ("", ".")]
    walked: list[pygit2.Tree] = [root]  # the directories down to where the walk is
    links = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            if len(walked) == 1:
                return "symlink", b""  # above the root: out of the tree
            walked.pop()
            continue
        try:
            entry = walked[-1][name]
        except KeyError:
            return None
        if entry.filemode == FileMode.LINK:
            links += 1
            target = repo[entry.id].read_raw().decode("utf-8", errors="surrogateescape")
            if target.startswith("/"):
                return "symlink", b""
            if links > _MAX_LINKS:
                return None  # a loop
            # Component by component, as git walks it: `..` after a link leaves the
            # directory the link led to, which no lexical normalisation knows.
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
        elif entry.type == ObjectType.TREE:
            walked.append(repo[entry.id].peel(pygit2.Tree))
        elif pending:
            return None  # a file on the way, not a directory
        else:
            return _contents(repo, entry)
    return "tree", b""


def commit_message_of(repo: pygit2.Repository, commit: str) -> str:
    """The message of `commit`; GitError when `repo` does not hold it."""
    GIT_IN_PROCESS.add(["cat-file"])
    try:
        found = repo.revparse_single(commit).peel(pygit2.Commit)
    except (pygit2.GitError, KeyError, ValueError, pygit2.InvalidSpecError) as exc:
        raise GitError(f"{repo.path} has no commit {commit}: {exc}") from exc
    return found.raw_message.decode("utf-8", errors="replace")


def head_of(repo: pygit2.Repository) -> tuple[str | None, str | None]:
    """(the branch HEAD names, the commit it is at): (None, sha) for a detached HEAD,
    (branch, None) for a branch with no commits yet; `ls-remote --symref <repo> HEAD`."""
    GIT_IN_PROCESS.add(["ls-remote"])
    head = repo.lookup_reference("HEAD")
    if head.type == ReferenceType.SYMBOLIC:
        branch = str(head.target)
        return branch, ref_target(repo, branch)
    return None, str(head.target)


def ref_target(repo: pygit2.Repository, name: str) -> str | None:
    """The commit the ref `name` points to, or None when there is no such ref."""
    GIT_IN_PROCESS.add(["for-each-ref"])
    found = repo.references.get(name)
    return None if found is None else str(found.resolve().target)


def changed_paths(workdir: Path, *, untracked: bool = True) -> list[str]:
    """Paths (relative, sorted) whose content differs from HEAD, untracked files one by one
    and no rename detection: what `git add -A` then `git commit` would record. Without
    `untracked`: only the tracked files changed or deleted."""
    GIT_IN_PROCESS.add(["status"])
    repo = open_repository(workdir)
    try:
        status = repo.status(untracked_files="all" if untracked else "no", ignored=False)
    except pygit2.GitError as exc:
        raise GitError(f"status of {workdir} failed: {exc}") from exc
    return sorted(path for path, flags in status.items() if flags & _CHANGED)


def update_refs(
    repo: pygit2.Repository,
    targets: Mapping[str, str],
    expected: Mapping[str, str | None] | None = None,
    removed: Collection[str] = (),
) -> None:
    """Set each ref of `targets` to its commit and delete each of `removed` in one
    transaction (`update-ref --stdin`), all or none. A ref in `expected` must be at that
    commit (None: must not exist) when locked, or nothing moves and GitError says where
    it is: a compare-and-swap.

    A ref another process holds locked (git's `pack-refs` in `gc --auto`, say) is waited
    for as git waits (core.filesRefLockTimeout, 100 ms), then GitError."""
    GIT_IN_PROCESS.add(["update-ref"])
    deadline = time.monotonic() + _REF_LOCK_TIMEOUT_S
    while True:
        try:
            _move(repo, targets, expected or {}, removed)
            return
        except pygit2.GitError as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                moved = ", ".join([*targets, *removed])
                raise GitError(f"moving {moved} in {repo.path} failed: {exc}") from exc
        time.sleep(0.005)


def delete_refs(repo: pygit2.Repository, names: Sequence[str]) -> list[str]:
    """Delete each ref of `names` that exists, in one transaction (`update-ref --stdin`
    with `delete` lines); the names deleted. A locked ref is waited for as `update_refs`
    waits for one."""
    GIT_IN_PROCESS.add(["update-ref"])
    deadline = time.monotonic() + _REF_LOCK_TIMEOUT_S
    while True:
        present = [name for name in names if repo.references.get(name) is not None]
        try:
            with repo.transaction() as transaction:
                for name in present:
                    transaction.lock_ref(name)
                for name in present:
                    transaction.remove(name)
            return present
        except pygit2.GitError as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise GitError(f"deleting refs in {repo.path} failed: {exc}") from exc
        time.sleep(0.005)


def _move(
    repo: pygit2.Repository,
    targets: Mapping[str, str],
    expected: Mapping[str, str | None],
    removed: Collection[str],
) -> None:
    with repo.transaction() as transaction:
        for name in [*targets, *removed]:
            transaction.lock_ref(name)
        for name, old in expected.items():
            found = repo.references.get(name)
            now = None if found is None else str(found.resolve().target)
            if now != old:
                raise GitError(f"{name} is at {now}, not {old}")
        for name, commit in targets.items():
            transaction.set_target(name, commit, message="loopworks")
        for name in removed:
            transaction.remove(name)


def init_bare(path: Path) -> pygit2.Repository:
    """A new, empty bare repository at `path` (`git init --bare`): somewhere to write
    objects to push, in-process."""
    GIT_IN_PROCESS.add(["init"])
    try:
        return pygit2.init_repository(str(path), bare=True)
    except pygit2.GitError as exc:
        raise GitError(f"making a repository at {path} failed: {exc}") from exc


def clone_shared(source: str | Path, target: Path) -> None:
    """`git clone --shared --no-checkout` of the repository at the local path `source` (a
    work tree or a git dir): `target` borrows its object store (git alternates) and has
    it as `origin`, with nothing checked out and no refs of its own yet (a step's first
    fetch brings branches; its checkout, a tree). In-process, because git starts a shell and
    upload-pack to list refs that nothing here reads."""
    GIT_IN_PROCESS.add(["clone"])
    open_repository(source)  # one git would clone from, or GitError
    # The store's path as given, not resolved (libgit2's repo.path is): git writes it so,
    # and the sandbox binds the path git reads (checks/bwrap.py).
    given = Path(source).absolute()
    store = (given / ".git" if (given / ".git").is_dir() else given) / "objects"
    try:
        repo = pygit2.init_repository(str(target), bare=False, origin_url=str(source))
        # As the runner's clones: no automatic maintenance after each commit and fetch.
        repo.config["maintenance.auto"] = "false"
    except pygit2.GitError as exc:
        raise GitError(f"cloning {source} into {target} failed: {exc}") from exc
    alternates = Path(repo.path) / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{store}\n", encoding="utf-8")


def commit_index(
    workdir: Path, store: Path | None, message: str, author: tuple[str, str], when: datetime
) -> str:
    """Commit what the clone at `workdir` has staged, on HEAD, and move its HEAD there,
    detached: the commit `git commit --allow-empty -m <message>` makes, sha for sha. The
    tree and commit objects go into the repository whose git dir holds `store` (the
    origin's store a clone writes into, workspace/commits.py), else into the clone's."""
    repo = open_repository(workdir)
    target = repo if store is None else open_repository(store.parent)
    parents = [] if repo.head_is_unborn else [str(repo.head.target)]
    try:
        tree = repo.index.write_tree(target)
    except pygit2.GitError as exc:
        raise GitError(f"writing the tree of {workdir} failed: {exc}") from exc
    made = write_commit(target, str(tree), parents, cleaned_message(message), author, when)
    repo.set_head(pygit2.Oid(hex=made))
    return made


def staged_only(workdir: Path, paths: Collection[str]) -> None:
    """The clone's index made HEAD's tree but for `paths`, each of which keeps what is
    staged for it (or its absence): `git read-tree HEAD`, then `git add -A` of just those
    paths, once everything was staged. A commit of it changes no other path."""
    GIT_IN_PROCESS.add(["read-tree"])
    repo = open_repository(workdir)
    head = tree_of(repo, "HEAD")
    if head is None:
        raise GitError(f"{workdir} has no HEAD commit to keep the other paths as")
    try:
        index = repo.index
        index.read()
        kept = [
            pygit2.IndexEntry(entry.path, entry.id, entry.mode)
            for entry in (index[path] for path in sorted(set(paths)) if path in index)
        ]
        index.read_tree(head)
        for path in paths:
            if path in index:
                index.remove(path)
        for entry in kept:
            index.add(entry)
        index.write()
    except pygit2.GitError as exc:
        raise GitError(f"staging only the given paths in {workdir} failed: {exc}") from exc


def cleaned_message(message: str) -> str:
    """`message` as `git commit -m` records it (its "whitespace" cleanup): trailing
    whitespace off every line, blank lines at either end dropped, runs of them made one,
    and a final newline."""
    lines: list[str] = []
    for line in message.split("\n"):
        line = line.rstrip(" \t\r\v\f")
        if line or (lines and lines[-1]):
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "".join(f"{line}\n" for line in lines)


def write_blob(repo: pygit2.Repository, content: bytes) -> str:
    """The blob of `content`, written into `repo`'s store (`hash-object -w`)."""
    GIT_IN_PROCESS.add(["hash-object"])
    return str(repo.create_blob(content))


def write_file_tree(repo: pygit2.Repository, path: str, content: bytes) -> str:
    """A tree holding only `path` (a regular file with `content`), its objects written into
    `repo`'s store: `hash-object -w` and one `mktree` per folder."""
    GIT_IN_PROCESS.add(["mktree"])
    *folders, leaf = path.split("/")
    builder = repo.TreeBuilder()
    builder.insert(leaf, repo.create_blob(content), FileMode.BLOB)
    tree = builder.write()
    for folder in reversed(folders):
        builder = repo.TreeBuilder()
        builder.insert(folder, tree, FileMode.TREE)
        tree = builder.write()
    return str(tree)


def write_files_tree(
    repo: pygit2.Repository, blobs: Mapping[str, str], contents: Mapping[str, bytes]
) -> str:
    """A tree of regular files: each of `contents` (path to bytes) written into `repo`'s
    store, and each of `blobs` (path to blob id) a blob the store holds already. A blob
    of `blobs` the store lacks, or one `contents` wrote under another id, is a GitError
    (`hash-object -w` and one `mktree` per folder)."""
    GIT_IN_PROCESS.add(["mktree"])
    ids = dict(blobs)
    for path, data in contents.items():
        made = str(repo.create_blob(data))
        if ids.setdefault(path, made) != made:
            raise GitError(f"{path} was written as blob {made}, not {ids[path]}")
    root: dict[str, object] = {}
    for path, blob in ids.items():
        if blob not in repo:
            raise GitError(f"{repo.path} has no blob {blob} for {path}")
        *folders, leaf = path.split("/")
        node = root
        for folder in folders:
            node = node.setdefault(folder, {})  # type: ignore[assignment]
        node[leaf] = blob
    return _write_tree(repo, root)


def _write_tree(repo: pygit2.Repository, node: Mapping[str, object]) -> str:
    builder = repo.TreeBuilder()
    for name, value in sorted(node.items()):
        if isinstance(value, dict):
            builder.insert(name, pygit2.Oid(hex=_write_tree(repo, value)), FileMode.TREE)
        else:
            builder.insert(name, pygit2.Oid(hex=str(value)), FileMode.BLOB)
    return str(builder.write())


def blobs_in(
    repo: pygit2.Repository, tree: pygit2.Tree, folders: tuple[str, ...]
) -> dict[str, str]:
    """The regular files directly in each of `folders` of `tree`: path to blob id."""
    found: dict[str, str] = {}
    for folder in folders:
        try:
            entry = tree[folder]
        except KeyError:
            continue
        sub = repo[entry.id]
        if not isinstance(sub, pygit2.Tree):
            continue
        for child in sub:
            if child.filemode == FileMode.BLOB:
                found[f"{folder}/{child.name}"] = str(child.id)
    return found


def write_commit(
    repo: pygit2.Repository,
    tree: str,
    parents: list[str],
    message: str,
    author: tuple[str, str],
    when: datetime,
) -> str:
    """The commit of `tree` (`commit-tree`), written into `repo`'s store and on no ref:
    same tree, parents, message, author and `when`, same sha."""
    GIT_IN_PROCESS.add(["commit-tree"])
    # In UTC, whole seconds: equal instants make equal commits whatever the worker's zone.
    aware = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    signature = pygit2.Signature(author[0], author[1], int(aware.timestamp()), 0)
    # As `git commit-tree -m`: the message ends with a newline.
    text = message if message.endswith("\n") else f"{message}\n"
    made = repo.create_commit(None, signature, signature, text, tree, parents)
    return str(made)
