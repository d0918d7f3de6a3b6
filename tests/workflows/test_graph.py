"""TaskGraphWorkflow on the time-skipping server with real git and the offline model:
tasks run as child loops in dependency order, merge one at a time, and complete only
when their verification command passes on the integration branch."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import activity
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.worker import Worker

from loopworks.activities.integration import IntegrationActivities
from loopworks.activities.production import ProductionActivities
from loopworks.api import graph_handles
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.answers import default_answer
from loopworks.llm.offline.model import OfflineModels, OfflineScript, _agent_turn, _written
from loopworks.schemas.graph import (
    GraphApproval,
    GraphInput,
    GraphRequest,
    GraphResult,
    GraphState,
    GraphStatus,
)
from loopworks.schemas.integration import LedgerOutput, LedgerRequest
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ArtifactOutput, ProduceInput
from loopworks.schemas.tasks import LEDGER_PATH, Task, TaskStatus, ledger_lines
from loopworks.worker.build import WORKFLOWS, activities_of, build_deps, build_worker
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.search_attributes import (
    GRAPH_STATUS,
    GRAPH_TASKS,
    LOOP_GRAPH,
    TASKS_COMPLETED,
    TASKS_FAILED,
)
from tests.workflows.conftest import PRODUCING_FOR_TWO_MINUTES, LoopHarness, commit_all

pytestmark = pytest.mark.workflow

# The loop writes artifact.md at its root; the merge queue moves it under docs/tasks/<id>/.
ARTIFACT_EXISTS = "test -f artifact.md || test -f docs/tasks/{id}/artifact.md"


def task(task_id: str, *requires: str, verify: str | None = None) -> dict[str, Any]:
    return {
        "id": task_id,
        "title": f"Write part {task_id}",
        "description": f"Write a short section for part {task_id} of the guide.",
        "requires": list(requires),
        "acceptance_criteria": [f"Part {task_id} is written"],
        "verification_command": verify or ARTIFACT_EXISTS.format(id=task_id),
    }


async def start_graph(
    harness: LoopHarness,
    tasks: list[dict[str, Any]] | None,
    continue_as_new_after_events: int | None = None,
    **request: Any,
) -> WorkflowHandle[TaskGraphWorkflow, GraphResult]:
    graph_id = f"graph-{uuid.uuid4().hex[:8]}"
    return await harness.env.client.start_workflow(
        TaskGraphWorkflow.run,
        GraphInput(
            graph_id=graph_id,
            request=GraphRequest(
                **{
                    "goal": "Write a guide in parts",
                    "tasks": tasks,
                    "max_iterations": 2,
                    "audit_probability": 0.0,
                    **request,
                }
            ),
            created_at="2026-01-01T00:00:00+00:00",
            continue_as_new_after_events=continue_as_new_after_events,
        ),
        id=graph_id,
        task_queue=harness.task_queue,
    )


def git_show(harness: LoopHarness, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(harness.origin), "show", f"{ref}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def test_a_diamond_runs_in_dependency_order_and_merges_one_at_a_time(
    harness: LoopHarness,
) -> None:
    tasks = [
        task("T-001"),
        task("T-002", "T-001"),
        task("T-003", "T-001"),
        task("T-004", "T-002", "T-003"),
    ]
    async with harness.worker(latency_ms=200):
        handle = await start_graph(harness, tasks)
        result = await handle.result()
        shown = (await handle.describe()).typed_search_attributes
        child = await harness.env.client.get_workflow_handle(
            result.state.tasks[0].run_ids[0]
        ).describe()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    assert [t.status for t in state.tasks] == [TaskStatus.COMPLETED] * 4
    lines = result.ledger
    started = {line.id: i for i, line in enumerate(lines) if line.status == TaskStatus.IN_PROGRESS}
    done = {line.id: i for i, line in enumerate(lines) if line.status == TaskStatus.COMPLETED}
    # B and C ran side by side: both started before either was merged.
    assert max(started["T-002"], started["T-003"]) < min(done["T-002"], done["T-003"])
    # D started only after both were merged and verified.
    assert started["T-004"] > max(done["T-002"], done["T-003"])
    assert all(
        line.exit_code == 0 and line.output_sha256
        for line in lines
        if line.status == TaskStatus.COMPLETED
    )
    # The ledger on the integration branch is the workflow's, line for line, in order.
    on_branch = ledger_lines(git_show(harness, state.integration_branch, LEDGER_PATH))
    assert on_branch == lines
    for task_id in ("T-001", "T-002", "T-003", "T-004"):
        assert git_show(harness, state.integration_branch, f"docs/tasks/{task_id}/artifact.md")
        # Each loop reflected (its records moved with its artifact).
        path = f"docs/tasks/{task_id}/loops/insights.json"
        assert git_show(harness, state.integration_branch, path)
    # The Temporal UI's list is a dashboard: the graph's counts, each loop's graph.
    assert shown.get(GRAPH_STATUS) == "completed"
    assert shown.get(TASKS_COMPLETED) == 4 and shown.get(TASKS_FAILED) == 0
    assert shown.get(GRAPH_TASKS) == "pending=0 in-progress=0 completed=4 failed=0 blocked=0"
    assert child.typed_search_attributes.get(LOOP_GRAPH) == state.graph_id
    runs = [t.run_ids for t in state.tasks]
    assert runs == [[f"{state.graph_id}/{t['id']}/1"] for t in tasks]


async def test_a_loop_that_passes_but_fails_verification_is_retried_then_fixed(
    harness: LoopHarness,
) -> None:
    """`test -f artifact.md` passes in the task's loop (its artifact is at its root) and
    fails on the integration branch, where the artifact lands under docs/tasks/<id>/."""
    tasks = [
        task("T-001"),
        task("T-002", "T-001", verify="test -f artifact.md"),
        task("T-003", "T-001"),
        task("T-004", "T-002"),
    ]
    async with harness.worker():
        handle = await start_graph(harness, tasks)
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.FAILED
    by_id = {t.task.id: t for t in state.tasks}
    assert by_id["T-002"].status == TaskStatus.FAILED and by_id["T-002"].attempts == 2
    assert by_id["T-002"].last_failure.startswith("verification_failed")
    assert by_id["T-003"].status == TaskStatus.COMPLETED  # independent: it went on
    assert by_id["T-004"].status == TaskStatus.BLOCKED
    fix = by_id["T-002-fix-1"]
    assert fix.task.requires == ["T-001"] and "verification_failed" in fix.task.description
    assert fix.status == TaskStatus.FAILED  # the same command fails it too; no fix of a fix
    assert "T-002-fix-2" not in by_id
    never_completed = [line for line in result.ledger if line.id == "T-002"]
    assert TaskStatus.COMPLETED not in [line.status for line in never_completed]
    assert [line.exit_code for line in never_completed if line.exit_code is not None] == [1, 1]


async def test_a_stale_prep_package_falls_back_to_planning_with_the_failure_listed(
    harness: LoopHarness, tmp_path: Any
) -> None:
    repo = tmp_path / "repo"
    loop_dir = repo / ".workflow" / ".loop"
    loop_dir.mkdir(parents=True)
    # The workflow's clock is the test server's, which earlier tests may have skipped ahead.
    generated = await harness.env.get_current_time() - timedelta(hours=25)
    package = {
        "prep_status": "ready",
        "target_skill": "loopworks",
        "generated_at": generated.isoformat().replace("+00:00", "Z"),
        "environment": {"project_root": str(repo)},
        "source": {"tool": "test-prep"},
        "tasks": {"total": 1},
    }
    (loop_dir / "prep-package.json").write_text(json.dumps(package))
    (loop_dir / "prep-tasks.jsonl").write_text(json.dumps(task("T-001")) + "\n")
    (repo / "README.md").write_text("# a project\n")
    commit_all(repo)

    async with harness.worker():
        graph_id = f"graph-{uuid.uuid4().hex[:8]}"
        handle = await harness.env.client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id=graph_id,
                request=GraphRequest(goal="Write a guide", repo=str(repo), mode="interactive"),
                created_at="2026-01-01T00:00:00+00:00",
            ),
            id=graph_id,
            task_queue=harness.task_queue,
        )
        while (state := await handle.query(TaskGraphWorkflow.status)).status != (
            GraphStatus.AWAITING_APPROVAL
        ):
            await asyncio.sleep(0.2)
        await handle.signal(TaskGraphWorkflow.stop, "seen enough")
        result = await handle.result()

    assert state.source == "planner"
    [rejected] = state.prep_rejected  # the test server's clock runs on: 25h or a bit more
    assert re.fullmatch(r"prep-package is 25(\.\d)?h old \(max 24h\), may be stale", rejected)
    assert state.tasks, "the planner's tasks stand in for the package's"
    assert result.state.status == GraphStatus.STOPPED


class SharedFileModels(OfflineModels):
    """The offline model, whose producer also writes `shared.txt` with its task's title:
    two tasks in parallel then change one file differently, as real agents would."""

    def model(self, call: ModelCall) -> FunctionModel:
        if call.role != Role.PRODUCER:
            return super().model(call)

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            answer = default_answer(call.role, call.context)
            title = str(call.context["task"]).splitlines()[0]
            answer["files"] = [*answer["files"], {"path": "shared.txt", "content": title}]
            return ModelResponse(parts=_agent_turn(call, answer, _written(messages)))

        return FunctionModel(respond, model_name="offline")


async def test_two_tasks_changing_one_file_merge_in_turn_and_a_conflict_is_retried(
    harness: LoopHarness,
) -> None:
    tasks = [task("T-001"), task("T-002")]  # independent, no files declared: run together
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    async with build_worker(harness.env.client, settings, models=SharedFileModels()):
        handle = await start_graph(harness, tasks)
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    first, second = sorted(state.tasks, key=lambda t: t.attempts)
    assert (first.attempts, second.attempts) == (1, 2)
    # The loser of the race saw the conflict, and its retry was briefed with it.
    assert second.last_failure.startswith("conflict")
    assert "shared.txt" in second.last_failure
    retried = [line for line in result.ledger if line.id == second.task.id]
    assert [line.status for line in retried] == [
        TaskStatus.PENDING,
        TaskStatus.IN_PROGRESS,
        TaskStatus.PENDING,
        TaskStatus.IN_PROGRESS,
        TaskStatus.COMPLETED,
    ]
    assert "conflict" in retried[2].summary
    retry = await harness.env.client.get_workflow_handle(second.run_ids[1]).fetch_history()
    started = retry.events[0].workflow_execution_started_event_attributes
    brief = json.loads(started.input.payloads[0].data)["request"]["task"]
    assert "The previous attempt failed:\nconflict" in brief
    # The integration branch holds the second task's version, merged on top of the first.
    assert git_show(harness, state.integration_branch, "shared.txt") == second.task.title


class BlockingModels(OfflineModels):
    """The offline model, whose custodiet blocks the first audit of T-002's loop only."""

    def model(self, call: ModelCall) -> FunctionModel:
        if call.role != Role.CUSTODIET or "T-002" not in str(call.context["task"]):
            return super().model(call)

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            verdict = "BLOCK" if call.call_index == 1 else "OK"
            answer = {"verdict": verdict, "reason": "drift", "violations": []}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answer)])

        return FunctionModel(respond, model_name="offline")


