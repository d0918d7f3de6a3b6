"""A graph's total budget (docs/graphs.md#budget) through whole graphs on the time-skipping
server with real git and a model that reports what it spends: each task loop starts with
what is left of the total, loops running at once hold their budgets apart, no loop spends
past its own, so the graph never records more than its total; once a loop ran out of what
the total had left it, no loop starts and the graph fails naming it."""

from __future__ import annotations

import json

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from loopworks.llm.offline.model import OfflineScript
from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.roles import Role
from loopworks.schemas.run import Budget, RunState, RunStatus, StopReason, TokenUsage
from loopworks.schemas.tasks import LEDGER_PATH, TaskStatus, ledger_lines
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from tests.fakes.spending import SpendingModels
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import git_show, start_graph, task
from tests.workflows.test_run_budget import NO_ARTIFACT, recorded

pytestmark = pytest.mark.workflow

# A task loop on the spending model takes about 24,000 tokens, and its largest request
# needs some 20,000 left to be sent: the first loop fits in the total, the second is left
# too little for its first request, the third never starts.
TOTAL_TOKENS = 40_000
PER_LOOP_TOKENS = 100_000
PLANNER_PATCH = "graph-planner-usage"
RUN_OUT_PATCH = "graph-spent-when-a-loop-runs-out"


def asked_patches(history: WorkflowHistory) -> list[str]:
    """The ids of the patches a workflow's history recorded, in order."""
    return [
        json.loads(attrs.details["patch-data"].payloads[0].data)["id"]
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and (attrs := event.marker_recorded_event_attributes).marker_name == "core_patch"
    ]


async def loops_of(harness: LoopHarness, run_ids: list[str]) -> dict[str, tuple[Budget, RunState]]:
    """Each loop's budget, as its graph started it, and its final state."""
    loops: dict[str, tuple[Budget, RunState]] = {}
    for run_id in run_ids:
        child = harness.env.client.get_workflow_handle_for(LoopWorkflow.run, run_id)
        history = await child.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        given = json.loads(started.input.payloads[0].data)["request"]["budget"]
        loops[run_id] = (Budget.model_validate(given), (await child.result()).state)
    return loops


async def test_loops_start_with_what_is_left_and_a_spent_graph_starts_no_more(
    harness: LoopHarness,
) -> None:
    models = SpendingModels()
    tasks = [task("T-001"), task("T-002", "T-001"), task("T-003", "T-002")]
    async with harness.worker(models=models):
        handle = await start_graph(
            harness,
            tasks,
            budget={"max_tokens": PER_LOOP_TOKENS},
            total_budget={"max_tokens": TOTAL_TOKENS},
        )
        result = await handle.result()
        loops = await loops_of(harness, [r for t in result.state.tasks for r in t.run_ids])

    state = result.state
    graph_id = state.graph_id
    assert state.status == GraphStatus.FAILED
    assert state.total_budget == Budget(max_tokens=TOTAL_TOKENS)
    first_budget, first = loops[f"{graph_id}/T-001/1"]
    second_budget, second = loops[f"{graph_id}/T-002/1"]
    assert set(loops) == {f"{graph_id}/T-001/1", f"{graph_id}/T-002/1"}, "T-003 never starts"
    # The first loop got the total (smaller than its own budget), the second what was left.
    assert first_budget == Budget(max_tokens=TOTAL_TOKENS)
    assert first.status == RunStatus.COMPLETED
    assert second_budget == Budget(max_tokens=TOTAL_TOKENS - first.usage.total_tokens)
    assert second.stop_reason == StopReason.BUDGET_EXHAUSTED
    # The graph's usage is its loops', every request counted, never past the total.
    assert state.usage == first.usage + second.usage
    used = state.usage.total_tokens
    assert used == sum(spent.input_tokens + spent.output_tokens for spent in models.requests)
    assert used <= TOTAL_TOKENS
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


async def test_loops_running_at_once_never_together_spend_past_the_total(
    harness: LoopHarness,
) -> None:
    # Every loop's producer would answer its second turn with a million tokens.
    models = SpendingModels(wants={Role.PRODUCER: [100, 1_000_000]})
    total, per_loop = 90_000, 30_000
    async with harness.worker(models=models):
        handle = await start_graph(
            harness,
            [task("T-001"), task("T-002"), task("T-003")],
            budget={"max_tokens": per_loop},
            total_budget={"max_tokens": total},
        )
        result = await handle.result()
        run_ids = [r for t in result.state.tasks for r in t.run_ids]
        loops = await loops_of(harness, run_ids)
        history = [event async for event in handle.fetch_history_events()]

    state = result.state
    # The three first loops ran at once: each started before any ended, on its own budget.
    kinds = [event.event_type for event in history]
    starting = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    started = [i for i, kind in enumerate(kinds) if kind == starting]
    ended = kinds.index(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED)
    assert len([i for i in started if i < ended]) == 3
    firsts = [loops[f"{state.graph_id}/{t}/1"] for t in ("T-001", "T-002", "T-003")]
    assert [budget for budget, _ in firsts] == [Budget(max_tokens=per_loop)] * 3
    # Each ran out of its budget, spending no more than it; so did every later attempt.
    for budget, loop in loops.values():
        assert loop.stop_reason == StopReason.BUDGET_EXHAUSTED
        assert loop.usage.total_tokens <= (budget.max_tokens or 0)
    assert state.usage == sum((loop.usage for _, loop in loops.values()), TokenUsage())
    spent = sum(s.input_tokens + s.output_tokens for s in models.requests)
    assert state.usage.total_tokens == spent <= total
    assert state.status == GraphStatus.FAILED


