"""One trajectory, every interaction: each model call of each role of a run is in it,
tagged with its step, role, loop type and trajectory id; a skill session has an id of its
own linked to the run; single-shot calls are capped and redacted as the agents' are."""

from __future__ import annotations

from typing import Any

import pytest

from loopworks.agent.trajectory import (
    RECORD_TEXT_CAP,
    SKILL_ROLES,
    TrajectoryRecord,
    from_jsonl,
)
from loopworks.api.trajectory import run_trajectory
from loopworks.checks.redaction import REDACTED
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunState, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from loopworks.workspace.git import GitWorkspaces
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import git_show

pytestmark = pytest.mark.workflow

# A described rule without a check: the preparer writes it one (a judge: the evaluator).
CLEAR_RULE = {"id": "clear", "description": "Clear", "severity": "warn", "check": "Is it clear?"}
# Missing from the first draft, added by the refiner: iteration 1 fails and is critiqued.
TESTS_RULE = {
    "id": "has-tests",
    "description": "The artifact has a Tests section",
    "severity": "fail",
    "check": {"kind": "pattern", "pattern": "^## Tests", "example": "## Tests\n\nRun pytest."},
}
KEY = "sk-ant-api03-fake-" + "5" * 40


def trajectory_of(harness: LoopHarness, state: RunState) -> list[TrajectoryRecord]:
    reader = GitWorkspaces(harness.data_dir / "reader", "t", "t@t")
    return from_jsonl(run_trajectory(reader, state))


async def test_every_role_of_a_run_is_in_its_one_trajectory(
    harness: LoopHarness, repo: Any
) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Document how to run the test suite [skill:count_words]",
            repo=str(repo),
            rules=[CLEAR_RULE, TESTS_RULE],
            audit_probability=1.0,
            playbook=True,
        )
        state = (await handle.result()).state
    assert state.status == RunStatus.COMPLETED
    records = trajectory_of(harness, state)

    # Every role a run has (the task planner is a graph's), each with its step's name.
    assert {r.role for r in records} == set(Role) - {Role.TASK_PLANNER}
    steps = {(r.role, r.step) for r in records}
    assert {(Role.HYDRATOR, "hydrate"), (Role.CRITIC, "review"), (Role.PLANNER, "plan")} <= steps
    assert {(Role.EVALUATOR, "evaluate"), (Role.ARTIFACT_CRITIC, "critique")} <= steps
    assert {(Role.CUSTODIET, "audit"), (Role.REFLECTOR, "reflect")} <= steps
    assert {(Role.PRODUCER, "produce"), (Role.QA_VERIFIER, "qa")} <= steps
    # A single-shot call: its instructions, the step's inputs, and the answer it gave.
    hydration = [r for r in records if r.role == Role.HYDRATOR]
    assert [r.kind for r in hydration][:3] == ["system", "user", "assistant"]
    answer = next(r for r in hydration if r.kind == "tool_call")
    assert answer.tool == "answer" and "acceptance_criteria" in answer.input
    assert "Document how to run the test suite" in (hydration[1].input or "")
    # Each answer names its model and the tokens it took: the dashboard prices each call.
    answers = [r for r in records if r.kind == "assistant"]
    assert all(r.model and r.usage is not None and r.usage.output_tokens > 0 for r in answers)
    assert sum(r.usage.total_tokens for r in answers if r.usage) == state.usage.total_tokens

    # The task loop's lines are the run's trajectory; the skill session's its own, linked.
    run_id = state.run_id
    task = {
        (r.loop_type, r.trajectory_id, r.parent_trajectory_id)
        for r in records
        if r.role not in SKILL_ROLES
    }
    assert task == {("task", run_id, None)}
    skill = [r for r in records if r.loop_type == "skill"]
    assert {r.role for r in skill} == {
        Role.SKILL_GENERATOR,
        Role.SKILL_REFLECTOR,
        Role.SKILL_CURATOR,
    }
    session = f"{run_id}:skill:{state.iteration}"
    assert {(r.trajectory_id, r.parent_trajectory_id) for r in skill} == {(session, run_id)}
    assert all(r.run_id == run_id for r in records)

    # In the order the calls finished: hydration first, reflection after the last QA.
    systems = [r.role for r in records if r.kind == "system"]
    assert systems[:2] == [Role.HYDRATOR, Role.CRITIC]
    assert systems.index(Role.REFLECTOR) > systems.index(Role.QA_VERIFIER)


async def test_a_single_shot_calls_prompt_is_redacted_and_capped(harness: LoopHarness) -> None:
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_LLM="offline",
        ANTHROPIC_API_KEY=KEY,
    )
    # The worker's own key pasted into the task, and a task far past a record's cap.
    task = f"Write a guide. Use the key {KEY} to call the API. " + "Be thorough. " * 600
    async with build_worker(harness.env.client, settings):
        handle = await harness.start(task=task, rules=[TESTS_RULE])
        state = (await handle.result()).state
    records = trajectory_of(harness, state)

    (prompt,) = [r for r in records if r.role == Role.HYDRATOR and r.kind == "user"]
    assert f"Use the key {REDACTED} to call the API" in prompt.input
    assert len(prompt.input) < RECORD_TEXT_CAP + 100 and "more characters]" in prompt.input
    # Nowhere in any trajectory file, the agents' or the single-shot calls' (those on
    # the run's branch since its close, which left none on a ref of its own).
    reader = GitWorkspaces(harness.data_dir / "reader", "t", "t@t")
    assert reader.call_records(str(harness.origin), state.run_id) == {}
    for name in ("00-hydrate-001", "01-plan-001"):
        call = git_show(harness, f"loops/{state.run_id}", f".loops/trajectory/{name}.jsonl")
        assert call and KEY not in call
    text = run_trajectory(reader, state)
    assert f"Use the key {REDACTED}" in text and KEY not in text
    # Nor in the run's record on its branch: the state's task and every event.
    for path in (".loops/run.json", ".loops/history.jsonl"):
        record = git_show(harness, f"loops/{state.run_id}", path)
        assert f"Use the key {REDACTED}" in record and KEY not in record, path


async def test_a_call_that_fails_its_step_is_recorded_with_its_repair(
    harness: LoopHarness,
) -> None:
    # Both the planner's answer and its repair are invalid: the step fails, the run too.
    script = {"planner": {"1": "not json at all"}}
    async with harness.worker(script):
        handle = await harness.start(task="Write a guide", rules=[TESTS_RULE])
        state = (await handle.result()).state
    assert state.status == RunStatus.FAILED

    # What was sent and answered, twice, in the run's trajectory: the instructions, the
    # inputs, the answer, what was wrong with it, and the repair that was no better.
    records = trajectory_of(harness, state)
    plan = [r for r in records if r.role == Role.PLANNER]
    kinds = [r.kind for r in plan]
    assert kinds == [
        "system",
        "user",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
        "tool_call",
    ]
    answers = [r.input for r in plan if r.kind == "tool_call"]
    assert answers == [{"INVALID_JSON": "not json at all"}] * 2
    assert {(r.step, r.iteration, r.trajectory_id) for r in plan} == {("plan", 1, state.run_id)}
