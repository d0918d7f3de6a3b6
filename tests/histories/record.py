"""Record workflow histories for the replay tests.

    python -m tests.histories.record

Run it after a deliberate, versioned change to the workflow (see deploy/README.md on
patching): the committed histories are what old runs look like, and the replay test
proves the current code still reproduces them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.llm.offline import OfflineModel, OfflineScript
from deploy.binaries import find_binary
from deploy.search_attributes import register_search_attributes
from schemas.loop import LoopInput
from schemas.run import RunRequest, RunStatus
from schemas.settings import Settings
from worker.build import build_worker
from workflows.loop import LoopWorkflow

HERE = Path(__file__).parent
log = logging.getLogger(__name__)

# Touches every branch a run can take in one history: a REVISE from the critic, a
# failed first evaluation with critique and refinement, the phase switch, an audit
# BLOCK cleared by an update, QA and the push.
FULL_RUN_SCRIPT = {
    "critic": {"1": {"verdict": "REVISE", "issues": ["too vague"], "feedback": "sharpen it"}},
    "custodiet": {"1": {"verdict": "BLOCK", "reason": "recorded block"}},
}


async def _start(client: Client, queue: str, run_id: str, **request: object) -> WorkflowHandle:
    return await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="recorded",
            request=RunRequest(**request),  # type: ignore[arg-type]
            created_at="2026-01-01T00:00:00+00:00",
        ),
        id=run_id,
        task_queue=queue,
    )


async def _wait_status(handle: WorkflowHandle, status: RunStatus) -> None:
    while (await handle.query(LoopWorkflow.status)).status != status:
        await asyncio.sleep(0.1)


async def record() -> None:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    try:
        await register_search_attributes(env.client, "default")
        with tempfile.TemporaryDirectory() as data:
            queue = f"record-{uuid.uuid4().hex[:6]}"
            settings = Settings(LOOPS_DATA_DIR=Path(data), LOOPS_TASK_QUEUE=queue)
            model = OfflineModel(script=OfflineScript.model_validate(FULL_RUN_SCRIPT))
            async with build_worker(env.client, settings, model=model):
                full = await _start(
                    env.client,
                    queue,
                    "recorded-full-run",
                    task="Write a guide to caching",
                    audit_probability=1.0,
                )
                await _wait_status(full, RunStatus.BLOCKED)
                await full.execute_update(LoopWorkflow.clear_block, "reviewed")
                await full.result()
                _save("full_run.json", await full.fetch_history())

            slow = OfflineModel(
                script=OfflineScript.model_validate({"producer": {"1": {"delay_ms": 60_000}}})
            )
            async with build_worker(env.client, settings, model=slow):
                stopped = await _start(env.client, queue, "recorded-stopped-run", task="Draft")
                await _wait_status(stopped, RunStatus.RUNNING)
                while (await stopped.query(LoopWorkflow.status)).current_step.value != (
                    "PRODUCE_PREPARE"
                ):
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)
                await stopped.signal(LoopWorkflow.stop, "recorded stop")
                await stopped.result()
                _save("stopped_run.json", await stopped.fetch_history())
    finally:
        await env.shutdown()


def _save(name: str, history: object) -> None:
    text = history.to_json()  # type: ignore[attr-defined]
    (HERE / name).write_text(json.dumps(json.loads(text), indent=1) + "\n")
    log.info("wrote %s", HERE / name)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(record())
