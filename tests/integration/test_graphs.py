"""Task graphs on the dev server, through the API, with a real git remote: a small Python
repository whose test fails, a prep package in it (docs/graphs.md#prep-packages), three tasks; and a
worker killed in the middle of a graph."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.schemas.tasks import LEDGER_PATH
from tests.integration.stack import Stack, git

pytestmark = pytest.mark.integration

BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"
CHECK = "python3 test_calc.py"


def prep_lines() -> list[dict[str, Any]]:
    return [
        {
            "id": "task-001",
            "description": "Fix add: calc.add subtracts; make it add",
            "files_changed": ["calc.py"],
            "_convergence": {"verification": CHECK},
        },
        {
            "id": "task-002",
            "description": "Document add: say what calc.add returns",
            "_depends_on": ["task-001"],
            "_convergence": {"verification": f"{CHECK} && grep -rqF 'Document add' ."},
        },
        {
            "id": "task-003",
            "description": "Check add: the test passes on the result",
            "_depends_on": ["task-001"],
            "_convergence": {"verification": CHECK},
        },
    ]


def make_remote(root: Path, prep: bool) -> Path:
    """A bare remote whose `main` holds calc.py (broken), its test and, if asked, a prep
    package for the scratch clone the prep tool ran in."""
    bare, scratch = root / "remote.git", root / "scratch"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("clone", "--quiet", str(bare), str(scratch))
    (scratch / "calc.py").write_text(BROKEN)
    (scratch / "test_calc.py").write_text(TEST)
    if prep:
        loop = scratch / ".workflow" / ".loop"
        loop.mkdir(parents=True)
        package = {
            "prep_status": "ready",
            "target_skill": "loopworks",
            "generated_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "environment": {"project_root": str(bare)},
            "source": {"tool": "test-prep"},
            "tasks": {"total": 3},
        }
        (loop / "prep-package.json").write_text(json.dumps(package))
        (loop / "prep-tasks.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in prep_lines())
        )
    git("add", "-A", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "calc", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    return bare


def fixing_producer(path: Path) -> str:
    """The offline producer, scripted to write the fix (and an artifact that names it)."""
    artifact = "# Fix add\n\nDocument add: add returns a + b.\n"
    draft = {
        "files": [
            {"path": "calc.py", "content": FIXED},
            {"path": "artifact.md", "content": artifact},
        ],
        "summary": "fixed add",
    }
    path.write_text(json.dumps({"producer": {"*": draft}}))
    return str(path)


def wait_for_graph(http: httpx.Client, graph_id: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state: dict[str, Any] = http.get(f"/graphs/{graph_id}").json()
        if state.get("status") in ("completed", "failed", "stopped"):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.5)


def sse(http: httpx.Client, path: str, headers: dict[str, str]) -> list[dict[str, str]]:
    """Every Server-Sent Event of a stream that ends, as its fields."""
    frames, fields = [], {}
    with http.stream("GET", path, params={"follow": 1}, headers=headers) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                key, _, value = line.partition(": ")
                fields[key] = value
            elif fields:
                frames.append(fields)
                fields = {}
    return frames


def show(remote: Path, ref: str, path: str) -> str:
    return git("--git-dir", str(remote), "show", f"{ref}:{path}")


def test_a_prep_package_graph_fixes_the_repository_and_pushes_its_ledger(
    stack: Stack, tmp_path: Path
) -> None:
    remote = make_remote(tmp_path, prep=True)
    stack.extra_env["LOOPS_OFFLINE_SCRIPT"] = fixing_producer(tmp_path / "script.json")
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        created = http.post(
            "/graphs",
            json={"goal": "Fix calc.add", "repo": str(remote), "audit_probability": 0},
        )
        assert created.status_code == 201, created.text
        graph_id = created.json()["graph_id"]
        state = wait_for_graph(http, graph_id)
        ledger = http.get(f"/graphs/{graph_id}/ledger").text
        streamed = sse(http, f"/graphs/{graph_id}/ledger", {"Last-Event-ID": "2"})
        # Each task's loop is a run the run routes read, under its three-segment id.
        task_loop = state["tasks"][0]["run_ids"][-1]
        loop = http.get(f"/runs/{task_loop}")
        loop_events = http.get(f"/runs/{task_loop}/events")
        loop_artifact = http.get(f"/runs/{task_loop}/artifact")

    # The ledger streams like a run's events: numbered lines, resumable, then `end`.
    lines = ledger.splitlines()
    assert [(f["id"], f["data"]) for f in streamed if f.get("event") == "ledger"] == [
        (str(n), line) for n, line in enumerate(lines, 1) if n > 2
    ]
    assert streamed[-1]["event"] == "end"
    assert state["status"] == "completed", state
    assert task_loop == f"{graph_id}/T-001/1"
    assert loop.status_code == 200, loop.text
    assert loop.json()["run_id"] == task_loop and loop.json()["status"] == "completed"
    assert loop_events.status_code == 200 and loop_events.json()[-1]["event"] == "pushed"
    assert loop_artifact.status_code == 200 and "Document add" in loop_artifact.text
    assert state["source"].startswith("prep package (test-prep, sha256 ")
    assert state["prep_rejected"] == []
    assert [t["task"]["id"] for t in state["tasks"]] == ["T-001", "T-002", "T-003"]
    branch = state["integration_branch"]
    assert show(remote, branch, LEDGER_PATH) == ledger.strip()  # git() strips its output
    completed = [
        json.loads(line)["id"]
        for line in ledger.splitlines()
        if json.loads(line)["status"] == "completed"
    ]
    assert sorted(completed) == ["T-001", "T-002", "T-003"]
    # The verification commands pass on the pushed integration branch.
    checkout = tmp_path / "verify"
    git("clone", "--quiet", "--branch", branch, str(remote), str(checkout))
    for line in prep_lines():
        command = line["_convergence"]["verification"]
        done = subprocess.run(["bash", "-c", command], cwd=checkout, capture_output=True)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert (checkout / "docs" / "tasks" / "T-001.json").is_file()


def test_a_killed_worker_leaves_no_task_completed_twice(stack: Stack, tmp_path: Path) -> None:
    remote = make_remote(tmp_path, prep=True)
    stack.extra_env["LOOPS_OFFLINE_SCRIPT"] = fixing_producer(tmp_path / "script.json")
    stack.extra_env["LOOPS_OFFLINE_LATENCY_MS"] = "100"
    first = stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        created = http.post(
            "/graphs",
            json={"goal": "Fix calc.add", "repo": str(remote), "audit_probability": 0},
        )
        graph_id = created.json()["graph_id"]
        deadline = time.monotonic() + 120
        # Kill it once the first task is merged and the next ones are running.
        while not any(
            t["status"] == "completed" for t in http.get(f"/graphs/{graph_id}").json()["tasks"]
        ):
            assert time.monotonic() < deadline, first.output()
            time.sleep(0.2)
        first.kill()
        stack.start_worker()
        state = wait_for_graph(http, graph_id)
        ledger = http.get(f"/graphs/{graph_id}/ledger").text

    assert state["status"] == "completed", state
    lines = ledger.splitlines()
    assert len(lines) == len(set(lines)), "a ledger line was written twice"
    completions = Counter(
        json.loads(line)["id"] for line in lines if json.loads(line)["status"] == "completed"
    )
    assert completions == {"T-001": 1, "T-002": 1, "T-003": 1}
    assert show(remote, state["integration_branch"], LEDGER_PATH) == ledger.strip()
