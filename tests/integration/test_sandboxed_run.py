"""A whole run on the dev server with its worker's commands in the sandbox."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.stack import DevServer, Stack
from tests.workflows.test_sandboxed_run import SANDBOX_RULES

pytestmark = pytest.mark.integration

TEST_FILE = (
    "from pathlib import Path\n\n\n"
    "def test_result():\n    assert Path('result.txt').read_text() == 'ok\\n'\n"
)
# A pytest run inside the sandbox (the system's python3 and its pytest: see
# scripts/install-deploy-tools.sh).
PYTEST_RULE = {
    "id": "tests-pass",
    "description": "the tests pass",
    "severity": "fail",
    "check": {
        "kind": "command",
        "command": "python3 -m pytest -q -p no:cacheprovider test_result.py",
    },
}


@pytest.mark.skipif(os.geteuid() != 0, reason="the checks prove isolation only as root")
def test_a_run_on_the_dev_server_passes_with_its_commands_sandboxed(
    dev_server: DevServer,
) -> None:
    # pytest's tmp_path is 0700: the sandbox's user could not reach workspaces there.
    root = Path(tempfile.mkdtemp(prefix="loopworks-sandboxed-"))
    root.chmod(0o755)
    script = root / "script.json"
    draft = {
        "files": [
            {"path": "artifact.md", "content": "# Guide\n\nA guide.\n"},
            {"path": "result.txt", "content": "ok\n"},
            {"path": "test_result.py", "content": TEST_FILE},
        ],
        "summary": "wrote it",
    }
    script.write_text(json.dumps({"producer": {"1": {"answer": draft}}}))
    stack = Stack(
        server=dev_server,
        data_dir=root / "data",
        logs=root / "logs",
        extra_env={"LOOPS_SANDBOX": "auto", "LOOPS_OFFLINE_SCRIPT": str(script)},
    )
    try:
        worker = stack.start_worker()
        _, base_url = stack.start_api()
        with httpx.Client(base_url=base_url, timeout=30) as http:
            created = http.post(
                "/runs",
                json={
                    "task": "Write a guide",
                    "rules": [*SANDBOX_RULES, PYTEST_RULE],
                    "audit_probability": 0,
                    # The run's proof, run by the worker in the sandbox as the rules are.
                    "verify": [PYTEST_RULE["check"]["command"]],
                },
            )
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            deadline = time.monotonic() + 120
            while (state := http.get(f"/runs/{run_id}").json())["status"] in (
                "running",
                "blocked",
                "paused",
            ):
                assert time.monotonic() < deadline, worker.output()
                time.sleep(0.5)
            events = http.get(f"/runs/{run_id}/events").json()
        assert state["status"] == "completed", (state["stop"], worker.output()[-3000:])
        assert state["proof"]["status"] == "passed", state["proof"]
        assert "sandbox: bwrap" in worker.output()
        assert "commands_unsandboxed" not in [e["event"] for e in events]
    finally:
        stack.stop_all()
        shutil.rmtree(root, ignore_errors=True)
