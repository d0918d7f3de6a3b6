"""A worker's secret a client pasted into a run leaves the worker in none of the run's
answers: its queries, its updates' results and its result (worker/redacting.py), in
Temporal's workflow sandbox as on a worker without it."""

from __future__ import annotations

import asyncio

import pytest

from loopworks.checks.redaction import REDACTED
from loopworks.schemas.events import EventName
from loopworks.schemas.run import Approval, Step
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow

# The worker's model key: only the worker holds it (the API in docker compose does not).
KEY = "sk-ant-api03-" + "w4" * 24


async def _until_step(harness: LoopHarness, handle: object, step: Step) -> None:
    for _ in range(400):
        state = await harness.status(handle)  # type: ignore[arg-type]
        if state.current_step == step:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never reached {step}")


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
async def test_a_pasted_worker_secret_is_in_no_answer_of_the_run(
    harness: LoopHarness, sandboxed: bool
) -> None:
    async with harness.worker(workflow_sandbox=sandboxed, ANTHROPIC_API_KEY=KEY):
        handle = await harness.start(
            task=f"Write a deploy guide. Our key is {KEY}, use it.",
            mode="interactive",
            max_iterations=1,
        )
        await _until_step(harness, handle, Step.APPROVE)
        state = await harness.status(handle)
        events = await handle.query(LoopWorkflow.events)
        approved = await handle.execute_update(LoopWorkflow.approve, Approval())
        result = await handle.result()

    said = f"Write a deploy guide. Our key is {REDACTED}, use it."
    assert state.task == said and approved.task == said and result.state.task == said
    [started] = [e for e in events if e.event == EventName.RUN_STARTED]
    assert started.model_dump()["payload"]["task"] == said
    answers = [state, approved, result, *events]
    assert not [a for a in answers if KEY in a.model_dump_json()]
    assert result.state.status.is_terminal
