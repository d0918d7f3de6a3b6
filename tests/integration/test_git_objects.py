"""Git's plumbing in-process (workspace/objects.py) answers as git itself does: each
function is checked against the git command it stands for, on real repositories."""

from __future__ import annotations

import subprocess
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from loopworks.workspace import objects
from loopworks.workspace.runner import GitError
from tests.integration.stack import bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
AUTHOR = ("loops", "l@example.com")


def git_at_when(*args: str, cwd: Path) -> str:
    """git as AUTHOR, at WHEN: what an in-process commit is compared with."""
    date = WHEN.isoformat()
    env = {
        "GIT_AUTHOR_NAME": AUTHOR[0],
        "GIT_AUTHOR_EMAIL": AUTHOR[1],
        "GIT_COMMITTER_NAME": AUTHOR[0],
        "GIT_COMMITTER_EMAIL": AUTHOR[1],
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd),
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of a bare origin, its tree full of the cases a reader must get right:
    links inside, out of the tree, dangling, looping, through a directory, and a file
    taken for a directory."""
    workdir = tmp_path / "clone"
    git("clone", "--quiet", str(bare_remote(tmp_path)), str(workdir))
    (workdir / "docs" / "deep").mkdir(parents=True)
    (workdir / "docs" / "notes.md").write_text("notes\n")
    (workdir / "docs" / "deep" / "x.md").write_text("deep\n")
    links = {
        "inside.md": "docs/notes.md",
        "docs/up.md": "../README.md",
        "docs/deep/upup.md": "../../docs/notes.md",
        "escape.md": "/etc/hostname",
        "climb.md": "../outside.md",
        "dangling.md": "nowhere.md",
        "loop-a": "loop-b",
        "loop-b": "loop-a",
        "dir-link": "docs/deep",
        "chain.md": "inside.md",
        "physical.md": "dir-link/../notes.md",  # `..` from where dir-link leads: docs/
    }
    for name, target in links.items():
        (workdir / name).symlink_to(target)
    git("add", "-A", cwd=workdir)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "cases", cwd=workdir)
    return workdir


PATHS = [
    "README.md",
    "docs/notes.md",
    "inside.md",
    "chain.md",
    "docs/up.md",
    "docs/deep/upup.md",
    "escape.md",
    "climb.md",
    "dangling.md",
    "loop-a",
    "dir-link/x.md",
    "physical.md",
    "dir-link",
    "docs",
    "README.md/x",
    "missing.md",
    "docs/missing.md",
]


def _cat_file(workdir: Path, names: list[str], follow: bool) -> list[tuple[str, bytes] | None]:
    """(kind, content) per name as `git cat-file --batch` prints it; None for "missing"."""
    args = ["git", "cat-file", "--batch", *(["--follow-symlinks"] if follow else [])]
    text = "".join(f"{name}\n" for name in names).encode()
    out = subprocess.run(args, cwd=workdir, input=text, capture_output=True, check=True).stdout
    found: list[tuple[str, bytes] | None] = []
    pos = 0
    for _ in names:
        end = out.index(b"\n", pos)
        header = out[pos:end].split(b" ")
        pos = end + 1
        if header[-1] == b"missing":
            found.append(None)
        elif len(header) == 3:  # "<oid> <type> <size>", then content
            size = int(header[2])
            found.append((header[1].decode(), out[pos : pos + size]))
            pos += size + 1
        else:  # "<word> <size>", then content: a link git would not follow
            size = int(header[1])
            found.append((header[0].decode(), out[pos : pos + size]))
            pos += size + 1
    return found


def _as_read(found: tuple[str, bytes] | None) -> tuple[str, bytes] | None:
    """What read_path answers for git's answer: a file's bytes, a link out of the tree
    with no content, and nothing for links git could not follow for any other reason."""
    if found is None or found[0] in ("dangling", "loop", "notdir"):
        return None
    kind, content = found
    return (kind, content) if kind == "blob" else (kind, b"")


@pytest.mark.parametrize("follow", [False, True], ids=["as-stored", "following-links"])
def test_reading_a_path_answers_as_cat_file(clone: Path, follow: bool) -> None:
    repo = objects.open_repository(clone)
    tree = objects.tree_of(repo, "HEAD")
    assert tree is not None
    expected = _cat_file(clone, [f"HEAD:{path}" for path in PATHS], follow)
    for path, found in zip(PATHS, expected, strict=True):
        assert objects.read_path(repo, tree, path, follow) == _as_read(found), path


@pytest.mark.parametrize("directory", [None, "docs", "docs/deep", "dir-link", "README.md", "none"])
def test_listing_paths_answers_as_ls_tree(clone: Path, directory: str | None) -> None:
    """Files, links and a submodule, at any depth; a link to a directory is a path, not a
    way in; a file or nothing named as the directory lists nothing."""
    sub = clone.parent / "sub"
    git("init", "--quiet", str(sub))
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "--allow-empty", "-m", "s", cwd=sub)
    head = git("rev-parse", "HEAD", cwd=sub).strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{head},docs/deep/module", cwd=clone)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "module", cwd=clone)
    under = [] if directory is None else ["--", f"{directory}/"]
    listed = git("ls-tree", "-r", "-z", "--name-only", "HEAD", *under, cwd=clone)
    repo = objects.open_repository(clone)
    found = objects.tree_paths(repo, "HEAD^{commit}", directory)
    assert found is not None
    assert sorted(found) == sorted(p for p in listed.split("\0") if p)
    assert objects.tree_paths(repo, f"{'1' * 40}^{{commit}}") is None


def test_commits_are_named_as_rev_parse_names_them(clone: Path) -> None:
    repo = objects.open_repository(clone)
    head = git("rev-parse", "HEAD", cwd=clone)
    for spec in ["HEAD", head, head[:12], "refs/heads/main", "HEAD~1", f"{head}^{{commit}}"]:
        assert objects.commit_of(repo, spec) == git("rev-parse", f"{spec}^{{commit}}", cwd=clone)
    tree = git("rev-parse", "HEAD^{tree}", cwd=clone)
    for spec in ["HEAD~5", "0" * 40, "refs/heads/nope", tree, "bad..spec"]:
        assert objects.commit_of(repo, spec) is None, spec
    assert objects.commit_message_of(repo, head) == "cases\n"
    with pytest.raises(GitError, match="has no commit"):
        objects.commit_message_of(repo, "0" * 40)
    assert objects.holds_commit(clone, head)
    assert not objects.holds_commit(clone / "docs", head)  # never a repository above


def test_a_broken_or_missing_repository_is_none(tmp_path: Path, clone: Path) -> None:
    with pytest.raises(GitError, match="not a git repository"):
        objects.open_repository(tmp_path / "nothing")
    (clone / ".git" / "HEAD").write_text("garbage\n")
    with pytest.raises(GitError, match="not a git repository"):
        objects.open_repository(clone)
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True)
    assert proc.returncode != 0  # git agrees


def test_changed_paths_are_what_status_reports(clone: Path) -> None:
    (clone / "README.md").write_text("changed\n")
    (clone / "docs" / "notes.md").unlink()
    (clone / "new" / "deeper").mkdir(parents=True)
    (clone / "new" / "deeper" / "file.txt").write_text("new\n")
    (clone / ".gitignore").write_text("*.log\nbuild/\n")
    (clone / "debug.log").write_text("ignored\n")
    (clone / "build").mkdir()
    (clone / "build" / "out.bin").write_text("ignored\n")
    (clone / "inside.md").unlink()
    (clone / "inside.md").symlink_to("README.md")  # a link's target changed
    git("init", "--quiet", str(clone / "nested"))  # a repository of its own: one entry
    (clone / "nested" / "file.txt").write_text("inside\n")
    args = ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"]
    porcelain = subprocess.run(args, cwd=clone, capture_output=True, text=True).stdout
    expected = sorted(entry[3:] for entry in porcelain.split("\0") if len(entry) > 3)
    assert objects.changed_paths(clone) == expected
    assert "debug.log" not in expected and "new/deeper/file.txt" in expected
    assert "nested/" in expected


def test_staging_only_some_paths_is_read_tree_then_add_of_those_paths(clone: Path) -> None:
    """After `git add -A`, the index as HEAD's tree but for the given paths: the tree
    `git read-tree HEAD` then `git add -A -- <paths>` writes. A path given that nothing
    is at stays absent; one deleted is deleted."""
    (clone / "README.md").write_text("changed\n")
    (clone / "docs" / "notes.md").unlink()
    (clone / "docs" / "deep" / "x.md").write_text("kept change\n")
    (clone / "inside.md").unlink()
    (clone / "new").mkdir()
    (clone / "new" / "kept.py").write_text("kept\n")
    (clone / "new" / "dropped.py").write_text("dropped\n")
    given = ["docs/deep/x.md", "inside.md", "new/kept.py", "never/written.py"]
    git("add", "-A", cwd=clone)
    git("read-tree", "HEAD", cwd=clone)
    git("add", "-A", "--", *[p for p in given if p != "never/written.py"], cwd=clone)
    expected = git("write-tree", cwd=clone)
    git("add", "-A", cwd=clone)
    objects.staged_only(clone, given)
    assert git("write-tree", cwd=clone) == expected
    staged = git("diff", "--cached", "--name-only", "HEAD", cwd=clone).split()
    assert sorted(staged) == ["docs/deep/x.md", "inside.md", "new/kept.py"]


def test_refs_move_together_and_only_from_where_they_were_read(tmp_path: Path) -> None:
    bare = bare_remote(tmp_path)
    repo = objects.open_repository(bare)
    main = git("rev-parse", "refs/heads/main", cwd=bare)
    objects.update_refs(repo, {"refs/heads/a": main, "refs/loopworks/a": main})
    assert git("rev-parse", "refs/heads/a", "refs/loopworks/a", cwd=bare).split() == [main] * 2
    assert objects.ref_target(repo, "refs/heads/a") == main
    assert objects.ref_target(repo, "refs/heads/none") is None

    tree = objects.write_file_tree(repo, "dir/file.txt", b"one\n")
    second = objects.write_commit(repo, tree, [main], "second", ("t", "t@example.com"), WHEN)
    # Expected where it is: moved. Expected absent but present, or elsewhere: nothing moves.
    objects.update_refs(repo, {"refs/heads/a": second}, expected={"refs/heads/a": main})
    with pytest.raises(GitError, match="not None"):
        objects.update_refs(repo, {"refs/heads/a": main}, expected={"refs/heads/a": None})
    with pytest.raises(GitError, match=f"is at {second}, not {main}"):
        objects.update_refs(
            repo,
            {"refs/heads/a": main, "refs/heads/b": main},
            expected={"refs/heads/a": main},
        )
    assert git("rev-parse", "refs/heads/a", cwd=bare) == second
    assert objects.ref_target(repo, "refs/heads/b") is None  # all or none
    objects.update_refs(repo, {"refs/heads/b": main}, expected={"refs/heads/b": None})
    # A ref git holds locked is not moved under it: waited for a moment, as git waits.
    lock = bare / "refs" / "heads" / "b.lock"
    lock.write_text(f"{second}\n")
    with pytest.raises(GitError, match="lock"):
        objects.update_refs(repo, {"refs/heads/b": second})
    assert git("rev-parse", "refs/heads/b", cwd=bare) == main
    threading.Timer(0.03, lock.unlink).start()
    objects.update_refs(repo, {"refs/heads/b": second})
    assert git("rev-parse", "refs/heads/b", cwd=bare) == second
    # Deleted in the same transaction as the moves, all or none (`delete` lines).
    blob = objects.write_blob(repo, b"a record\n")
    (tmp_path / "record").write_text("a record\n")
    assert blob == git("hash-object", str(tmp_path / "record"), cwd=bare)
    objects.update_refs(repo, {"refs/loopworks/_trajectory/r/_/c": blob})
    git("pack-refs", "--all", cwd=bare)  # a packed ref is deleted as well as a loose one
    with pytest.raises(GitError, match="not None"):
        objects.update_refs(
            repo,
            {"refs/heads/c": main},
            expected={"refs/heads/a": None},
            removed=["refs/loopworks/_trajectory/r/_/c"],
        )
    assert objects.ref_target(repo, "refs/loopworks/_trajectory/r/_/c") == blob
    objects.update_refs(repo, {"refs/heads/c": main}, removed=["refs/loopworks/_trajectory/r/_/c"])
    listed = git("for-each-ref", "--format=%(refname)", "refs/loopworks/_trajectory/", cwd=bare)
    assert listed == "" and git("rev-parse", "refs/heads/c", cwd=bare) == main
    git("fsck", "--strict", cwd=bare)


def test_refs_are_deleted_as_update_ref_deletes_them_packed_or_loose(tmp_path: Path) -> None:
    bare = bare_remote(tmp_path)
    repo = objects.open_repository(bare)
    main = git("rev-parse", "refs/heads/main", cwd=bare)
    names = [f"refs/loopworks/r{n}" for n in range(4)]
    objects.update_refs(repo, dict.fromkeys(names, main))
    git("pack-refs", "--all", cwd=bare)  # two packed, two loose: git keeps refs both ways
    objects.update_refs(repo, dict.fromkeys(names[2:], main))
    gone = objects.delete_refs(repo, [*names[1:], "refs/loopworks/never"])
    assert gone == names[1:]  # a ref that is not there is skipped, not an error
    listed = git("for-each-ref", "--format=%(refname)", "refs/loopworks/", cwd=bare)
    assert listed.split() == names[:1]
    git("fsck", "--strict", cwd=bare)


@pytest.mark.parametrize(
    "when",
    [WHEN, WHEN.replace(tzinfo=None), WHEN.astimezone(timezone(timedelta(hours=5)))],
    ids=["utc", "naive", "another-zone"],
)
def test_a_commit_written_in_process_is_the_one_git_writes(tmp_path: Path, when: datetime) -> None:
    """Same tree, parents, message, author and instant: the same sha as `git commit-tree`,
    so a step retried on a worker of either kind makes the same commit."""
    bare = bare_remote(tmp_path)
    repo = objects.open_repository(bare)
    main = git("rev-parse", "refs/heads/main", cwd=bare)
    tree = objects.write_file_tree(repo, "a/b/playbook.jsonl", b'{"id": 1}\n')
    assert git("ls-tree", "-r", tree, cwd=bare).split()[-1] == "a/b/playbook.jsonl"
    message = "playbook v1: batch\n\nPlaybook-Version: 1\n"
    made = objects.write_commit(repo, tree, [main], message, AUTHOR, WHEN)
    by_git = git_at_when("commit-tree", tree, "-p", main, "-m", message.rstrip("\n"), cwd=bare)
    assert made == by_git
    again = objects.write_commit(repo, tree, [main], message, AUTHOR, when)
    assert again == made


def test_a_shared_clone_borrows_the_store_and_git_works_in_it(tmp_path: Path) -> None:
    bare = bare_remote(tmp_path)
    main = git("rev-parse", "refs/heads/main", cwd=bare)
    target = tmp_path / "clone"
    objects.clone_shared(bare, target)
    alternates = (target / ".git" / "objects" / "info" / "alternates").read_text().split()
    assert [Path(path).resolve() for path in alternates] == [(bare / "objects").resolve()]
    assert git("remote", "get-url", "origin", cwd=target) == str(bare)
    assert git("config", "maintenance.auto", cwd=target) == "false"
    assert not list((target / ".git" / "objects").glob("??"))  # nothing copied
    git("checkout", "--quiet", "--detach", "--force", main, cwd=target)
    assert (target / "README.md").read_text() == "# demo project\n"
    git("fetch", "--quiet", "origin", cwd=target)
    assert git("rev-parse", "refs/remotes/origin/main", cwd=target) == main
    git("fsck", "--connectivity-only", cwd=target)
    # A clone of that clone borrows from it in turn (an evaluation slot).
    slot = tmp_path / "slot"
    objects.clone_shared(target / ".git", slot)
    git("checkout", "--quiet", "--detach", main, cwd=slot)
    git("fsck", "--connectivity-only", cwd=slot)


def test_head_is_read_as_ls_remote_reads_it(tmp_path: Path) -> None:
    bare = bare_remote(tmp_path)
    repo = objects.open_repository(bare)
    main = git("rev-parse", "refs/heads/main", cwd=bare)
    assert objects.head_of(repo) == ("refs/heads/main", main)
    git("symbolic-ref", "HEAD", "refs/heads/unborn", cwd=bare)
    assert objects.head_of(objects.open_repository(bare)) == ("refs/heads/unborn", None)
    (bare / "HEAD").write_text(f"{main}\n")
    assert objects.head_of(objects.open_repository(bare)) == (None, main)


@pytest.mark.parametrize(
    "message",
    ["produce: draft", "\n\nrefine: fixes  \n\n\n  keep the indent\t\n#not a comment here\n\n"],
    ids=["plain", "needs-cleanup"],
)
def test_a_staged_tree_is_committed_as_git_commit_commits_it(tmp_path: Path, message: str) -> None:
    """`git add -A` then the commit in-process: the sha `git commit -m` gives the same
    staged tree, parent, message, author and instant, and HEAD detached on it."""
    bare = bare_remote(tmp_path)
    made: list[str] = []
    for name in ("by-git", "in-process"):
        workdir = tmp_path / name
        git("clone", "--quiet", str(bare), str(workdir))
        git("checkout", "--quiet", "--detach", cwd=workdir)
        (workdir / "artifact.md").write_text("draft\n")
        (workdir / "docs").mkdir()
        (workdir / "docs" / "link.md").symlink_to("../artifact.md")
        git("add", "-A", cwd=workdir)
        if name == "by-git":
            git_at_when(
                "-c", "commit.gpgsign=false", "commit", "--quiet", "-m", message, cwd=workdir
            )
        else:
            objects.commit_index(workdir, None, message, AUTHOR, WHEN)
        made.append(git("rev-parse", "HEAD", cwd=workdir))
    in_process = tmp_path / "in-process"
    assert made[1] == made[0]
    assert (in_process / ".git" / "HEAD").read_text().strip() == made[1]  # detached
    assert git("status", "--porcelain", cwd=in_process) == ""
    git("fsck", "--strict", cwd=in_process)


def test_an_object_gone_from_the_store_is_a_git_error_not_a_missing_file(clone: Path) -> None:
    """A tree naming a blob its store no longer has (a borrowed store deleted under a
    clone) is an error the caller can answer by asking elsewhere, never "no such file"."""
    blob = git("rev-parse", "HEAD:docs/notes.md", cwd=clone)
    (clone / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    repo = objects.open_repository(clone)
    tree = objects.tree_of(repo, "HEAD")
    assert tree is not None
    for follow in (False, True):
        with pytest.raises(GitError, match=r"reading docs/notes\.md"):
            objects.read_path(repo, tree, "docs/notes.md", follow)
    assert objects.read_path(repo, tree, "README.md", True) is not None