async def test_a_blocked_task_holds_only_what_needs_it_until_cleared_through_the_graph(
    harness: LoopHarness,
) -> None:
    tasks = [task("T-001"), task("T-002"), task("T-003", "T-002")]
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    client = harness.env.client
    async with build_worker(client, settings, models=BlockingModels()):
        handle = await start_graph(harness, tasks, audit_probability=1.0)

        async def t002_blocked_and_t001_done() -> GraphState | None:
            state = await handle.query(TaskGraphWorkflow.status)
            by_id = {t.task.id: t for t in state.tasks}
            if not by_id or by_id["T-001"].status != TaskStatus.COMPLETED:
                return None
            if not by_id["T-002"].run_ids:
                return None
            loop = client.get_workflow_handle_for(LoopWorkflow.run, by_id["T-002"].run_ids[-1])
            blocked = (await loop.query(LoopWorkflow.status)).status == RunStatus.BLOCKED
            return state if blocked else None

        for _ in range(300):
            if held := await t002_blocked_and_t001_done():
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("T-002 never blocked while T-001 completed")
        assert held.task("T-003").status == TaskStatus.PENDING  # waits on the blocked task
        cleared = await graph_handles.clear_block(client, handle, "T-002", "scope confirmed")
        assert cleared.blocked is False
        result = await handle.result()

    assert result.state.status == GraphStatus.COMPLETED, result.state.message


