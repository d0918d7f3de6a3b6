"""The custodiet's BLOCK writes the state of the work up: committed as `.loops/blocked.md`
on the run's work ref, in the audit event and the run's block state; clearing the block
lets the run go on."""

from __future__ import annotations

import pytest

from loopworks.schemas.actions import BLOCKED_PATH
from loopworks.schemas.run import RunStatus
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.refs import work_ref
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_loop import remote_file, wait_for

pytestmark = pytest.mark.workflow

BLOCK = {
    "verdict": "BLOCK",
    "reason": "the producer contacted an outside host",
    "violations": ["ran curl against example.com (Commands Run)"],
}


async def test_a_block_commits_the_state_of_the_work_and_clearing_it_goes_on(
    harness: LoopHarness,
) -> None:
    async with harness.worker({"custodiet": {"1": BLOCK}}):
        handle = await harness.start(task="Write a guide", audit_probability=1.0)

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        state = await harness.status(handle)
        # On the run's work ref while the run is held, for the person who must clear it.
        report = remote_file(harness.origin, work_ref(state.run_id), BLOCKED_PATH)
        assert report.startswith("# Blocked by the custodiet at iteration 1")
        assert "the producer contacted an outside host" in report
        assert "- ran curl against example.com (Commands Run)" in report
        # What was done: the iteration's diff from its start, the artifact the producer wrote.
        assert "artifact.md" in report.split("## What was done")[1]
        assert state.block.report == report and state.block.path == BLOCKED_PATH

        cleared = await handle.execute_update(LoopWorkflow.clear_block, "reviewed: allowed")
        assert cleared.status == RunStatus.RUNNING
        final = (await handle.result()).state
        events = await harness.events(handle)

    assert final.status == RunStatus.COMPLETED
    [audit] = [
        e for e in events if e.event.value == "audit_verdict" and e.payload.verdict == "BLOCK"
    ]
    assert audit.payload.report == report and audit.payload.report_commit
    # The block's own event follows the verdict, with the write-up and where it is.
    [blocked_event] = [e for e in events if e.event.value == "blocked"]
    flow = names(events)
    assert flow.index("audit_verdict") < flow.index("blocked") < flow.index("block_cleared")
    assert blocked_event.payload.reason == "the producer contacted an outside host"
    assert blocked_event.payload.violations == BLOCK["violations"]
    assert blocked_event.payload.report == report
    assert blocked_event.payload.path == BLOCKED_PATH
    assert blocked_event.payload.report_commit == audit.payload.report_commit
    assert blocked_event.payload.during == "audit" and not blocked_event.payload.refused
    # The report stays in the run's record on its pushed branch.
    assert remote_file(harness.origin, final.branch, BLOCKED_PATH) == report
