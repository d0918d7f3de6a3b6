"""The origin this service creates on disk (the embedded default): a run's clone borrows
its object store and writes into it, and origin's refs move without a push; any other
origin, a user's repository on disk included, is pushed to, and none of its hooks run
(tests/security/test_origin_programs.py tries every program a repository can name)."""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.integration import IntegrationWorkspaces
from loopworks.workspace.refs import work_ref
from loopworks.workspace.runner import GIT_SPAWNS
from loopworks.workspace.stores import OWN_ORIGIN_MARK, borrowed_stores, own_origin_store
from tests.integration.stack import GitCalls, bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def _ws(tmp_path: Path, name: str = "worker-a") -> GitWorkspaces:
    return GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com")


def _own_objects(git_dir: Path) -> int:
    """Objects in a clone's own store, loose or packed (not its borrowed ones)."""
    stats = dict(
        line.split(": ") for line in git("count-objects", "-v", cwd=git_dir.parent).splitlines()
    )
    return int(stats["count"]) + int(stats["in-pack"])


def test_a_run_on_the_services_own_origin_commits_into_it_without_a_push(
    tmp_path: Path,
) -> None:
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    assert own_origin_store(origin) == Path(origin) / "objects"
    _, base = ws.resolve_base(origin, None)

    with GitCalls() as first:
        workdir = ws.checkout("run-1", origin, base)
    # Cloned in-process (no shell, no upload-pack), read in place: one process, the
    # checkout, and no clean of a clone that has nothing but what it checked out.
    assert first.processes == Counter({"checkout": 1}), first.processes
    assert first.in_process["clone"] == 1
    with GitCalls() as calls:
        (workdir / "artifact.md").write_text("draft\n")
        draft = ws.commit(workdir, "produce: draft", WHEN)
        ws.publish(workdir, "run-1", draft)
        (workdir / "artifact.md").write_text("final\n")
        final = ws.commit(workdir, "close: final", WHEN)
        assert ws.push_branch(workdir, "loops/run-1", final, "run-1") == final

    assert not calls.processes.keys() & {"push", "fetch", "ls-remote"}, calls.processes
    # publish, then close's two refs in one transaction
    assert calls.in_process["update-ref"] == 2
    assert git("rev-parse", work_ref("run-1"), cwd=Path(origin)) == final
    assert git("rev-parse", "refs/heads/loops/run-1", cwd=Path(origin)) == final
    # Every object is origin's own: the clone borrowed its store and wrote into it.
    assert borrowed_stores(workdir / ".git") == [Path(origin) / "objects"]
    assert _own_objects(workdir / ".git") == 0
    git("fsck", "--connectivity-only", "--no-dangling", cwd=Path(origin))
    assert ws.read_file(origin, final, "artifact.md") == "final\n"

    # Another worker on this machine (its own data directory) has the commit at once.
    other = _ws(tmp_path, "worker-b")
    before = GIT_SPAWNS.snapshot()
    assert (other.checkout("run-1", origin, draft) / "artifact.md").read_text() == "draft\n"
    assert not (GIT_SPAWNS.snapshot() - before).keys() & {"fetch", "ls-remote"}


def test_a_repository_the_service_did_not_create_is_pushed_to_and_runs_no_hook(
    tmp_path: Path,
) -> None:
    origin = bare_remote(tmp_path / "data")
    hook = origin / "hooks" / "post-receive"
    hook.write_text(f"#!/bin/sh\ncat >> {tmp_path / 'received'}\n")
    hook.chmod(0o755)
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(str(origin), None)

    before = GIT_SPAWNS.snapshot()
    workdir = ws.checkout("run-2", str(origin), base)
    (workdir / "artifact.md").write_text("draft\n")
    sha = ws.commit(workdir, "produce: draft", WHEN)
    ws.publish(workdir, "run-2", sha)
    assert ws.push_branch(workdir, "loops/run-2", sha, "run-2") == sha

    assert (GIT_SPAWNS.snapshot() - before)["push"] == 2
    assert borrowed_stores(workdir / ".git") == []
    assert not (tmp_path / "received").exists()
    assert git("rev-parse", work_ref("run-2"), cwd=origin) == sha
    assert git("rev-parse", "refs/heads/loops/run-2", cwd=origin) == sha


def test_an_origin_whose_mark_is_removed_is_pushed_to(tmp_path: Path) -> None:
    """The mark is what makes an origin the service's own: without it, even the default
    origin is pushed to (an existing clone that borrows its store included)."""
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-3", origin, base)
    os.remove(Path(origin) / OWN_ORIGIN_MARK)

    with GitCalls() as calls:
        (workdir / "artifact.md").write_text("draft\n")
        sha = ws.commit(workdir, "produce: draft", WHEN)
        ws.publish(workdir, "run-3", sha)
    assert calls.processes["push"] == 1 and calls.in_process["update-ref"] == 0, calls.processes
    assert git("rev-parse", work_ref("run-3"), cwd=Path(origin)) == sha
    git("fsck", "--connectivity-only", "--no-dangling", cwd=Path(origin))


def test_borrowed_stores_follow_alternates_of_alternates(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    main = ws.checkout("run-4", origin, base)
    slot = ws.checkout("run-4", origin, base, "eval-exec")
    # The slot reads the run's clone's store, and through it origin's: the sandbox binds
    # both read-only (checks/bwrap.py), or git inside finds no history.
    assert borrowed_stores(slot / ".git") == [main / ".git" / "objects", Path(origin) / "objects"]
    assert Counter(git("log", "--format=%s", cwd=slot).splitlines()) == Counter(["Initial commit"])


def test_a_merge_queue_clone_of_the_own_origin_still_pushes(tmp_path: Path) -> None:
    """A merge queue writes objects outside `commit` (merges, a forced add): it never
    writes into origin's store, so whatever it moves onto origin is carried by a push."""
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    queue = IntegrationWorkspaces.of(ws)
    _, base = queue.resolve_base(origin, None)
    workdir = queue.checkout("queue-1", origin, base, "merge")
    (workdir / "tasks").mkdir()
    (workdir / "tasks" / "T-1.md").write_text("merged work\n")
    git("add", "--all", "--force", "--", "tasks", cwd=workdir)  # objects in the clone's store
    sha = queue.commit(workdir, "merge T-1", WHEN)

    with GitCalls() as calls:
        assert queue.push_branch(workdir, "loops/integration", sha) == sha
    assert calls.processes["push"] == 1 and calls.in_process["update-ref"] == 0, calls.processes
    git("fsck", "--connectivity-only", "--no-dangling", cwd=Path(origin))
    assert ws.read_file(origin, sha, "tasks/T-1.md") == "merged work\n"