async def test_a_long_graph_continues_as_new_between_waves_and_keeps_its_ledger(
    harness: LoopHarness,
) -> None:
    tasks = [task("T-001"), task("T-002", "T-001"), task("T-003", "T-002")]
    async with harness.worker():
        handle = await start_graph(harness, tasks, continue_as_new_after_events=10)
        result = await handle.result()
        latest = await handle.fetch_history()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    started = latest.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id, "the graph never continued as new"
    # The ledger went on across executions: every task's lines, in order, once each.
    statuses = [(line.id, line.status) for line in result.ledger]
    assert statuses.count(("T-003", TaskStatus.COMPLETED)) == 1
    assert len(set(statuses)) == len(statuses)
    on_branch = ledger_lines(git_show(harness, state.integration_branch, LEDGER_PATH))
    assert on_branch == result.ledger


async def test_interactive_graph_waits_for_approval_of_an_edited_list_and_pause_holds_starts(
    harness: LoopHarness,
) -> None:
    tasks = [task("T-001"), task("T-002", "T-001")]
    async with harness.worker():
        handle = await start_graph(harness, tasks, mode="interactive")
        while (await handle.query(TaskGraphWorkflow.status)).status != (
            GraphStatus.AWAITING_APPROVAL
        ):
            await asyncio.sleep(0.1)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            # An edited list is validated like any other: T-009 is no task of it.
            await handle.execute_update(
                TaskGraphWorkflow.approve,
                GraphApproval(tasks=[Task.model_validate(task("T-001", "T-009"))]),
            )
        assert "T-009" in str(refused.value.cause)
        edited = [Task.model_validate(task("T-001"))]
        approved = await handle.execute_update(
            TaskGraphWorkflow.approve, GraphApproval(tasks=edited)
        )
        assert approved.status == GraphStatus.RUNNING  # not the awaiting_approval it was
        paused = await handle.execute_update(TaskGraphWorkflow.pause)
        assert paused.status == GraphStatus.PAUSED
        await asyncio.sleep(1.0)
        held = await handle.query(TaskGraphWorkflow.status)
        assert [t.run_ids for t in held.tasks] == [[]], "a task started while paused"
        await handle.execute_update(TaskGraphWorkflow.resume)
        result = await handle.result()

    assert result.state.status == GraphStatus.COMPLETED
    assert [t.task.id for t in result.state.tasks] == ["T-001"]
    assert result.state.source == "approval"


