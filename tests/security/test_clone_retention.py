"""Finished runs' clones used to stay on the worker's disk for ever. The worker now
sweeps them: clones no step used for LOOPS_KEEP_CLONES_HOURS go, and beyond
LOOPS_CLONES_MAX_BYTES the longest idle go first; a clone a step may hold never does.
Real clones of real repositories on disk, made by the workspace code itself."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys
import time
from pathlib import Path

import pytest

from loopworks.deploy.processes import WORKER_COMMAND
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.retention import IN_USE_SECONDS, RetentionPolicy
from loopworks.workspace.sweep import sweep
from tests.integration.stack import bare_remote, free_port, git, start

pytestmark = pytest.mark.integration

HOUR = 3600.0
DAY = RetentionPolicy(keep_seconds=24 * HOUR)


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    return bare_remote(tmp_path / "origin")


@pytest.fixture
def ws(tmp_path: Path) -> GitWorkspaces:
    return GitWorkspaces((tmp_path / "workspaces").resolve(), "t", "t@t")


def _head(origin: Path) -> str:
    return git("--git-dir", str(origin), "rev-parse", "main").strip()


def _age(path: Path, hours: float) -> None:
    then = time.time() - hours * HOUR
    os.utime(path, (then, then))


def test_clones_idle_past_the_age_kept_are_removed_the_rest_kept(
    ws: GitWorkspaces, origin: Path
) -> None:
    commit = _head(origin)
    for run in ("finished", "running"):
        ws.checkout(run, str(origin), commit)
        ws.checkout(run, str(origin), commit, slot="eval-1")  # an evaluation group's
    ws.checkout("graph-1/task-a/1", str(origin), commit)  # a task graph's child loop
    ws.read_file(origin.as_uri(), commit, "README.md")  # a remote origin's cache
    (cache,) = [p for p in (ws.root / ".cache").iterdir() if p.is_dir()]
    for old in ("finished", "finished.eval-1", "graph-1"):
        _age(ws.root / old, 30)
    _age(cache, 30)

    decision = sweep(ws.root, DAY)

    assert sorted(decision.remove) == sorted(
        ["finished", "finished.eval-1", "graph-1", f".cache/{cache.name}"]
    )
    left = sorted(p.name for p in ws.root.iterdir())
    assert left == [".cache", "running", "running.eval-1"]
    assert [p.name for p in (ws.root / ".cache").iterdir()] == [f"{cache.name}.lock"]


def test_a_step_using_a_clone_keeps_it(ws: GitWorkspaces, origin: Path) -> None:
    commit = _head(origin)
    ws.checkout("r-1", str(origin), commit)
    _age(ws.root / "r-1", 30)
    ws.checkout("r-1", str(origin), commit)  # the run's next step, a day later
    assert sweep(ws.root, DAY).remove == []
    assert (ws.root / "r-1" / "README.md").is_file()


def test_over_the_total_the_longest_idle_go_and_clones_in_use_stay(
    ws: GitWorkspaces, origin: Path
) -> None:
    commit = _head(origin)
    for run in ("a", "b", "c", "live"):
        ws.checkout(run, str(origin), commit)
    _age(ws.root / "a", 10)
    _age(ws.root / "b", 5)
    _age(ws.root / "c", 3)
    one = sum(f.stat().st_size for f in (ws.root / "a").rglob("*") if f.is_file())
    # Room for two and a half clones: the two longest idle go, "live" (in use) stays.
    policy = RetentionPolicy(keep_seconds=24 * HOUR, max_bytes=int(2.5 * one))

    decision = sweep(ws.root, policy)

    assert decision.remove == ["a", "b"]
    assert sorted(p.name for p in ws.root.iterdir()) == ["c", "live"]
    everything = RetentionPolicy(keep_seconds=24 * HOUR, max_bytes=0)
    assert sweep(ws.root, everything).remove == ["c"]
    assert (ws.root / "live").is_dir(), "a clone in use was removed"
    assert sweep(ws.root, everything).over_by > 0


def test_an_origins_cache_being_read_is_not_removed(ws: GitWorkspaces, origin: Path) -> None:
    commit = _head(origin)
    ws.read_file(origin.as_uri(), commit, "README.md")
    (cache,) = [p for p in (ws.root / ".cache").iterdir() if p.is_dir()]
    _age(cache, 30)
    with (ws.root / ".cache" / f"{cache.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as workspace/origin.py holds it while reading
        sweep(ws.root, DAY)
        assert cache.is_dir()
    sweep(ws.root, DAY)
    assert not cache.exists()


def test_a_swept_clone_is_cloned_again_by_the_next_step(ws: GitWorkspaces, origin: Path) -> None:
    commit = _head(origin)
    workdir = ws.checkout("r-1", str(origin), commit)
    (workdir / "artifact.md").write_text("draft\n")
    made = ws.commit(workdir, "draft", __import__("datetime").datetime(2024, 5, 1))
    ws.publish(workdir, "r-1", made)
    _age(ws.root / "r-1", 30)
    assert sweep(ws.root, DAY).remove == ["r-1"]

    again = ws.checkout("r-1", str(origin), made)
    assert (again / "artifact.md").read_text() == "draft\n"


def test_a_removal_a_stopped_worker_left_half_done_is_finished(ws: GitWorkspaces) -> None:
    ws.root.mkdir(parents=True)
    left = ws.root / ".swept-r-1-0123abcd"
    (left / ".git").mkdir(parents=True)
    _age(left, 3)
    sweep(ws.root, DAY)
    assert not left.exists()


def test_only_what_the_workspaces_made_is_removed(tmp_path: Path, origin: Path) -> None:
    """LOOPS_WORKSPACES_DIR may be a directory with other things in it: a link, a file,
    a directory that holds no clone, however old, are left alone; the link never
    followed."""
    ws = GitWorkspaces((tmp_path / "workspaces").resolve(), "t", "t@t")
    ws.checkout("graph-1/task-a/1", str(origin), _head(origin))
    root = ws.root
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    (root / "r-link").symlink_to(outside, target_is_directory=True)
    (root / "notes.txt").write_text("an operator's\n")
    (root / "photos" / "2024").mkdir(parents=True)
    (root / "photos" / "2024" / "a.jpg").write_bytes(b"...")
    (root / "mixed").mkdir()
    (root / "mixed" / "README").write_text("not a clone\n")
    git("clone", "--quiet", str(origin), str(root / "mixed" / "clone"))
    for name in ("notes.txt", "photos", "mixed", "graph-1"):
        _age(root / name, 30)
    os.utime(root / "r-link", (0, 0), follow_symlinks=False)

    decision = sweep(root, RetentionPolicy(keep_seconds=0, max_bytes=0))

    assert decision.remove == ["graph-1"]
    assert sorted(p.name for p in root.iterdir()) == ["mixed", "notes.txt", "photos", "r-link"]
    assert (outside / "keep.txt").read_text() == "mine\n"


def test_the_worker_sweeps_when_it_starts(tmp_path: Path, origin: Path) -> None:
    """The worker process itself: an idle clone from before is gone at start, while it
    still waits for Temporal (none here)."""
    data = tmp_path / "data"
    workspaces = (data / "workspaces").resolve()
    ws = GitWorkspaces(workspaces, "t", "t@t")
    ws.checkout("left-over", str(origin), _head(origin))
    ws.checkout("recent", str(origin), _head(origin))
    _age(workspaces / "left-over", 2 * IN_USE_SECONDS / HOUR)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "LOOPS_DATA_DIR": str(data),
        "LOOPS_SANDBOX": "off",
        "LOOPS_KEEP_CLONES_HOURS": "1",
        "LOOPS_LLM": "offline",
    }
    worker = start("worker", [sys.executable, *WORKER_COMMAND[1:]], env, tmp_path / "logs")
    try:
        deadline = time.monotonic() + 60
        while (workspaces / "left-over").exists() and time.monotonic() < deadline:
            assert worker.popen.poll() is None, worker.output()
            time.sleep(0.2)
        assert not (workspaces / "left-over").exists(), worker.output()
        assert (workspaces / "recent").is_dir()
    finally:
        worker.stop()
    assert worker.popen.returncode == 0, worker.output()


async def test_the_sweep_repeats(tmp_path: Path) -> None:
    from loopworks.worker.retention import keep_sweeping

    root = tmp_path / "workspaces"
    root.mkdir()
    sweeping = asyncio.create_task(keep_sweeping(root, DAY, every=0.05))
    try:
        for name in ("first", "second"):
            (root / name / ".git").mkdir(parents=True)  # a clone, as far as it matters
            _age(root / name, 30)
            deadline = time.monotonic() + 10
            while (root / name).exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert not (root / name).exists()
    finally:
        sweeping.cancel()
