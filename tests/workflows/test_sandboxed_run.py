"""A whole run with the sandbox on: the producer's commands and the command checks run
under bubblewrap, as the worker chose at start."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from loopworks.checks import runner
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.proof import ProofStatus
from loopworks.schemas.run import RunRequest, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import names

pytestmark = pytest.mark.workflow

# Each holds only inside the sandbox when the worker is root (CI and this machine): the
# command runs as an unprivileged uid and sees no /etc/shadow, no network, no /root.
SANDBOX_RULES = [
    {
        "id": "not-root",
        "description": "runs unprivileged",
        "severity": "fail",
        "check": {"kind": "command", "command": 'test "$(id -u)" != 0'},
    },
    {
        "id": "no-shadow",
        "description": "sees no /etc/shadow",
        "severity": "fail",
        "check": {"kind": "command", "command": "test ! -e /etc/shadow"},
    },
    {
        "id": "python-runs",
        "description": "python3 runs",
        "severity": "fail",
        "check": {"kind": "command", "command": "python3 -c 'import json; print(json.dumps(1))'"},
    },
    {
        "id": "artifact",
        "description": "the draft exists",
        "severity": "fail",
        "check": {"kind": "command", "command": "test -s artifact.md && test -s result.txt"},
    },
]


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A data directory the sandbox's user can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="loopworks-sandboxed-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        runner.use_sandbox(None)


async def test_a_whole_run_passes_with_its_commands_in_the_sandbox(
    time_skipping_env: WorkflowEnvironment, reachable_dir: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the checks prove isolation only when the worker is root")
    queue = f"q-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        LOOPS_DATA_DIR=reachable_dir / "data", LOOPS_TASK_QUEUE=queue, LOOPS_SANDBOX="auto"
    )
    # The producer writes the draft the last check looks for.
    script = {
        "producer": {
            "1": {
                "answer": {
                    "files": [
                        {"path": "artifact.md", "content": "# Guide\n\nA guide.\n"},
                        {"path": "result.txt", "content": "ok\n"},
                    ],
                    "summary": "wrote the guide",
                }
            }
        }
    }
    models = OfflineModels(script=OfflineScript.model_validate(script))
    async with build_worker(time_skipping_env.client, settings, models=models):
        assert runner.sandboxed(), "the worker did not choose the sandbox"
        run_id = f"sandboxed-{uuid.uuid4().hex[:8]}"
        handle = await time_skipping_env.client.start_workflow(
            LoopWorkflow.run,
            LoopInput(
                run_id=run_id,
                alias="sandboxed",
                # The run's proof runs in the sandbox too (docs/loop.md#the-runs-proof).
                request=RunRequest(
                    task="Write a guide",
                    rules=SANDBOX_RULES,
                    audit_probability=0.0,
                    verify=['test "$(id -u)" != 0 && test -s result.txt'],
                ),
                created_at="2026-01-01T00:00:00+00:00",
            ),
            id=run_id,
            task_queue=queue,
        )
        result = await handle.result()
        events = await handle.query(LoopWorkflow.events)

    state = result.state
    assert state.status == RunStatus.COMPLETED, state.stop
    assert state.proof is not None and state.proof.status == ProofStatus.PASSED
    assert "commands_unsandboxed" not in names(events)
    evaluations = [e for e in events if e.event.value == "evaluation_done"]
    assert evaluations and not evaluations[0].payload.failed