async def test_stopping_a_graph_stops_its_loops_and_they_still_push(
    harness: LoopHarness,
) -> None:
    async with harness.worker(PRODUCING_FOR_TWO_MINUTES):
        handle = await start_graph(harness, [task("T-001"), task("T-002")])
        while not all(t.run_ids for t in (await handle.query(TaskGraphWorkflow.status)).tasks):
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        await handle.signal(TaskGraphWorkflow.stop, "enough")
        result = await asyncio.wait_for(handle.result(), timeout=30)
        loops = [
            await harness.env.client.get_workflow_handle_for(
                LoopWorkflow.run, t.run_ids[0]
            ).result()
            for t in result.state.tasks
        ]

    assert result.state.status == GraphStatus.STOPPED
    assert result.state.message == "a stop was requested: enough"
    assert all(t.status == TaskStatus.FAILED for t in result.state.tasks)
    # Why, as `loops graph status` shows it under each task (it said nothing).
    assert all(t.last_failure == "stopped with the graph" for t in result.state.tasks)
    for loop in loops:
        assert loop.state.status == RunStatus.STOPPED
        assert git_show(harness, loop.state.branch, ".loops/insights.json")  # still pushed


async def test_a_stopped_graph_starts_no_task_when_its_history_is_long(
    harness: LoopHarness,
) -> None:
    """The stopped loop ends with no other running and the history past its limit: the
    graph must finish stopped there, not continue as new and start the next task."""
    async with harness.worker(PRODUCING_FOR_TWO_MINUTES):
        handle = await start_graph(
            harness,
            [task("T-001"), task("T-002")],
            continue_as_new_after_events=10,
            max_parallel=1,
        )
        while not any(t.run_ids for t in (await handle.query(TaskGraphWorkflow.status)).tasks):
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        await handle.signal(TaskGraphWorkflow.stop, "enough")
        # Until it ends or starts the other task (the query follows a new execution).
        for _ in range(600):
            state = await handle.query(TaskGraphWorkflow.status)
            if state.status.is_terminal or all(t.run_ids for t in state.tasks):
                break
            await asyncio.sleep(0.1)

    assert [t for t in state.tasks if not t.run_ids], "a task started after the graph was stopped"
    assert state.status == GraphStatus.STOPPED, state.message
    assert state.message == "a stop was requested: enough"


