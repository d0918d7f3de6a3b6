"""A run admitted through the caps' slots (api/admission.py) gives them back as it closes,
and says what it spent (api/spend.py reads it); a slot another run holds is not freed by
it, and a slot already gone does not fail the run."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus

from loopworks.schemas.admission import SPENT_MEMO, SlotInput
from loopworks.schemas.graph import GraphInput, GraphRequest, GraphStatus
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.run import RunRequest
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.slot import SlotWorkflow
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import task

pytestmark = pytest.mark.workflow


async def test_a_run_gives_its_slots_back_and_says_what_it_spent(harness: LoopHarness) -> None:
    client = harness.env.client
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    queue = harness.task_queue
    mine = [f"slot/{queue}/runs/client/alice/0", f"slot/{queue}/runs/all/3"]
    # Freed and taken by another run while this one ran (its holder looked closed).
    theirs = f"slot/{queue}/runs/all/4"
    # Freed, and nobody took it since.
    gone = f"slot/{queue}/runs/all/5"
    for slot, holder in [(mine[0], run_id), (mine[1], run_id), (theirs, "another-run")]:
        await client.start_workflow(
            SlotWorkflow.run, SlotInput(holder=holder), id=slot, task_queue=queue
        )

    async with harness.worker():
        handle = await client.start_workflow(
            LoopWorkflow.run,
            LoopInput(
                run_id=run_id,
                alias="test",
                request=RunRequest(task="Write a guide", audit_probability=0, playbook=False),
                created_at="2026-01-01T00:00:00+00:00",
                slots=[*mine, theirs, gone],
            ),
            id=run_id,
            task_queue=queue,
        )
        result = await handle.result()
        for slot in mine:
            await client.get_workflow_handle(slot).result()
            described = await client.get_workflow_handle(slot).describe()
            assert described.status == WorkflowExecutionStatus.COMPLETED
        still = await client.get_workflow_handle(theirs).describe()
        assert still.status == WorkflowExecutionStatus.RUNNING
        await client.get_workflow_handle(theirs).terminate()

    assert result.state.status.value == "completed"
    spent = await (await handle.describe()).memo_value(SPENT_MEMO)
    usage = result.state.usage
    assert spent == {"tokens": usage.total_tokens, "cost_usd": usage.cost_usd}
    assert usage.total_tokens > 0


async def test_a_run_without_slots_asks_no_change(harness: LoopHarness) -> None:
    """A graph's task loop, or a run started other than by the API: nothing to give back,
    and no marker in its history."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide")
        await handle.result()
    assert await (await handle.describe()).memo_value(SPENT_MEMO, None) is None


async def test_a_graph_gives_its_slots_back_and_says_what_its_loops_spent(
    harness: LoopHarness,
) -> None:
    client = harness.env.client
    graph_id = f"graph-{uuid.uuid4().hex[:8]}"
    slot = f"slot/{harness.task_queue}/graphs/all/0"
    await client.start_workflow(
        SlotWorkflow.run, SlotInput(holder=graph_id), id=slot, task_queue=harness.task_queue
    )
    async with harness.worker():
        handle = await client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id=graph_id,
                request=GraphRequest(
                    goal="Write a guide in parts",
                    tasks=[task("T-001")],
                    max_iterations=2,
                    audit_probability=0.0,
                ),
                created_at="2026-01-01T00:00:00+00:00",
                slots=[slot],
            ),
            id=graph_id,
            task_queue=harness.task_queue,
        )
        result = await handle.result()
        await client.get_workflow_handle(slot).result()

    assert result.state.status == GraphStatus.COMPLETED, result.state.message
    spent = await (await handle.describe()).memo_value(SPENT_MEMO)
    usage = result.state.usage
    assert spent == {"tokens": usage.total_tokens, "cost_usd": usage.cost_usd}
    assert usage.total_tokens > 0
