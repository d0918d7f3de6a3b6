"""A client names any origin it is allowed, and the worker clones it whole into its data
directory: without a cap, a large repository (or a small pack of a large tree) fills the
worker's disk. With LOOPS_MAX_CLONE_BYTES the clone, the fetch or the origin's cache is
stopped past the cap and removed, the step fails saying which cap, and nothing is kept.

Real repositories on disk, reached by path and over file:// (git's pack transport), with
the cap set low."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.runner import CloneTooLargeError
from tests.integration.stack import bare_remote, git

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
CAP = MIB
WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def _ws(tmp_path: Path, cap: int | None = CAP) -> GitWorkspaces:
    return GitWorkspaces(tmp_path / "workspaces", "t", "t@t", max_clone_bytes=cap)


def _push_file(bare: Path, name: str, content: bytes) -> str:
    """A commit on origin's `main` adding `name`; its sha."""
    scratch = bare.parent / f"scratch-{name}"
    git("clone", "--quiet", str(bare), str(scratch))
    (scratch / name).write_bytes(content)
    git("add", name, cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", f"add {name}", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    return git("rev-parse", "HEAD", cwd=scratch).strip()


@pytest.fixture
def large(tmp_path: Path) -> tuple[Path, str]:
    """An origin whose objects are 3 MiB that do not compress."""
    bare = bare_remote(tmp_path / "large")
    return bare, _push_file(bare, "data.bin", os.urandom(3 * MIB))


def _leftovers(ws: GitWorkspaces) -> list[str]:
    """Whatever is left under the workspaces root but lock files."""
    if not ws.root.exists():
        return []
    return sorted(
        str(p.relative_to(ws.root))
        for p in ws.root.rglob("*")
        if p.is_file() and p.suffix != ".lock"
    )


@pytest.mark.parametrize("by_url", [False, True], ids=["path", "file-url"])
def test_a_clone_over_the_cap_fails_naming_it_and_leaves_nothing(
    tmp_path: Path, large: tuple[Path, str], by_url: bool
) -> None:
    bare, commit = large
    origin = bare.as_uri() if by_url else str(bare)
    ws = _ws(tmp_path)
    with pytest.raises(CloneTooLargeError) as raised:
        ws.checkout("r-1", origin, commit)
    assert "LOOPS_MAX_CLONE_BYTES" in str(raised.value)
    assert f"{CAP} bytes" in str(raised.value)
    assert not ws.workdir("r-1").exists()
    assert _leftovers(ws) == []


def test_the_same_origin_under_a_larger_cap_is_cloned(
    tmp_path: Path, large: tuple[Path, str]
) -> None:
    bare, commit = large
    ws = _ws(tmp_path, cap=16 * MIB)
    assert (ws.checkout("r-1", bare.as_uri(), commit) / "data.bin").stat().st_size == 3 * MIB


def test_a_clone_is_stopped_while_it_arrives_not_after(tmp_path: Path) -> None:
    """git is killed once the pack it is writing passes the cap: the disk never holds the
    whole of a large origin (here 48 MiB, capped at 1; what it overshoots by is what
    arrives between two measures, and a local copy is fast)."""
    bare = bare_remote(tmp_path / "huge")
    commit = _push_file(bare, "huge.bin", os.urandom(48 * MIB))
    ws = _ws(tmp_path)
    peak = 0
    real = ws._git_capped

    def measured(*args: object, **kwargs: object) -> None:
        nonlocal peak
        try:
            real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            staged = [p for p in ws.root.glob(".r-1.clone-*")]
            peak = max(
                [
                    peak,
                    *(sum(f.stat().st_size for f in s.rglob("*") if f.is_file()) for s in staged),
                ]
            )

    ws._git_capped = measured  # type: ignore[method-assign]
    with pytest.raises(CloneTooLargeError):
        ws.checkout("r-1", bare.as_uri(), commit)
    assert peak < 24 * MIB, f"the clone reached {peak} bytes before it was stopped"
    assert _leftovers(ws) == []


def test_a_small_pack_of_a_large_tree_is_refused_before_checkout(tmp_path: Path) -> None:
    """Zeros compress to almost nothing: the pack is tiny, the checkout would write 8 MiB."""
    bare = bare_remote(tmp_path / "bomb")
    commit = _push_file(bare, "zeros.bin", bytes(8 * MIB))
    assert sum(f.stat().st_size for f in bare.rglob("*") if f.is_file()) < CAP
    ws = _ws(tmp_path)
    with pytest.raises(CloneTooLargeError) as raised:
        ws.checkout("r-1", bare.as_uri(), commit)
    assert f"the tree of {commit}" in str(raised.value)
    assert not ws.workdir("r-1").exists()


def test_a_repeated_subtree_is_sized_by_its_paths(tmp_path: Path) -> None:
    """A "git bomb": one 64 KiB blob under 16 x 16 x 16 names is a tree of 4096 files,
    256 MiB checked out, from a few objects."""
    bare = bare_remote(tmp_path / "gitbomb")
    blob = (
        subprocess.run(
            ["git", "--git-dir", str(bare), "hash-object", "-w", "--stdin"],
            input=os.urandom(64 * 1024),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    tree = blob
    for kind in ("blob", "tree", "tree"):
        mode = "100644" if kind == "blob" else "040000"
        listing = "".join(f"{mode} {kind} {tree}\tf{i:02d}\n" for i in range(16))
        tree = subprocess.run(
            ["git", "--git-dir", str(bare), "mktree"],
            input=listing,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    parent = git("--git-dir", str(bare), "rev-parse", "main").strip()
    commit = git("--git-dir", str(bare), "commit-tree", tree, "-p", parent, "-m", "bomb").strip()
    git("--git-dir", str(bare), "update-ref", "refs/heads/main", commit)
    ws = _ws(tmp_path, cap=64 * MIB)
    with pytest.raises(CloneTooLargeError):
        ws.checkout("r-1", bare.as_uri(), commit)
    assert not ws.workdir("r-1").exists()


def test_a_fetch_that_takes_a_clone_over_the_cap_removes_it(tmp_path: Path) -> None:
    """Cloned small, then origin's next commit brings 3 MiB: the step fetching it fails,
    and the clone, now of no use, is removed."""
    bare = bare_remote(tmp_path / "grows")
    small = git("--git-dir", str(bare), "rev-parse", "main").strip()
    ws = _ws(tmp_path)
    ws.checkout("r-1", str(bare), small)
    grown = _push_file(bare, "data.bin", os.urandom(3 * MIB))
    with pytest.raises(CloneTooLargeError):
        ws.checkout("r-1", str(bare), grown)
    assert not ws.workdir("r-1").exists()


def test_an_origins_cache_over_the_cap_is_removed(tmp_path: Path, large: tuple[Path, str]) -> None:
    """Reading a remote origin's file (the artifact, a trajectory) fills a bare cache."""
    bare, commit = large
    ws = _ws(tmp_path)
    with pytest.raises(CloneTooLargeError):
        ws.read_file(bare.as_uri(), commit, "README.md")
    assert _leftovers(ws) == []


def test_with_no_cap_nothing_changes(tmp_path: Path, large: tuple[Path, str]) -> None:
    bare, commit = large
    ws = _ws(tmp_path, cap=None)
    assert ws.read_file(bare.as_uri(), commit, "README.md") == "# demo project\n"
    assert (ws.checkout("r-1", bare.as_uri(), commit) / "data.bin").is_file()


def test_a_tree_nested_deeper_than_pythons_stack_is_sized(tmp_path: Path) -> None:
    import pygit2

    from loopworks.workspace.objects import open_repository, tree_size

    bare = bare_remote(tmp_path / "deep")
    repo = pygit2.Repository(str(bare))
    tree = repo.TreeBuilder()
    tree.insert("leaf", repo.create_blob(b"x" * 10), pygit2.enums.FileMode.BLOB)
    oid = tree.write()
    for _ in range(3000):
        parent = repo.TreeBuilder()
        parent.insert("d", oid, pygit2.enums.FileMode.TREE)
        oid = parent.write()
    head = repo.revparse_single("main").id
    sig = pygit2.Signature("t", "t@t")
    commit = repo.create_commit(None, sig, sig, "deep", oid, [head])
    assert tree_size(open_repository(bare), f"{commit}^{{commit}}") == 10