async def test_a_stop_that_arrives_while_the_graph_saves_its_ledger_stops_its_loops(
    harness: LoopHarness,
) -> None:
    """The graph is busy (its ledger being saved, right after it started both loops) when
    the stop arrives: it must not wait for a loop to end (two minutes here) to pass the
    stop on. Seen as a flaky test under load before the fix.

    The ledger is held until both loops are producing, so the stop the graph passes on
    cancels those two-minute steps: a loop stopped in one of its short first steps may have
    its cancel cross the step's completion, which the time-skipping test server refuses
    (ACTIVITY_UNKNOWN, where Temporal records the request and goes on), and that loop's
    workflow task then never completes."""
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    script = OfflineScript.model_validate(PRODUCING_FOR_TWO_MINUTES)
    deps = build_deps(settings, OfflineModels(script=script))
    real_ledger = IntegrationActivities(deps).record_ledger
    real_produce = ProductionActivities(deps).produce_artifact
    both_started, both_producing, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    producing: list[str] = []

    @activity.defn(name="record_ledger")
    async def held_record_ledger(request: LedgerRequest) -> LedgerOutput:
        if sum(line.status == TaskStatus.IN_PROGRESS for line in request.lines) == 2:
            both_started.set()
            await release.wait()
        return await real_ledger(request)

    @activity.defn(name="produce_artifact")
    async def counted_produce_artifact(step: ProduceInput) -> ArtifactOutput:
        producing.append(step.run_id)
        if len(producing) == 2:
            both_producing.set()
        return await real_produce(step)

    replaced = {"record_ledger", "produce_artifact"}
    activities: list[Callable[..., Any]] = [
        *(a for a in activities_of(deps, harness.env.client) if a.__name__ not in replaced),
        held_record_ledger,
        counted_produce_artifact,
    ]
    async with Worker(
        harness.env.client,
        task_queue=harness.task_queue,
        workflows=[TaskGraphWorkflow, LoopWorkflow],
        activities=activities,
    ):
        handle = await start_graph(harness, [task("T-001"), task("T-002")])
        await asyncio.wait_for(both_started.wait(), timeout=60)
        await asyncio.wait_for(both_producing.wait(), timeout=60)
        await handle.signal(TaskGraphWorkflow.stop, "enough")
        release.set()
        result = await asyncio.wait_for(handle.result(), timeout=60)

    assert result.state.status == GraphStatus.STOPPED
    assert all(t.status == TaskStatus.FAILED for t in result.state.tasks)


async def test_a_prep_package_sent_with_the_request_stands_in_for_planning(
    harness: LoopHarness,
) -> None:
    package = {
        "prep_status": "ready",
        "target_skill": "loopworks",
        "generated_at": (await harness.env.get_current_time()).isoformat(),
        "environment": {"project_root": str(harness.origin)},
        "source": {"tool": "uploaded-prep"},
        "tasks": {"total": 1},
    }
    upload = {"package": json.dumps(package), "tasks": json.dumps(task("T-001")) + "\n"}
    async with harness.worker():
        handle = await start_graph(harness, None, prep_package=upload)  # type: ignore[arg-type]
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    assert state.source.startswith("prep package (uploaded-prep, sha256 ")
    assert [t.task.id for t in state.tasks] == ["T-001"] and state.prep_rejected == []


async def _status(handle: WorkflowHandle[TaskGraphWorkflow, GraphResult], wanted: str) -> None:
    while (await handle.query(TaskGraphWorkflow.status)).status != wanted:
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("resumed_first", [False, True], ids=["approved-paused", "resumed-first"])
async def test_a_graph_paused_while_it_awaits_approval_still_takes_the_approval(
    harness: LoopHarness, resumed_first: bool
) -> None:
    """Paused before its approval, it refused the approval it waited for, and resumed
    it read `running` and refused it still: nothing could ever start it again."""
    async with harness.worker():
        handle = await start_graph(harness, [task("T-001")], mode="interactive")
        await _status(handle, GraphStatus.AWAITING_APPROVAL)
        paused = await handle.execute_update(TaskGraphWorkflow.pause)
        assert paused.status == GraphStatus.PAUSED
        if resumed_first:
            resumed = await handle.execute_update(TaskGraphWorkflow.resume)
            assert resumed.status == GraphStatus.AWAITING_APPROVAL
            approved = await handle.execute_update(TaskGraphWorkflow.approve, GraphApproval())
            assert approved.status == GraphStatus.RUNNING
        else:
            approved = await handle.execute_update(TaskGraphWorkflow.approve, GraphApproval())
            assert approved.status == GraphStatus.PAUSED
            await asyncio.sleep(1.0)
            held = await handle.query(TaskGraphWorkflow.status)
            assert [t.run_ids for t in held.tasks] == [[]], "a task started while paused"
            await handle.execute_update(TaskGraphWorkflow.resume)
        result = await asyncio.wait_for(handle.result(), timeout=120)

    assert result.state.status == GraphStatus.COMPLETED, result.state.message


