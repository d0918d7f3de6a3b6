"""A run's proof through the API, against a real dev server, worker and API process, on a
repository with tests (docs/loop.md#the-runs-proof): the plan names the command found in
the repository, the worker runs it on the tree the run pushes, `GET /runs/{id}` shows its
result; `verify: []` with a code change ends `unverified`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.stack import Stack, git

pytestmark = pytest.mark.integration

CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
DETECTED = "python3 -m unittest discover -s tests"
TERMINAL = ("completed", "stopped", "failed", "halted")
TITLE = {
    "id": "has-title",
    "description": "The artifact has a title",
    "check": {"kind": "pattern", "pattern": "^# \\S"},
}


def calc_remote(root: Path) -> Path:
    """A bare origin whose `main` holds a module, its unittest tests under tests/, and a
    .gitignore, as a user's repository would."""
    bare, scratch = root / "calc.git", root / "scratch"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("clone", "--quiet", str(bare), str(scratch))
    (scratch / "tests").mkdir()
    (scratch / "calc.py").write_text(CALC)
    (scratch / "tests" / "test_calc.py").write_text(TEST_CALC)
    (scratch / ".gitignore").write_text("__pycache__/\n")
    git("add", "-A", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "calc", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    return bare


def adding_mul(path: Path) -> str:
    """The offline producer, scripted to change the code (and say so in its artifact)."""
    draft = {
        "files": [
            {"path": "calc.py", "content": CALC + "\n\ndef mul(a, b):\n    return a * b\n"},
            {"path": "artifact.md", "content": "# Multiplication\n\nAdded mul beside add.\n"},
        ],
        "summary": "added mul",
    }
    path.write_text(json.dumps({"producer": {"*": draft}}))
    return str(path)


def wait_until(http: httpx.Client, run_id: str, done: Any, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state: dict[str, Any] = http.get(f"/runs/{run_id}").json()
        if done(state):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.25)


def test_the_detected_proof_is_planned_run_on_the_pushed_tree_and_served(
    stack: Stack, tmp_path: Path
) -> None:
    remote = calc_remote(tmp_path)
    stack.extra_env["LOOPS_OFFLINE_SCRIPT"] = adding_mul(tmp_path / "script.json")
    stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        body = {"task": "Add mul", "repo": str(remote), "audit_probability": 0, "rules": [TITLE]}
        created = http.post("/runs", json={**body, "mode": "interactive"})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        draft = wait_until(http, run_id, lambda s: s["status"] == "awaiting_approval")
        approved = http.post(f"/runs/{run_id}/approve", json={})
        assert approved.status_code == 200, approved.text
        proven = wait_until(http, run_id, lambda s: s["status"] in TERMINAL)

        unverified_run = http.post("/runs", json={**body, "verify": []})
        assert unverified_run.status_code == 201, unverified_run.text
        unverified_id = unverified_run.json()["run_id"]
        unverified = wait_until(http, unverified_id, lambda s: s["status"] in TERMINAL)

    # The plan a person approves names the command found in the repository.
    assert draft["proof"]["source"] == "detected"
    assert draft["proof"]["commands"] == [DETECTED]
    assert draft["proof"]["status"] == "pending"
    assert {"id": "proof-1", "owner": "orchestrator", "phase": "B"}.items() <= next(
        r for r in draft["rules"] if r["id"] == "proof-1"
    ).items()

    assert proven["status"] == "completed", (proven["evaluation"], proven["proof"])
    proof = proven["proof"]
    assert proof["status"] == "passed" and proof["changed_code"] == ["calc.py"]
    [result] = proof["results"]
    assert (result["command"], result["passed"], result["exit_code"]) == (DETECTED, True, 0)
    assert "OK" in result["detail"]
    # It ran on the tree the run pushed: the branch's code is the code it proved.
    branch = f"loops/{run_id}"
    assert "def mul" in git("--git-dir", str(remote), "show", f"{branch}:calc.py")
    assert git("--git-dir", str(remote), "diff", proof["commit"], branch, "--", "calc.py") == ""

    assert unverified["status"] == "stopped"
    assert unverified["stop_reason"] == "unverified"
    assert unverified["proof"]["status"] == "unverified"
    assert unverified["proof"]["commands"] == []
    assert "calc.py" in unverified["stop"]["message"]
