"""LoopWorkflow end to end on the time-skipping server, with a scripted offline model."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from loopworks.schemas.events import ArtifactCreated, ChecksPrepared, EvaluationDone
from loopworks.schemas.payloads import Timed
from loopworks.schemas.rules import described_rules
from loopworks.schemas.run import RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.worker.build import workflow_runner
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import PRODUCING_FOR_TWO_MINUTES, LoopHarness, names

pytestmark = pytest.mark.workflow

TESTS_RULE = {
    "id": "has-tests",
    "description": "The artifact has a Tests section",
    "severity": "fail",
    "check": {"kind": "pattern", "pattern": "^## Tests", "example": "## Tests\n\nRun pytest."},
}
TITLE_RULE = {
    "id": "has-title",
    "description": "The artifact has a title",
    "severity": "fail",
    "check": {"kind": "pattern", "pattern": "^# \\S"},
}
# Each carries its check: a command and a pattern in phase A, a pattern in phase B.
PHASED_RULES = [
    TITLE_RULE,
    {
        "id": "written",
        "description": "Not empty",
        "severity": "fail",
        "check": {"kind": "command", "command": "test -s artifact.md"},
    },
    {
        "id": "has-body",
        "description": "A body",
        "severity": "warn",
        "phase": "B",
        "check": {"kind": "pattern", "pattern": "\\w+"},
    },
]
# No example: the offline refiner has nothing to add, so this rule never passes.
IMPOSSIBLE_RULE = {
    "id": "impossible",
    "description": "Mentions a token nobody writes",
    "severity": "fail",
    "check": {"kind": "pattern", "pattern": "XYZZY-PLUGH"},
}


def remote_file(origin: Any, branch: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(origin), "show", f"{branch}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.1)


async def test_fails_first_iteration_then_passes_after_refinement(harness: LoopHarness) -> None:
    async with harness.worker():
        handle = await harness.start(task="Write a testing guide", rules=[TITLE_RULE, TESTS_RULE])
        result = await handle.result()
        events = await harness.events(handle)

    state = result.state
    assert state.status == RunStatus.COMPLETED
    assert state.stop_reason == StopReason.THRESHOLD_REACHED
    assert state.iteration == 2
    flow = names(events)
    assert flow.index("critique_done") < flow.index("refinement_done")
    assert flow.index("refinement_done") < flow.index("iteration_advanced")
    scores = [e.payload.score for e in events if e.event.value == "evaluation_done"]
    first, last = scores[0], scores[-1]
    assert first == 0.5 and last == 1.0
    refinement = next(e for e in events if e.event.value == "refinement_done")
    assert refinement.payload.previous_artifact_hash
    assert refinement.payload.hash != refinement.payload.previous_artifact_hash
    assert flow[-1] == "pushed"
    artifact = remote_file(harness.origin, state.branch, "artifact.md")
    assert "## Tests" in artifact
    assert state.usage.calls > 0 and state.usage.output_tokens > 0


async def test_iteration_limit_reports_distance_to_success(harness: LoopHarness) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide", rules=[TITLE_RULE, IMPOSSIBLE_RULE], max_iterations=2
        )
        state = (await handle.result()).state

    assert state.status == RunStatus.STOPPED
    assert state.stop_reason == StopReason.ITERATION_LIMIT
    assert state.stop.message.startswith("the iteration limit (2) was reached: phase ")
    assert state.iteration == 2
    distance = state.stop.distance_to_success
    assert distance is not None
    assert distance.blocking_rule_ids == ["impossible"]
    assert distance.score == 0.5 and distance.gap == pytest.approx(0.3)
    assert (distance.passed_rules, distance.total_rules) == (1, 2)


async def test_stagnation_stops_a_loop_that_does_not_improve(harness: LoopHarness) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide", rules=[TITLE_RULE, IMPOSSIBLE_RULE], max_iterations=6
        )
        state = (await handle.result()).state
    assert state.stop_reason == StopReason.STAGNATION
    assert state.stop.message.startswith("no progress in 2 evaluations in a row: phase ")
    assert state.status == RunStatus.STOPPED
    assert state.iteration == 3 and state.stagnation_count == 2


async def test_no_major_issues_completes_below_threshold(harness: LoopHarness) -> None:
    warn_rule = {**IMPOSSIBLE_RULE, "id": "nice-to-have", "severity": "warn", "weight": 3}
    async with harness.worker():
        handle = await harness.start(task="Write a guide", rules=[TITLE_RULE, warn_rule])
        state = (await handle.result()).state
    assert state.stop_reason == StopReason.NO_MAJOR_ISSUES
    assert state.status == RunStatus.COMPLETED
    assert state.last_score == 0.4


async def test_critic_revise_then_proceed_rehydrates_with_feedback(harness: LoopHarness) -> None:
    script = {
        "critic": {
            "1": {"verdict": "REVISE", "issues": ["no rollback plan"], "feedback": "add one"},
            "2": {"verdict": "PROCEED"},
        }
    }
    async with harness.worker(script):
        handle = await harness.start(task="Write a migration plan")
        state = (await handle.result()).state
        events = await harness.events(handle)

    verdicts = [e.payload.verdict for e in events if e.event.value == "critic_verdict"]
    assert verdicts == ["REVISE", "PROCEED"]
    hydrations = [e for e in events if e.event.value == "hydration_done"]
    assert len(hydrations) == 2
    assert any("no rollback plan" in step for step in hydrations[1].payload.plan)
    assert state.status == RunStatus.COMPLETED


async def test_critic_halt_ends_the_run_halted(harness: LoopHarness) -> None:
    script = {"critic": {"*": {"verdict": "HALT", "feedback": "the task is unsafe"}}}
    async with harness.worker(script):
        handle = await harness.start(task="Delete production")
        state = (await handle.result()).state
        scheduled = await harness.activities_run(handle)

    assert state.status == RunStatus.HALTED
    assert state.stop_reason == StopReason.CRITIC_HALT
    assert state.stop.message == "the task is unsafe"
    assert "plan_iteration" not in scheduled and "produce_artifact" not in scheduled
    # Halting still reflects and pushes the (empty-handed) branch.
    assert scheduled[-2:] == ["reflect_on_run", "record_and_close_run"]


async def test_audit_block_parks_the_run_until_cleared(harness: LoopHarness) -> None:
    script = {"custodiet": {"1": {"verdict": "BLOCK", "reason": "scope drift"}}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide", audit_probability=1.0)

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        scheduled_at_block = await harness.activities_run(handle)
        await asyncio.sleep(1.5)
        assert await harness.activities_run(handle) == scheduled_at_block
        assert scheduled_at_block[-1] == "audit_run"
        state = await harness.status(handle)
        assert state.blocked and state.block.reason == "scope drift"

        cleared = await handle.execute_update(LoopWorkflow.clear_block, "reviewed: in scope")
        assert cleared.status == RunStatus.RUNNING and not cleared.blocked
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(LoopWorkflow.clear_block, "again")
        state = (await handle.result()).state
        history = await handle.fetch_history()

    assert state.status == RunStatus.COMPLETED
    assert state.block.count == 1
    # The note reaches the context of the first step after the block was cleared.
    cleared_at = next(
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    )
    after_block = next(
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and e.event_id > cleared_at
    )
    assert b"reviewed: in scope" in after_block.input.payloads[0].data


async def test_clear_block_is_rejected_when_not_blocked(harness: LoopHarness) -> None:
    async with harness.worker(latency_ms=300):
        handle = await harness.start(task="Write a guide")
        with pytest.raises(WorkflowUpdateFailedError) as raised:
            await handle.execute_update(LoopWorkflow.clear_block, "nothing to clear")
        assert "not blocked" in str(raised.value.cause)
        await handle.signal(LoopWorkflow.stop, "done testing")
        await handle.result()


async def test_stop_during_produce_cancels_and_still_pushes(harness: LoopHarness) -> None:
    async with harness.worker(PRODUCING_FOR_TWO_MINUTES):
        handle = await harness.start(task="Write a guide")

        async def producing() -> bool:
            return "produce_artifact" in await harness.activities_run(handle)

        await wait_for(producing)
        await asyncio.sleep(1.0)
        await handle.signal(LoopWorkflow.stop, "changed my mind")
        # A heartbeat every few seconds carries the cancellation to the activity.
        state = (await asyncio.wait_for(handle.result(), timeout=15)).state
        events = await harness.events(handle)
        history = await handle.fetch_history()

    assert state.status == RunStatus.STOPPED
    assert state.stop_reason == StopReason.USER_STOP
    assert state.stop.message == "changed my mind"
    types = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in types
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED in types
    flow = names(events)
    assert "artifact_created" not in flow
    assert flow[-3:] == ["stopped", "reflection_done", "pushed"]
    insights = remote_file(harness.origin, state.branch, ".loops/insights.json")
    assert '"stop_reason": "user_stop"' in insights


async def test_a_cancelled_run_stops_and_still_pushes(harness: LoopHarness) -> None:
    """What a task graph's request-cancel close policy does to its loops: cancel is a stop."""
    async with harness.worker(PRODUCING_FOR_TWO_MINUTES):
        handle = await harness.start(task="Write a guide")

        async def producing() -> bool:
            return "produce_artifact" in await harness.activities_run(handle)

        await wait_for(producing)
        await handle.cancel()
        state = (await asyncio.wait_for(handle.result(), timeout=15)).state
        events = await harness.events(handle)

    assert state.status == RunStatus.STOPPED and state.stop_reason == StopReason.USER_STOP
    assert state.stop.message.startswith("cancelled")
    assert names(events)[-3:] == ["stopped", "reflection_done", "pushed"]
    assert remote_file(harness.origin, state.branch, ".loops/insights.json")


