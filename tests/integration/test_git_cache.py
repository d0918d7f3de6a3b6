"""A worker's clones as its cache (docs/workspace.md): a step whose commit the clone holds asks
origin nothing, and every git process a step spawns is counted through the runner."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.checks.runner import match_pattern, run_pattern_check
from loopworks.schemas.rules import PatternCheck
from loopworks.workspace.git import GitError, GitWorkspaces
from loopworks.workspace.integration import IntegrationWorkspaces
from loopworks.workspace.origin import Absent
from loopworks.workspace.runner import CommitNotFoundError
from tests.integration.stack import GitCalls, bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
# What asks origin (or rebuilds a clone): none of it when the commit is in the cache.
ORIGIN_COMMANDS = {"fetch", "ls-remote", "clone", "remote"}


def _ws(tmp_path: Path, name: str = "worker-a") -> GitWorkspaces:
    return GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com")


@pytest.fixture
def origin(tmp_path: Path) -> str:
    """A repository the service did not create (a user's, or a git server's on another
    machine in all but the URL): reached by fetch and push, what a cache saves."""
    return str(bare_remote(tmp_path / "data"))


def _step(ws: GitWorkspaces, run_id: str, origin: str, commit: str, text: str) -> str:
    workdir = ws.checkout(run_id, origin, commit)
    (workdir / "artifact.md").write_text(text)
    sha = ws.commit(workdir, text.strip(), WHEN)
    ws.publish(workdir, run_id, sha)
    return sha


def test_a_commit_in_the_clone_is_checked_out_without_asking_origin(
    tmp_path: Path, origin: str
) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    sha = _step(ws, "run-1", origin, base, "v1\n")
    # The next step takes the clone: then crashes, leaving its writes behind.
    workdir = ws.checkout("run-1", origin, sha)
    (workdir / "artifact.md").write_text("left by a crashed attempt\n")
    (workdir / "junk.txt").write_text("x")

    with GitCalls() as calls:
        assert ws.checkout("run-1", origin, sha) == workdir
    # One question (a clone? holding the commit?), then checkout --force and clean.
    assert calls.processes == Counter({"checkout": 1, "clean": 1})
    assert calls.in_process == Counter({"rev-parse": 1})
    assert (workdir / "artifact.md").read_text() == "v1\n"
    assert not (workdir / "junk.txt").exists()
    assert git("status", "--porcelain", "--ignored", cwd=workdir) == ""

    # The base is in the clone too: going back costs the same and asks origin nothing.
    with GitCalls() as calls:
        ws.checkout("run-1", origin, base)
    assert not calls.processes.keys() & ORIGIN_COMMANDS
    assert git("rev-parse", "HEAD", cwd=workdir) == base


def test_a_commit_made_elsewhere_is_fetched_in_one_round_trip(tmp_path: Path, origin: str) -> None:
    worker_a, worker_b = _ws(tmp_path, "worker-a"), _ws(tmp_path, "worker-b")
    _, base = worker_a.resolve_base(origin, None)
    worker_b.checkout("run-2", origin, base)
    sha = _step(worker_a, "run-2", origin, base, "from a\n")

    with GitCalls() as calls:
        other = worker_b.checkout("run-2", origin, sha)
    # Branches and the run's work ref in one fetch; no ls-remote first.
    assert calls.processes["fetch"] == 1
    assert calls.processes["ls-remote"] == 0
    assert (other / "artifact.md").read_text() == "from a\n"


def test_an_evaluation_slot_borrows_the_runs_clone_objects(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    main = ws.checkout("run-3", origin, base)
    with GitCalls() as calls:
        slot = ws.checkout("run-3", origin, base, "eval-exec")
    # Cloned from the run's clone, borrowing its objects: nothing asked of origin.
    assert not calls.processes.keys() & {"fetch", "ls-remote"}
    alternates = slot / ".git" / "objects" / "info" / "alternates"
    assert Path(alternates.read_text().strip()) == (main / ".git" / "objects").resolve()
    # It publishes nothing: its remote stays the run's clone until it must ask origin.
    assert not calls.processes.keys() & {"remote"}

    sha = _step(ws, "run-3", origin, base, "draft\n")
    # Origin out of reach: the commit the run's clone just made is in the slot already.
    os.rename(origin, f"{origin}.away")
    with GitCalls() as calls:
        assert ws.checkout("run-3", origin, sha, "eval-exec") == slot
    assert calls.processes == Counter({"checkout": 1, "clean": 1})
    assert calls.in_process == Counter({"rev-parse": 1})
    assert (slot / "artifact.md").read_text() == "draft\n"
    git("fsck", "--connectivity-only", "--no-dangling", cwd=slot)
    os.rename(f"{origin}.away", origin)

    # The run's clone gone (a worker's data directory is a cache): the slot's git fails,
    # and checkout clones it again from origin, whole on its own.
    shutil.rmtree(main)
    assert ws.checkout("run-3", origin, sha, "eval-exec") == slot
    assert (slot / "artifact.md").read_text() == "draft\n"
    assert not alternates.exists()
    git("fsck", "--connectivity-only", "--no-dangling", cwd=slot)
    # A broken run's clone is no source either: the slot comes from origin.
    ws.checkout("run-3", origin, sha)
    (ws.workdir("run-3") / ".git" / "HEAD").write_text("garbage\n")
    assert ws.checkout("run-3", origin, sha, "eval-style") == ws.workdir("run-3", "eval-style")
    assert not (
        ws.workdir("run-3", "eval-style") / ".git" / "objects" / "info" / "alternates"
    ).exists()


def _tree_with_links(ws: GitWorkspaces, run_id: str, origin: str, outside: Path) -> str:
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout(run_id, origin, base)
    (workdir / "artifact.md").write_text("# Title\nbody\n")
    (workdir / "docs").mkdir()
    (workdir / "docs" / "notes.md").write_text("notes\n")
    (workdir / "inside.md").symlink_to("docs/notes.md")
    (workdir / "escape.md").symlink_to(outside)
    (workdir / "dangling.md").symlink_to("nowhere.md")
    (workdir / "crlf.md").write_bytes(b"line one\r\nline two\r\n")
    sha = ws.commit(workdir, "links", WHEN)
    ws.publish(workdir, run_id, sha)
    return sha


# Each path as run_pattern_check sees it in a checkout, and read_files at the commit.
TREE_PATHS = [
    "artifact.md",
    "docs/notes.md",
    "docs/../artifact.md",
    "inside.md",
    "escape.md",
    "dangling.md",
    "docs",
    "missing.md",
    "crlf.md",
    "../outside.md",
    "/etc/hostname",
]


def test_reading_a_commits_files_needs_no_checkout(tmp_path: Path, origin: str) -> None:
    """EVALUATE's pattern and judge groups read the commit's files: in-process, no git
    process, from the run's clone or from origin on a worker without one, and what they
    read is what a checkout shows (symlinks inside followed, out of the tree refused)."""
    outside = tmp_path / "outside.md"
    outside.write_text("secret\n")
    ws = _ws(tmp_path)
    sha = _tree_with_links(ws, "run-6", origin, outside)
    checkout = ws.checkout("run-6", origin, sha)

    with GitCalls() as calls:
        read = ws.read_files("run-6", origin, sha, TREE_PATHS)
    assert calls.processes == Counter()
    assert read["artifact.md"] == read["docs/../artifact.md"] == "# Title\nbody\n"
    assert read["docs/notes.md"] == read["inside.md"] == "notes\n"
    for path in ("escape.md", "../outside.md", "/etc/hostname"):
        assert read[path] is Absent.OUTSIDE, path
    for path in ("dangling.md", "docs", "missing.md"):
        assert read[path] is Absent.MISSING, path
    for path in TREE_PATHS:
        check = PatternCheck(pattern="e", path=path)
        assert match_pattern(check, read[path]) == run_pattern_check(check, checkout), path
    # CRLF lines read as a checkout reads them (universal newlines): `$` ends each line.
    assert read["crlf.md"] == "line one\nline two\n"
    check = PatternCheck(pattern="^line one$", path="crlf.md")
    assert match_pattern(check, read["crlf.md"]) == run_pattern_check(check, checkout)
    assert match_pattern(check, read["crlf.md"]).passed

    # Another worker, no clone of the run: origin (a bare cache of it), still no clone.
    other = _ws(tmp_path, "worker-b")
    with GitCalls() as calls:
        assert other.read_files("run-6", origin, sha, TREE_PATHS) == read
    assert not calls.processes.keys() - {"init", "fetch"}, calls.processes
    assert not other.workdir("run-6").exists()
    # A run's clone deleted under the worker (a cache): origin answers.
    shutil.rmtree(ws.workdir("run-6") / ".git" / "objects")
    assert ws.read_files("run-6", origin, sha, ["artifact.md"]) == {
        "artifact.md": "# Title\nbody\n"
    }
    with pytest.raises(CommitNotFoundError):
        ws.read_files("run-6", origin, "0" * 40, ["artifact.md"])


def test_a_clone_given_another_origin_publishes_there(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    other = ws.ensure_default_origin(tmp_path / "data" / "other.git")
    _, base = ws.resolve_base(origin, None)
    _, other_base = ws.resolve_base(other, None)
    _step(ws, "run-4", origin, base, "first\n")
    # The same run id on another origin (a reused workflow id): the clone follows it.
    sha = _step(ws, "run-4", other, other_base, "second\n")
    assert git("rev-parse", "refs/loopworks/run-4", cwd=Path(other)) == sha
    assert git("remote", "get-url", "origin", cwd=ws.workdir("run-4")) == other

    # A new worker process on the same clones sets the origin once, then trusts it.
    again = _ws(tmp_path)
    with GitCalls() as calls:
        again.checkout("run-4", other, sha)
    assert calls.processes["remote"] == 1
    with GitCalls() as calls:
        again.checkout("run-4", other, sha)
    assert calls.processes["remote"] == 0


def test_reads_start_no_git_process(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    sha = _step(ws, "run-5", origin, base, "text\n")
    with GitCalls() as calls:
        assert ws.read_file(origin, sha, "artifact.md") == "text\n"
        assert ws.read_file(origin, sha, "missing.md") is None
        assert ws.list_files(origin, sha) == ["README.md", "artifact.md"]
    assert calls.processes == Counter()
    weird = "odd\nname.md"
    workdir = ws.checkout("run-5", origin, sha)
    (workdir / weird).write_text("still read\n")
    named = ws.commit(workdir, "a name with a newline", WHEN)
    with pytest.raises(GitError, match="not on origin"):
        ws.read_file(origin, named, weird)  # not published yet
    ws.publish(workdir, "run-5", named)
    assert ws.read_file(origin, named, weird) == "still read\n"
    assert ws.read_file(origin, named, "odd\nother.md") is None


def test_a_merge_queue_clone_still_sees_origins_branches(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    queue = IntegrationWorkspaces.of(ws)
    _, base = ws.resolve_base(origin, None)
    queue.checkout("graph-1", origin, base, "merge")
    # A task branch pushed after the queue's clone was made, its commit not in that clone.
    task = _step(ws, "task-1", origin, base, "task\n")
    ws.push_branch(ws.workdir("task-1"), "loops/task-1", task)

    workdir = queue.checkout("graph-1", origin, base, "merge")
    assert queue.fetched_branch(workdir, "loops/task-1") == task


def test_git_never_finds_a_repository_above_a_vanished_clone(tmp_path: Path) -> None:
    # The data directory inside someone's checkout, and a clone whose .git is gone (the
    # directory is being deleted under a running step): git must not commit upward.
    outer = tmp_path / "checkout"
    git("init", "--quiet", str(outer))
    ws = GitWorkspaces(outer / "data" / "workspaces", "t", "t@t")
    workdir = ws.root / "run-1"
    workdir.mkdir(parents=True)
    (workdir / "artifact.md").write_text("# lost\n")
    with pytest.raises(GitError, match="not a git repository"):
        ws.commit(workdir, "would land in the outer checkout", datetime.now(UTC))
    assert git("-C", str(outer), "status", "--porcelain").strip() == "?? data/"


def test_the_step_after_a_commit_resumes_the_clone_as_it_was_committed(
    tmp_path: Path, origin: str
) -> None:
    """The clone a step committed in is the next step's at that commit with one `clean`:
    its tracked files are the commit, and what a checkout would remove besides (ignored
    files, empty directories) goes. Only once: a step handed the clone may change it."""
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-6", origin, base)
    (workdir / ".gitignore").write_text("build/\n")
    (workdir / "artifact.md").write_text("v1\n")
    (workdir / "build").mkdir()
    (workdir / "build" / "out.o").write_text("ignored, so not committed\n")
    (workdir / "empty").mkdir()
    sha = ws.commit(workdir, "v1", WHEN)
    ws.publish(workdir, "run-6", sha)

    with GitCalls() as calls:
        assert ws.checkout("run-6", origin, sha) == workdir
    assert calls.processes == Counter({"clean": 1})
    assert git("status", "--porcelain", "--ignored", cwd=workdir) == ""
    assert not (workdir / "empty").exists()
    (workdir / "artifact.md").write_text("changed by the step handed the clone\n")

    # Handed out once: the next checkout of the same commit is a whole one.
    with GitCalls() as calls:
        ws.checkout("run-6", origin, sha)
    assert calls.processes == Counter({"checkout": 1, "clean": 1})
    assert calls.in_process == Counter({"rev-parse": 1})
    assert (workdir / "artifact.md").read_text() == "v1\n"

    # Another commit's checkout, or another process's (a restarted worker), is whole too.
    assert ws.commit(workdir, "v1 again", WHEN) != sha
    with GitCalls() as calls:
        ws.checkout("run-6", origin, sha)
    assert calls.processes["checkout"] == 1
    again = ws.commit(workdir, "v1 again", WHEN)
    with GitCalls() as calls:
        _ws(tmp_path).checkout("run-6", origin, again)
    assert calls.processes["checkout"] == 1


def test_a_slot_asks_origin_for_a_commit_its_runs_clone_lacks(tmp_path: Path, origin: str) -> None:
    """A slot's remote is its run's clone until a commit is missing there too: then it is
    pointed at origin and fetches."""
    worker_a, worker_b = _ws(tmp_path, "worker-a"), _ws(tmp_path, "worker-b")
    _, base = worker_b.resolve_base(origin, None)
    worker_b.checkout("run-7", origin, base)
    slot = worker_b.checkout("run-7", origin, base, "eval-exec")
    worker_a.checkout("run-7", origin, base)
    sha = _step(worker_a, "run-7", origin, base, "made on worker a\n")

    assert worker_b.checkout("run-7", origin, sha, "eval-exec") == slot
    assert (slot / "artifact.md").read_text() == "made on worker a\n"
    assert git("remote", "get-url", "origin", cwd=slot) == origin
