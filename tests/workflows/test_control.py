"""Steering a run: pause/resume between steps, interactive approval, current details."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowUpdateFailedError

from loopworks.schemas.run import Approval, RunStatus, StopReason
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.search_attributes import LOOP_BLOCKED
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_audit import BLOCK
from tests.workflows.test_loop import IMPOSSIBLE_RULE, TITLE_RULE, wait_for

pytestmark = pytest.mark.workflow


async def test_pause_holds_the_run_between_steps_and_resume_continues(
    harness: LoopHarness,
) -> None:
    async with harness.worker(latency_ms=400):
        handle = await harness.start(task="Write a guide")

        async def planning() -> bool:
            return "plan_iteration" in await harness.activities_run(handle)

        await wait_for(planning)
        paused = await handle.execute_update(LoopWorkflow.pause)
        assert paused.status == RunStatus.RUNNING  # the current step still finishes

        async def held() -> bool:
            return (await harness.status(handle)).status == RunStatus.PAUSED

        await wait_for(held)
        scheduled = await harness.activities_run(handle)
        await asyncio.sleep(1.5)
        assert await harness.activities_run(handle) == scheduled
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(LoopWorkflow.pause)

        resumed = await handle.execute_update(LoopWorkflow.resume)
        assert resumed.status == RunStatus.RUNNING
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(LoopWorkflow.resume)
        state = (await handle.result()).state
        events = names(await harness.events(handle))

    assert state.status == RunStatus.COMPLETED
    assert events.index("paused") < events.index("resumed")


async def test_interactive_run_waits_for_approval_and_honours_edits(
    harness: LoopHarness,
) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide", mode="interactive", rules=[TITLE_RULE, IMPOSSIBLE_RULE]
        )

        async def awaiting() -> bool:
            return (await harness.status(handle)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(awaiting)
        draft = await harness.status(handle)
        assert [rule.id for rule in draft.rules] == ["has-title", "impossible"]
        assert draft.max_iterations == 4
        assert "plan_iteration" not in await harness.activities_run(handle)

        approved = await handle.execute_update(
            LoopWorkflow.approve, Approval(max_iterations=1, note="one pass is enough")
        )
        assert approved.max_iterations == 1
        assert approved.status == RunStatus.RUNNING  # not the awaiting_approval it was
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(LoopWorkflow.approve, Approval())
        state = (await handle.result()).state

    assert state.stop_reason == StopReason.ITERATION_LIMIT
    assert state.iteration == 1


async def test_approve_is_rejected_for_an_auto_run(harness: LoopHarness) -> None:
    async with harness.worker(latency_ms=300):
        handle = await harness.start(task="Write a guide")
        with pytest.raises(WorkflowUpdateFailedError) as raised:
            await handle.execute_update(LoopWorkflow.approve, Approval())
        assert "not awaiting approval" in str(raised.value.cause)
        await handle.signal(LoopWorkflow.stop)
        await handle.result()


async def test_current_details_show_the_iteration_summary(harness: LoopHarness) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide", rules=[TITLE_RULE, IMPOSSIBLE_RULE], max_iterations=1
        )
        await handle.result()
        # The Temporal UI reads current details through this built-in query.
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    lines = metadata.current_details.splitlines()
    assert lines[0] == "── Iteration 1/1 | Phase A | Score: 0.50 | FAIL ──"
    assert "Failed: impossible" in lines


async def test_long_run_continues_as_new_and_keeps_status_and_events(
    harness: LoopHarness,
) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide",
            rules=[TITLE_RULE, IMPOSSIBLE_RULE],
            max_iterations=3,
            continue_as_new_after_events=20,
        )
        state = (await handle.result()).state
        events = await harness.events(handle)
        latest = await handle.fetch_history()

    assert state.stop_reason == StopReason.ITERATION_LIMIT and state.iteration == 3
    flow = names(events)
    assert flow.count("continued_as_new") == 2
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert flow[0] == "run_started" and flow[-1] == "pushed"
    # The latest execution continued an earlier one and never re-ran hydration.
    started = latest.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id
    assert all(
        e.activity_task_scheduled_event_attributes.activity_type.name != "hydrate"
        for e in latest.events
    )
    assert flow.count("evaluation_done") == 3
    assert state.usage.calls > 0


async def test_a_stop_while_blocked_ends_the_block_and_nothing_holds_the_run_again(
    harness: LoopHarness,
) -> None:
    """Stopped while the custodiet's block holds it, a run reads `running` while it
    reflects and pushes, then `stopped`, no longer blocked (its write-up kept); a
    `clear_block` or `pause` then is refused, as is a `pause` once the loop has ended."""
    script = {"custodiet": {"1": BLOCK}, "reflector": {"1": {"delay_ms": 3000}}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide", audit_probability=1.0)

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        await handle.signal(LoopWorkflow.stop, "not worth it")

        async def reflecting() -> bool:
            return (await harness.status(handle)).current_step.value == "REFLECT"

        await wait_for(reflecting)
        during = await harness.status(handle)
        for update in (LoopWorkflow.clear_block, LoopWorkflow.pause):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await (
                    handle.execute_update(update, "late")
                    if update is LoopWorkflow.clear_block
                    else handle.execute_update(update)
                )
            assert "run is ending" in str(refused.value.cause)
        final = (await handle.result()).state
        listed = (await handle.describe()).typed_search_attributes.get(LOOP_BLOCKED)
        events = names(await harness.events(handle))

    assert during.status == RunStatus.RUNNING and not during.blocked
    assert final.status == RunStatus.STOPPED and final.stop_reason == StopReason.USER_STOP
    assert not final.blocked and not final.block.blocked
    assert final.block.reason  # the write-up a person reads is still there
    assert listed is False
    assert "block_cleared" not in events and "paused" not in events


async def test_pause_is_refused_once_the_loop_has_ended(harness: LoopHarness) -> None:
    async with harness.worker({"reflector": {"1": {"delay_ms": 3000}}}):
        handle = await harness.start(task="Write a guide")

        async def reflecting() -> bool:
            return (await harness.status(handle)).current_step.value == "REFLECT"

        await wait_for(reflecting)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(LoopWorkflow.pause)
        final = (await handle.result()).state
        events = names(await harness.events(handle))

    assert "run is ending" in str(refused.value.cause)
    assert final.status == RunStatus.COMPLETED
    assert "paused" not in events