async def test_a_graph_is_approved_once(harness: LoopHarness) -> None:
    """A second approval, sent while the first one's ledger was being saved (the graph
    still read `awaiting_approval`), replaced the approved tasks."""
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    deps = build_deps(settings, OfflineModels())
    real_ledger = IntegrationActivities(deps).record_ledger
    held, release = asyncio.Event(), asyncio.Event()

    @activity.defn(name="record_ledger")
    async def held_record_ledger(request: LedgerRequest) -> LedgerOutput:
        if not release.is_set():
            held.set()
            await release.wait()
        return await real_ledger(request)

    activities: list[Callable[..., Any]] = [
        *(a for a in activities_of(deps, harness.env.client) if a.__name__ != "record_ledger"),
        held_record_ledger,
    ]
    async with Worker(
        harness.env.client,
        task_queue=harness.task_queue,
        workflows=list(WORKFLOWS),
        activities=activities,
    ):
        handle = await start_graph(harness, [task("T-001")], mode="interactive")
        await _status(handle, GraphStatus.AWAITING_APPROVAL)
        await handle.execute_update(TaskGraphWorkflow.approve, GraphApproval())
        await asyncio.wait_for(held.wait(), timeout=60)
        edited = GraphApproval(tasks=[Task.model_validate(task("T-007"))])
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(TaskGraphWorkflow.approve, edited)
        release.set()
        result = await asyncio.wait_for(handle.result(), timeout=120)

    assert "not awaiting approval" in str(refused.value.cause)
    assert [t.task.id for t in result.state.tasks] == ["T-001"]
    assert result.state.status == GraphStatus.COMPLETED, result.state.message


async def test_an_edit_that_breaks_the_atomic_rule_is_refused_at_approval(
    harness: LoopHarness, tmp_path: Any
) -> None:
    """The approval's validator did not know the repository's files: an edit listing four
    existing files was approved, then failed the whole graph once the approval was taken."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("a.py", "b.py", "c.py", "d.py"):
        (repo / name).write_text(f"# {name}\n")
    commit_all(repo)
    wide = {**task("T-001"), "context": {"files": ["a.py", "b.py", "c.py", "d.py"]}}

    async with harness.worker():
        handle = await start_graph(harness, [task("T-001")], mode="interactive", repo=str(repo))
        await _status(handle, GraphStatus.AWAITING_APPROVAL)
        edited = GraphApproval(tasks=[Task.model_validate(wide)])
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(TaskGraphWorkflow.approve, edited)
        waiting = await handle.query(TaskGraphWorkflow.status)
        await handle.execute_update(TaskGraphWorkflow.approve, GraphApproval())
        result = await asyncio.wait_for(handle.result(), timeout=120)

    assert "T-001 modifies 4 existing files" in str(refused.value.cause)
    assert waiting.status == GraphStatus.AWAITING_APPROVAL
    assert result.state.status == GraphStatus.COMPLETED, result.state.message


async def test_a_pause_between_two_starts_holds_the_rest(harness: LoopHarness) -> None:
    """Three tasks start one after another; a pause answered after the first must hold
    the others (they started all the same)."""
    async with harness.worker(PRODUCING_FOR_TWO_MINUTES):
        handle = await start_graph(
            harness, [task("T-001"), task("T-002"), task("T-003")], max_parallel=3
        )
        while not any(t.run_ids for t in (await handle.query(TaskGraphWorkflow.status)).tasks):
            pass
        await handle.execute_update(TaskGraphWorkflow.pause)
        started = [
            t.task.id for t in (await handle.query(TaskGraphWorkflow.status)).tasks if t.run_ids
        ]
        await asyncio.sleep(2.0)
        later = [
            t.task.id for t in (await handle.query(TaskGraphWorkflow.status)).tasks if t.run_ids
        ]
        await handle.signal(TaskGraphWorkflow.stop, "done")
        await asyncio.wait_for(handle.result(), timeout=60)

    assert later == started, "a task started after the pause was answered"