async def test_invalid_output_twice_fails_with_phase_error(harness: LoopHarness) -> None:
    # One entry is every answer of the call: the first answer and its repair are invalid.
    script = {"planner": {"1": "not json at all"}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.FAILED
    assert state.stop_reason == StopReason.PHASE_ERROR
    errors = [e for e in events if e.event.value == "phase_error"]
    assert len(errors) == 1
    assert errors[0].payload.step == "PLAN"
    assert "invalid" in errors[0].payload.error
    assert "failed" in names(events)


async def test_invalid_output_once_is_repaired(harness: LoopHarness) -> None:
    repaired = {"focus": "a first draft", "steps": ["Draft it"]}
    script = {"planner": {"1": ["not json at all", repaired]}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)
    assert "phase_error" not in names(events)
    repairs = [e for e in events if e.event.value == "output_repaired"]
    assert len(repairs) == 1 and repairs[0].step == "PLAN"
    # The feedback the planner was sent names what was wrong with its first answer.
    assert "json" in repairs[0].payload.repairs[0].lower()
    plans = [e for e in events if e.event.value == "plan_created"]
    assert plans[0].payload.focus == "a first draft"
    assert state.status == RunStatus.COMPLETED


def _overlap(a: Timed, b: Timed) -> float:
    return min(a.finished_at, b.finished_at) - max(a.started_at, b.started_at)


async def test_produce_prepare_and_evaluation_groups_run_in_parallel(
    harness: LoopHarness,
) -> None:
    rules = [
        TITLE_RULE,
        {"id": "judged", "description": "reads well", "severity": "warn", "check": "Reads well?"},
        {
            "id": "slow-command",
            "description": "a command that takes a while",
            "severity": "warn",
            "check": {"kind": "command", "command": "sleep 0.6"},
        },
    ]
    async with harness.worker(latency_ms=600):
        handle = await harness.start(task="Write a guide", rules=rules)
        await handle.result()
        events = await harness.events(handle)

    produced = next(e.payload for e in events if isinstance(e, ArtifactCreated))
    prepared = next(e.payload for e in events if isinstance(e, ChecksPrepared))
    assert _overlap(produced, prepared) > 0.3
    groups = next(e.payload.groups for e in events if isinstance(e, EvaluationDone))
    # The two check groups (docs/loop.md#rules-and-checks): executable checks, and content
    # rules (patterns, judgements).
    assert set(groups) == {"exec", "content"}
    assert _overlap(groups["exec"], groups["content"]) > 0.3


async def test_prepare_runs_only_when_the_active_rules_change(harness: LoopHarness) -> None:
    """PREPARE reads the task and the active rules alone: a later iteration under the same
    rules reuses its checks (no activity, no model call); the phase switch prepares anew."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)
        scheduled = await harness.activities_run(handle)

    prepared = [e.payload for e in events if isinstance(e, ChecksPrepared)]
    reused = [p for p in prepared if p.reused]
    fresh = [p for p in prepared if not p.reused]
    described = {rule.id for rule in described_rules(state.rules)}
    asked = [f for f in fresh if described & set(f.rules)]  # a model had rules to make
    assert state.iteration >= 2 and reused and asked
    assert scheduled.count("prepare_checks") == len(asked)
    assert all(p.rules in [f.rules for f in fresh] and p.checks for p in reused)
    assert len({tuple(f.rules) for f in fresh}) == len(fresh)  # each fresh one: new rules


async def test_rules_that_all_carry_their_check_are_prepared_without_an_activity(
    harness: LoopHarness,
) -> None:
    """PREPARE's model only turns sentences into checks: when every active rule carries
    its check (here in both phases), the workflow takes them as they are."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide", rules=PHASED_RULES, max_iterations=1)
        state = (await handle.result()).state
        events = await harness.events(handle)
        scheduled = await harness.activities_run(handle)

    prepared = [e.payload for e in events if isinstance(e, ChecksPrepared)]
    assert [(p.rules, p.checks, p.reused) for p in prepared] == [
        (["has-title", "written"], 2, False),
        (["has-title", "written", "has-body"], 3, False),
    ]
    assert "prepare_checks" not in scheduled
    evaluations = [e.payload for e in events if isinstance(e, EvaluationDone)]
    assert len(evaluations) == 2 and evaluations[-1].passed
    assert state.usage.calls > 0 and state.status == RunStatus.COMPLETED


