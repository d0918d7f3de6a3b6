"""A graph's total budget (docs/graphs.md#budget) through a whole graph on the
time-skipping server with real git and the offline model: each task loop starts with what
is left of the total, and once it is spent no loop starts and the graph fails naming it."""

from __future__ import annotations

import json

import pytest

from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.run import Budget, RunState, RunStatus, StopReason
from loopworks.schemas.tasks import LEDGER_PATH, TaskStatus, ledger_lines
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import git_show, start_graph, task

pytestmark = pytest.mark.workflow

# The offline model's loop for a task spends about 2,500 tokens: the first loop fits in
# the total, the second gets what is left and runs out of it, the third never starts.
TOTAL_TOKENS = 4000
PER_LOOP_TOKENS = 3000


async def test_loops_start_with_what_is_left_and_a_spent_graph_starts_no_more(
    harness: LoopHarness,
) -> None:
    tasks = [task("T-001"), task("T-002", "T-001"), task("T-003", "T-002")]
    async with harness.worker():
        handle = await start_graph(
            harness,
            tasks,
            budget={"max_tokens": PER_LOOP_TOKENS},
            total_budget={"max_tokens": TOTAL_TOKENS},
        )
        result = await handle.result()
        loops: dict[str, tuple[Budget, RunState]] = {}
        for task_state in result.state.tasks:
            for run_id in task_state.run_ids:
                child = harness.env.client.get_workflow_handle_for(LoopWorkflow.run, run_id)
                history = await child.fetch_history()
                started = history.events[0].workflow_execution_started_event_attributes
                given = json.loads(started.input.payloads[0].data)["request"]["budget"]
                loops[run_id] = (Budget.model_validate(given), (await child.result()).state)

    state = result.state
    graph_id = state.graph_id
    assert state.status == GraphStatus.FAILED
    assert state.total_budget == Budget(max_tokens=TOTAL_TOKENS)
    first_budget, first = loops[f"{graph_id}/T-001/1"]
    second_budget, second = loops[f"{graph_id}/T-002/1"]
    assert set(loops) == {f"{graph_id}/T-001/1", f"{graph_id}/T-002/1"}, "T-003 never starts"
    # The first loop got its own budget (smaller than the total), the second what was left.
    assert first_budget == Budget(max_tokens=PER_LOOP_TOKENS)
    assert first.status == RunStatus.COMPLETED
    assert second_budget == Budget(max_tokens=TOTAL_TOKENS - first.usage.total_tokens)
    assert second.stop_reason == StopReason.BUDGET_EXHAUSTED
    # The graph's usage is its loops', and the message says what of which budget.
    assert state.usage == first.usage + second.usage
    used = state.usage.total_tokens
    assert used >= TOTAL_TOKENS
    assert state.message == (
        f"the graph's budget is spent: used {used} tokens of {TOTAL_TOKENS}; "
        "not started: T-002, T-003"
    )
    by_id = {t.task.id: t for t in state.tasks}
    assert by_id["T-001"].status == TaskStatus.COMPLETED
    # T-002's retry and T-003 were never started: blocked, saying why, in the ledger too.
    why = f"not started: the graph's budget is spent: used {used} tokens of {TOTAL_TOKENS}"
    for task_id, attempts in (("T-002", 1), ("T-003", 0)):
        assert (by_id[task_id].status, by_id[task_id].attempts) == (TaskStatus.BLOCKED, attempts)
        assert by_id[task_id].last_failure == why
    last = {line.id: line for line in result.ledger}
    assert last["T-002"].summary == why and last["T-003"].summary == why
    on_branch = ledger_lines(git_show(harness, state.integration_branch, LEDGER_PATH))
    assert on_branch == result.ledger
