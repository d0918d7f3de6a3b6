"""A run's trajectory over HTTP: the agents' on the run's branch, every single-shot call's
on a ref of its own, all of it at GET /runs/{id}/trajectory and exported by
`loops trajectory`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.agent.trajectory import from_jsonl
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TERMINAL_STATUSES
from loopworks.workspace.call_records import CALL_NAME
from tests.integration.stack import ROOT, Stack, bare_remote

pytestmark = pytest.mark.integration

TERMINAL = {status.value for status in TERMINAL_STATUSES}
TRAJECTORY = ".loops/trajectory"


def git(origin: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(origin), *args], capture_output=True, text=True, check=True
    ).stdout


def wait_until_finished(http: httpx.Client, run_id: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state: dict[str, Any] = http.get(f"/runs/{run_id}").json()
        if state["status"] in TERMINAL:
            return state
        time.sleep(0.25)
    raise AssertionError(f"run {run_id} did not finish")


def wait_for_lines(http: httpx.Client, run_id: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = http.get(f"/runs/{run_id}/trajectory")
        if response.status_code == 200:
            return response.text
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} has no trajectory")


def loops(stack: Stack, base_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopworks.cli", *args],
        cwd=ROOT,
        env=stack.env(LOOPS_API_URL=base_url, **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_trajectory_is_served_as_json_lines_and_exported(stack: Stack, tmp_path: Path) -> None:
    # The first producer call takes its time, so the run is seen before any agent's lines.
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"producer": {"1": {"delay_ms": 3000}}}))
    stack.start_worker(LOOPS_OFFLINE_SCRIPT=str(script))
    _, base_url = stack.start_api(LOOPS_API_TOKENS="s3cret-0123456789")
    rules = [
        {
            "id": "has-title",
            "description": "a title",
            "severity": "fail",
            "check": {"kind": "pattern", "pattern": "^# \\S"},
        },
        {
            "id": "has-tests",
            "description": "a Tests section",
            "severity": "fail",
            "check": {
                "kind": "pattern",
                "pattern": "^## Tests",
                "example": "## Tests\n\nRun pytest.",
            },
        },
    ]
    auth = {"Authorization": "Bearer s3cret-0123456789"}
    with httpx.Client(base_url=base_url, timeout=30, headers=auth) as http:
        created = http.post(
            "/runs",
            # The marker makes the offline task curator ask for a helper: the skill
            # sub-loop's lines join the one trajectory, in a session of their own.
            json={
                "task": "Write a testing guide [skill:count_words]",
                "rules": rules,
                "audit_probability": 0,
            },
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]

        # Before the producer's first commit: the single-shot calls made so far.
        early = from_jsonl(wait_for_lines(http, run_id))
        assert early and Role.PRODUCER not in {r.role for r in early}
        assert early[0].role == Role.HYDRATOR

        state = wait_until_finished(http, run_id)
        assert state["status"] == "completed", state
        response = http.get(f"/runs/{run_id}/trajectory")
        skill_only = http.get(f"/runs/{run_id}/trajectory", params={"loop_type": "skill"})
        task_only = http.get(f"/runs/{run_id}/trajectory", params={"loop_type": "task"})
        bad = http.get(f"/runs/{run_id}/trajectory", params={"loop_type": "other"})
        unknown = http.get("/runs/no-such-run-20250101-000000-abcdef/trajectory")
        anonymous = httpx.get(f"{base_url}/runs/{run_id}/trajectory", timeout=30)

    assert unknown.status_code == 404, unknown.text
    assert anonymous.status_code == 401
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")

    # On the branch, one file an agent step; the route serves them among the calls'.
    origin = Path(state["origin"])
    branch = f"loops/{run_id}"
    names = git(origin, "ls-tree", "--name-only", f"{branch}:{TRAJECTORY}").split()
    calls = [name for name in names if CALL_NAME.match(name.removesuffix(".jsonl"))]
    # QA's conversation too: it verified iteration 2 before the run completed.
    assert sorted(set(names) - set(calls)) == [
        "01-produce.jsonl",
        "01-refine.jsonl",
        "02-produce.jsonl",
        "02-qa.jsonl",
        "02-skill.jsonl",
    ]
    # Each single-shot call waited on a ref of its own (served from there mid-run, above)
    # until the close committed it beside them and dropped the ref.
    steps = {name.split("-")[1] for name in calls}
    assert {"hydrate", "review", "plan", "critique", "reflect", "curate"} <= steps
    assert {"skill_review", "skill_curate"} <= steps and "00-hydrate-001.jsonl" in calls
    for name in names:
        assert git(origin, "show", f"{branch}:{TRAJECTORY}/{name}") in response.text
    refs = git(
        origin, "for-each-ref", "--format=%(refname)", f"refs/loopworks/_trajectory/{run_id}/"
    )
    assert refs.split() == []

    records = from_jsonl(response.text)
    assert all(json.loads(line)["run_id"] == run_id for line in response.text.splitlines())
    # Each call once: one system line a file, none served twice.
    assert sum(r.kind == "system" for r in records) == len(names)
    agents = [
        (r.iteration, r.step)
        for r in records
        if r.kind == "system" and r.step in {"produce", "refine", "qa", "skill"}
    ]
    assert agents == [(1, "produce"), (1, "refine"), (2, "produce"), (2, "qa"), (2, "skill")]
    writes = [r for r in records if r.kind == "tool_result" and r.tool == "write_file"]
    assert len(writes) == 4 and all(r.ok for r in writes)
    # The reflector, the curator and the skill reviewer answered too.
    roles = {r.role for r in records}
    assert {Role.REFLECTOR, Role.TASK_CURATOR, Role.SKILL_REFLECTOR} <= roles

    # One trajectory: the task loop's lines name the run, the skill session's their own id.
    session = f"{run_id}:skill:{state['iteration']}"
    assert {(r.loop_type, r.trajectory_id, r.parent_trajectory_id) for r in records} == {
        ("task", run_id, None),
        ("skill", session, run_id),
    }
    assert skill_only.status_code == 200 and task_only.status_code == 200
    assert {r.step for r in from_jsonl(skill_only.text)} == {
        "skill",
        "skill_review",
        "skill_curate",
    }
    assert {r.loop_type for r in from_jsonl(task_only.text)} == {"task"}
    assert sorted(skill_only.text.splitlines() + task_only.text.splitlines()) == sorted(
        response.text.splitlines()
    )
    assert bad.status_code == 422

    # `loops trajectory` writes the same lines to stdout, filtered as asked.
    exported = loops(
        stack,
        base_url,
        "trajectory",
        run_id,
        "--loop-type",
        "skill",
        LOOPS_API_TOKEN="s3cret-0123456789",
    )
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == skill_only.text
    everything = loops(stack, base_url, "trajectory", run_id, LOOPS_API_TOKEN="s3cret-0123456789")
    assert everything.stdout == response.text
    refused = loops(stack, base_url, "trajectory", run_id)
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr


def test_a_graphs_own_calls_are_served_and_exported(stack: Stack, tmp_path: Path) -> None:
    # A remote origin: the API reads the planner's call through a cache of it.
    url = f"file://{bare_remote(tmp_path)}"
    stack.start_worker()
    _, base_url = stack.start_api(LOOPS_API_TOKENS="s3cret-0123456789")
    auth = {"Authorization": "Bearer s3cret-0123456789"}
    with httpx.Client(base_url=base_url, timeout=30, headers=auth) as http:
        created = http.post(
            "/graphs", json={"goal": "Write a guide", "repo": url, "mode": "interactive"}
        )
        assert created.status_code == 201, created.text
        graph_id = created.json()["graph_id"]
        deadline = time.monotonic() + 90
        while http.get(f"/graphs/{graph_id}").json()["status"] != "awaiting_approval":
            assert time.monotonic() < deadline, http.get(f"/graphs/{graph_id}").text
            time.sleep(0.25)
        response = http.get(f"/graphs/{graph_id}/trajectory")
        skill_only = http.get(f"/graphs/{graph_id}/trajectory", params={"loop_type": "skill"})
        unknown = http.get("/graphs/no-such-graph-20250101-000000-abcdef/trajectory")
        anonymous = httpx.get(f"{base_url}/graphs/{graph_id}/trajectory", timeout=30)
        exported = loops(
            stack, base_url, "graph", "trajectory", graph_id, LOOPS_API_TOKEN="s3cret-0123456789"
        )
        assert http.post(f"/graphs/{graph_id}/stop", json={}).status_code == 202

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    records = from_jsonl(response.text)
    # The task planner's conversation: its instructions, the goal, and the tasks it gave.
    assert {r.role for r in records} == {Role.TASK_PLANNER}
    assert [r.kind for r in records][:3] == ["system", "user", "assistant"]
    assert "Write a guide" in (records[1].input or "")
    assert any(r.kind == "tool_call" and r.tool == "answer" for r in records)
    assert {(r.run_id, r.loop_type, r.trajectory_id) for r in records} == {
        (graph_id, "task", graph_id)
    }
    assert skill_only.status_code == 200 and skill_only.text == ""
    assert unknown.status_code == 404, unknown.text
    assert anonymous.status_code == 401
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == response.text