async def test_the_phase_switch_runs_only_the_checks_new_to_phase_b(
    harness: LoopHarness,
) -> None:
    """Re-evaluating the same commit reuses the results of the checks already run on it:
    phase B adds a pattern, so only the content group runs again, and the exec group's
    command does not."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide", rules=PHASED_RULES, max_iterations=1)
        await handle.result()
        events = await harness.events(handle)
        groups = (await harness.activities_run(handle)).count("evaluate_group")

    evaluations = [e.payload for e in events if isinstance(e, EvaluationDone)]
    assert len(evaluations) == 2  # phase A, then B on the same artifact
    assert set(evaluations[0].groups) == {"exec", "content"} and evaluations[0].reused == 0
    assert set(evaluations[1].groups) == {"content"}
    assert evaluations[1].groups["content"].checks == 1 and evaluations[1].reused == 2
    assert groups == 3
    assert evaluations[1].passed


async def test_close_commits_the_reflection_with_the_runs_last_events(
    harness: LoopHarness,
) -> None:
    """Reflect makes no commit and no push of its own: the reflection and the insights
    join the run's record in close's one commit."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        scheduled = await harness.activities_run(handle)

    log = ["git", "--git-dir", str(harness.origin), "log", "--format=%s", state.branch]
    subjects = subprocess.run(log, capture_output=True, text=True, check=True).stdout
    assert subjects.splitlines()[0] == "close: the run's record"
    assert "· reflect:" not in subjects
    assert remote_file(harness.origin, state.branch, ".loops/reflection.md").startswith("#")
    assert remote_file(harness.origin, state.branch, ".loops/insights.json")
    assert "record_and_close_run" in scheduled and "close_run" not in scheduled


