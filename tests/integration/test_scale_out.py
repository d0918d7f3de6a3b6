"""Workers that share nothing but Temporal and a git server.

The origin is served by `git daemon` over git://, started with deploy/git-server.sh, the
command the compose stack's and Kubernetes' git server runs. Two workers, each with a data
directory of its own, and the API (a third) take it as their default origin. One worker's
data directory is deleted while it holds runs mid-iteration: every run still completes, and
its branch on the server has each iteration's produce commit once.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workspace.default_origin import default_origin, ensure_default_origin
from loopworks.workspace.git import GitWorkspaces
from tests.integration.stack import ROOT, Stack, free_port, start, wait_for_port
from tests.integration.test_temporal_cli import finished, start_run, wait_for

pytestmark = pytest.mark.integration

GIT_SERVER = ROOT / "deploy" / "git-server.sh"
REPO = "loopworks.git"
RUNS = 4


@dataclass
class GitServer:
    url: str
    # The server's own copy, read here to check what the workers pushed.
    bare: Path


@pytest.fixture
def git_server(stack: Stack, tmp_path: Path) -> Iterator[GitServer]:
    root, port = tmp_path / "git-server", free_port()
    env = {
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(tmp_path),
        "LOOPS_GIT_ROOT": str(root),
        "LOOPS_GIT_REPO": REPO,
        "LOOPS_GIT_LISTEN": "127.0.0.1",
        "LOOPS_GIT_PORT": str(port),
    }
    process = start("git-server", ["sh", str(GIT_SERVER)], env, stack.logs)
    # First in the stack's list, so it is stopped (by PID) after the workers.
    stack.processes.insert(0, process)
    try:
        wait_for_port(port, timeout=30, process=process)
    except TimeoutError as err:
        raise TimeoutError(f"{err}\n{process.output()}") from err
    yield GitServer(url=f"git://127.0.0.1:{port}/{REPO}", bare=root / REPO)


def git(bare: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(bare), *args], capture_output=True, text=True, check=True
    ).stdout


def live_workspaces(data_dir: Path, run_ids: set[str]) -> set[str]:
    """The runs whose working clone is in this worker's data directory now."""
    workspaces = data_dir / "workspaces"
    try:
        return {entry.name.split(".")[0] for entry in workspaces.iterdir()} & run_ids
    except FileNotFoundError:
        return set()


def wipe(data_dir: Path) -> None:
    """rm -rf while the worker writes into it: a pass can race a file being created."""
    for _ in range(20):
        shutil.rmtree(data_dir, ignore_errors=True)
        if not data_dir.exists():
            return
    # The worker made it again at once: it has lost what was there all the same.


def test_losing_a_workers_data_directory_loses_no_work(
    stack: Stack, git_server: GitServer, tmp_path: Path
) -> None:
    stack.extra_env.update(
        LOOPS_DEFAULT_ORIGIN=git_server.url,
        # Slow model calls keep runs mid-iteration while the directory goes.
        LOOPS_OFFLINE_LATENCY_MS="400",
    )
    data_dirs = [tmp_path / "worker-a", tmp_path / "worker-b"]
    workers = [stack.start_worker(LOOPS_DATA_DIR=str(data_dir)) for data_dir in data_dirs]
    _, base_url = stack.start_api()

    with httpx.Client(base_url=base_url, timeout=30) as http:
        run_ids = {
            start_run(http, task=f"Write a short guide to caching, part {n}", audit_probability=0)
            for n in range(RUNS)
        }

        # Wait until a worker holds a clone of a run that is past its first step: which
        # worker takes a step is the server's choice, so the doomed one is whichever does.
        deadline = time.monotonic() + 60
        doomed = None
        while doomed is None:
            assert time.monotonic() < deadline, [worker.output() for worker in workers]
            for data_dir in data_dirs:
                if any(
                    (state := http.get(f"/runs/{run_id}").json())["artifact_commit"]
                    and not finished(state)
                    for run_id in live_workspaces(data_dir, run_ids)
                ):
                    doomed = data_dir
                    break
            time.sleep(0.1)
        wipe(doomed)

        states = {run_id: wait_for(http, run_id, finished, timeout=120) for run_id in run_ids}
        artifacts = {run_id: http.get(f"/runs/{run_id}/artifact") for run_id in run_ids}
        trajectories = {run_id: http.get(f"/runs/{run_id}/trajectory") for run_id in run_ids}

    # Which worker runs which step is the server's choice (a run's sticky queue may keep
    # it on one worker throughout), so neither worker's share is asserted: what is, is
    # that losing one's directory mid-run cost no run anything.
    for run_id, state in states.items():
        assert state["status"] == "completed", (state["stop"], state.get("current_step"))
        assert state["origin"] == git_server.url
        branch = f"loops/{run_id}"
        subjects = git(git_server.bare, "log", "--format=%s", branch).splitlines()
        steps = [subject for subject in subjects if subject.startswith("iteration ")]
        assert len(steps) == len(set(steps)), subjects
        for iteration in range(1, state["iteration"] + 1):
            produced = [s for s in steps if s.startswith(f"iteration {iteration} · produce")]
            assert len(produced) == 1, (run_id, iteration, subjects)
        # The API read the run's files from the server, not from a worker's disk.
        assert artifacts[run_id].status_code == 200, artifacts[run_id].text
        assert artifacts[run_id].text == git(git_server.bare, "show", f"{branch}:{ARTIFACT_PATH}")
        assert trajectories[run_id].status_code == 200, trajectories[run_id].text
    # Nothing made an origin of its own on disk.
    for data_dir in (*data_dirs, stack.data_dir):
        assert not (data_dir / "origin.git").exists(), data_dir


def test_a_url_default_origin_is_never_created_from_here(tmp_path: Path) -> None:
    url = "git://git-server:9418/loopworks.git"
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data", LOOPS_DEFAULT_ORIGIN=url)
    workspaces = GitWorkspaces(tmp_path / "workspaces", "t", "t@example.com")
    assert default_origin(settings) == url
    assert ensure_default_origin(settings, workspaces) == url
    assert not (tmp_path / "data").exists() and not (tmp_path / "workspaces").exists()


def test_a_path_default_origin_is_created_on_first_use(tmp_path: Path) -> None:
    workspaces = GitWorkspaces(tmp_path / "workspaces", "t", "t@example.com")
    unset = Settings(LOOPS_DATA_DIR=tmp_path / "data")
    assert default_origin(unset) == str((tmp_path / "data" / "origin.git").resolve())
    shared = tmp_path / "shared" / "origin.git"
    configured = Settings(LOOPS_DATA_DIR=tmp_path / "data", LOOPS_DEFAULT_ORIGIN=str(shared))
    assert ensure_default_origin(configured, workspaces) == str(shared.resolve())
    assert git(shared, "log", "--format=%s", "main").splitlines() == ["Initial commit"]
