"""The producer's trajectory over HTTP: on the run's branch, and at GET /runs/{id}/trajectory."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.agent.trajectory import from_jsonl
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import Stack

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


def test_trajectory_is_on_the_branch_and_served_as_json_lines(stack: Stack, tmp_path: Path) -> None:
    # The first producer call takes its time, so the run is seen before any trajectory.
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"producer": {"1": {"delay_ms": 3000}}}))
    stack.start_worker(LOOPS_OFFLINE_SCRIPT=str(script))
    _, base_url = stack.start_api()
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
    with httpx.Client(base_url=base_url, timeout=30) as http:
        created = http.post(
            "/runs",
            # The marker makes the offline task curator ask for a helper: the skill
            # sub-loop's generator adds its lines to the one trajectory.
            json={
                "task": "Write a testing guide [skill:count_words]",
                "rules": rules,
                "audit_probability": 0,
            },
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]

        early = http.get(f"/runs/{run_id}/trajectory")
        assert early.status_code == 404, early.text
        assert "no trajectory yet" in early.json()["detail"]

        state = wait_until_finished(http, run_id)
        assert state["status"] == "completed", state
        response = http.get(f"/runs/{run_id}/trajectory")
        skill_only = http.get(f"/runs/{run_id}/trajectory", params={"loop_type": "skill"})
        task_only = http.get(f"/runs/{run_id}/trajectory", params={"loop_type": "task"})
        bad = http.get(f"/runs/{run_id}/trajectory", params={"loop_type": "other"})
        unknown = http.get("/runs/no-such-run-20250101-000000-abcdef/trajectory")

    assert unknown.status_code == 404, unknown.text
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")

    # On the branch, one file a step; the route serves them in file-name order.
    origin = Path(state["origin"])
    branch = f"loops/{run_id}"
    names = git(origin, "ls-tree", "--name-only", f"{branch}:{TRAJECTORY}").split()
    # QA's conversation too: it verified iteration 2 before the run completed.
    assert names == [
        "01-produce.jsonl",
        "01-refine.jsonl",
        "02-produce.jsonl",
        "02-qa.jsonl",
        "02-skill.jsonl",
    ]
    on_branch = "".join(git(origin, "show", f"{branch}:{TRAJECTORY}/{n}") for n in names)
    assert response.text == on_branch

    records = from_jsonl(response.text)
    assert all(json.loads(line)["run_id"] == run_id for line in response.text.splitlines())
    steps = [(r.iteration, r.step) for r in records if r.kind == "system"]
    assert steps == [(1, "produce"), (1, "refine"), (2, "produce"), (2, "qa"), (2, "skill")]
    writes = [r for r in records if r.kind == "tool_result" and r.tool == "write_file"]
    assert len(writes) == 4 and all(r.ok for r in writes)

    # Seed 003's one trajectory: every line names the run and its loop type.
    assert {(r.loop_type, r.trajectory_id) for r in records} == {
        ("task", run_id),
        ("skill", run_id),
    }
    assert skill_only.status_code == 200 and task_only.status_code == 200
    assert {r.step for r in from_jsonl(skill_only.text)} == {"skill"}
    assert {r.loop_type for r in from_jsonl(task_only.text)} == {"task"}
    assert sorted(skill_only.text.splitlines() + task_only.text.splitlines()) == sorted(
        response.text.splitlines()
    )
    assert bad.status_code == 422