@pytest.mark.parametrize("counted", [True, False], ids=["planned-now", "planned-before"])
async def test_the_task_planner_spends_from_the_total_and_a_graph_planned_before_replays(
    harness: LoopHarness, monkeypatch: pytest.MonkeyPatch, counted: bool
) -> None:
    if not counted:
        # A graph planned by the code before its planner was counted: it asks no patch.
        asked = workflow.patched
        monkeypatch.setattr(
            workflow, "patched", lambda patch_id: patch_id != PLANNER_PATCH and asked(patch_id)
        )
    models = SpendingModels()
    async with harness.worker(models=models):
        handle = await start_graph(
            harness, None, total_budget={"max_tokens": 5_000_000}, max_parallel=1
        )
        result = await handle.result()
        history = await handle.fetch_history()
    monkeypatch.undo()

    state = result.state
    assert state.source == "planner" and state.status == GraphStatus.COMPLETED
    planner = sum(
        spent.input_tokens + spent.output_tokens for spent in models.for_role(Role.TASK_PLANNER)
    )
    everything = sum(spent.input_tokens + spent.output_tokens for spent in models.requests)
    assert planner > 0
    assert state.usage.total_tokens == (everything if counted else everything - planner)
    assert asked_patches(history).count(PLANNER_PATCH) == (1 if counted else 0)
    replayer = Replayer(workflows=[TaskGraphWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history)).replay_failure is None


async def test_a_graph_whose_loops_ended_before_a_run_out_loop_spent_it_replays(
    harness: LoopHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The code before the rule: a loop that ran out of what the total left it spends
    # nothing of the graph's budget but what it reports, so what is left starts more loops.
    asked = workflow.patched
    monkeypatch.setattr(
        workflow, "patched", lambda patch_id: patch_id != RUN_OUT_PATCH and asked(patch_id)
    )
    tasks = [task("T-001"), task("T-002", "T-001")]
    async with harness.worker(models=SpendingModels()):
        handle = await start_graph(
            harness,
            tasks,
            budget={"max_tokens": PER_LOOP_TOKENS},
            total_budget={"max_tokens": TOTAL_TOKENS},
        )
        result = await handle.result()
        history = await handle.fetch_history()
    monkeypatch.undo()

    by_id = {t.task.id: t for t in result.state.tasks}
    assert by_id["T-002"].attempts > 1  # retried on the crumb the first attempt left
    assert RUN_OUT_PATCH not in asked_patches(history)
    assert result.state.usage.total_tokens <= TOTAL_TOKENS
    replayer = Replayer(workflows=[TaskGraphWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history)).replay_failure is None


async def test_loops_that_end_in_invalid_output_spend_within_the_graphs_total(
    harness: LoopHarness,
) -> None:
    """The graph charges a loop what the loop reports: a loop ending in invalid output
    reported none of its last step's spending, so each retry started with nearly the whole
    total again and the loops were billed past it."""
    total = 40_000
    models = SpendingModels(wants={Role.PRODUCER: 5_000}, script=NO_ARTIFACT)
    async with harness.worker(models=models):
        handle = await start_graph(harness, [task("T-001")], total_budget={"max_tokens": total})
        result = await handle.result()

    assert result.state.status == GraphStatus.FAILED
    assert recorded(models) == result.state.usage.total_tokens
    assert recorded(models) <= total


async def test_a_planner_that_answers_invalidly_is_counted_in_what_the_graph_spent(
    harness: LoopHarness,
) -> None:
    """Its two requests (the answer and its repair) were billed, then the graph failed
    having recorded none of them, and its client's day was charged nothing."""
    script = OfflineScript.model_validate({"task-planner": {"*": "I would rather not plan."}})
    models = SpendingModels(script=script)
    async with harness.worker(models=models):
        handle = await start_graph(harness, None, total_budget={"max_tokens": 5_000_000})
        result = await handle.result()

    assert result.state.status == GraphStatus.FAILED
    assert "invalid output" in result.state.message
    planner = [s.input_tokens + s.output_tokens for s in models.for_role(Role.TASK_PLANNER)]
    assert len(planner) == 2
    assert result.state.usage.total_tokens == sum(planner) == recorded(models)