@pytest.mark.parametrize(
    "budget", [{"max_tokens": 1500}, {"max_cost_usd": 0.002}], ids=["tokens", "cost"]
)
async def test_a_budget_too_small_for_a_request_stops_the_run_before_it_and_still_pushes(
    harness: LoopHarness, budget: dict[str, Any]
) -> None:
    # Whole runs whose budget runs out mid-step: tests/workflows/test_run_budget.py.
    async with harness.worker():
        handle = await harness.start(task="Write a guide", budget=budget)
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.STOPPED
    assert state.stop_reason == StopReason.BUDGET_EXHAUSTED
    # No request was sent that the budget could not pay for (docs/loop.md#budgets).
    assert "too little for the next model request" in state.stop.message
    assert (state.usage.total_tokens, state.usage.cost_usd) == (0, 0.0)
    flow = names(events)
    assert flow[-3:] == ["stopped", "failed", "pushed"]  # the reflection was refused too
    record = remote_file(harness.origin, state.branch, ".loops/run.json")
    assert '"stop_reason": "budget_exhausted"' in record


async def test_stop_while_reflecting_does_not_cancel_the_close(harness: LoopHarness) -> None:
    script = {"reflector": {"*": {"delay_ms": 2_000}}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide")

        async def reflecting() -> bool:
            return "reflect_on_run" in await harness.activities_run(handle)

        await wait_for(reflecting)
        await handle.signal(LoopWorkflow.stop, "too late")
        state = (await handle.result()).state
        events = names(await harness.events(handle))

    assert state.status == RunStatus.COMPLETED
    assert state.stop_reason == StopReason.THRESHOLD_REACHED
    assert events[-2:] == ["reflection_done", "pushed"]


def test_a_worker_runs_workflows_outside_the_sandbox_unless_told_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOOPS_WORKFLOW_SANDBOX")
    assert isinstance(workflow_runner(Settings()), UnsandboxedWorkflowRunner)
    guarded = Settings(LOOPS_WORKFLOW_SANDBOX="true")
    assert isinstance(workflow_runner(guarded), SandboxedWorkflowRunner)


def test_the_workflow_tests_run_inside_the_sandbox() -> None:
    """Whatever Settings a workflow test builds (tests/workflows/conftest.py)."""
    assert isinstance(workflow_runner(Settings()), SandboxedWorkflowRunner)


async def test_a_run_on_a_worker_without_the_sandbox_replays_inside_it(
    harness: LoopHarness,
) -> None:
    """What a worker does by default: the same workflow code runs, and its history
    replays inside the sandbox, as the replay tests do."""
    async with harness.worker(workflow_sandbox=False):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        history = await handle.fetch_history()
    assert state.status == RunStatus.COMPLETED and state.iteration >= 2
    replayer = Replayer(workflows=[LoopWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history)).replay_failure is None


async def test_a_workspace_that_cannot_be_prepared_fails_the_run_saying_why(
    harness: LoopHarness,
) -> None:
    """Preparing the workspace is a local activity, whose last failure reaches the
    workflow as the error the activity raised, not wrapped as an activity's: the run must
    still end as a failed run that says why (found with an origin git could not reach),
    not as a failed workflow whose status query says `running` forever. A branch the
    origin lacks fails the step at once (`tests/worker/test_origin_failures.py`)."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide", base_branch="no-such-branch")
        state = (await asyncio.wait_for(handle.result(), timeout=60)).state
        events = await harness.events(handle)

    assert state.status == RunStatus.FAILED
    assert "branch 'no-such-branch' does not exist" in state.stop.message
    assert names(events) == ["run_started", "failed"]
