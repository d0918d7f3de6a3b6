"""A run's budget holds (docs/loop.md#budgets): whole runs on the time-skipping server with
real git and a model that would spend far more than the budget in one step. The run
records no more than its budget, every request the model answered counted; the step the
budget ends stops the run `budget_exhausted` with its work kept."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from loopworks.llm.offline.model import OfflineScript
from loopworks.schemas.events import EventName
from loopworks.schemas.roles import Role
from loopworks.schemas.run import Allowance, RunStatus, Step, StopReason
from loopworks.schemas.steps import ARTIFACT_PATH
from tests.fakes.spending import SpendingModels
from tests.workflows.conftest import LoopHarness, names

pytestmark = pytest.mark.workflow

# Enough for hydration, the critic and the plan, and for PRODUCE's first turn beside
# PREPARE; the producer's second turn would answer with a million tokens.
TOKENS = 60_000
DOLLARS = 0.30
# A rule whose check is a sentence: PREPARE asks its model in the first iteration.
DESCRIBED = {
    "id": "titled",
    "description": "The guide has a title",
    "check": "the artifact begins with a level-one heading",
}


def recorded(models: SpendingModels) -> int:
    """Every token the model answered with and was sent, as it reported them."""
    return sum(spent.input_tokens + spent.output_tokens for spent in models.requests)


def on_branch(harness: LoopHarness, branch: str, path: str) -> str:
    shown = subprocess.run(
        ["git", "--git-dir", str(harness.origin), "show", f"{branch}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return shown.stdout


async def scheduled_inputs(handle: Any, activity: str) -> list[dict[str, Any]]:
    """The inputs the run scheduled `activity` with, in order."""
    inputs = []
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name == activity:
            inputs.append(json.loads(attrs.input.payloads[0].data))
    return inputs


@pytest.mark.parametrize(
    "budget", [{"max_tokens": TOKENS}, {"max_cost_usd": DOLLARS}], ids=["tokens", "dollars"]
)
async def test_an_agent_step_that_would_spend_far_more_stops_at_the_budget_with_its_work(
    harness: LoopHarness, budget: dict[str, Any]
) -> None:
    # The producer's first turn writes its draft; its second would take a million tokens.
    models = SpendingModels(wants={Role.PRODUCER: [100, 1_000_000]})
    async with harness.worker(models=models):
        handle = await harness.start(task="Write a guide", budget=budget, rules=[DESCRIBED])
        state = (await handle.result()).state
        events = await harness.events(handle)
        produced = await scheduled_inputs(handle, "produce_artifact")
        prepared = await scheduled_inputs(handle, "prepare_checks")

    assert (state.status, state.stop_reason) == (RunStatus.STOPPED, StopReason.BUDGET_EXHAUSTED)
    assert "budget is spent" in state.stop.message
    # Never more than the budget, and every request the model answered is counted.
    assert state.usage.total_tokens == recorded(models)
    if "max_tokens" in budget:
        assert state.usage.total_tokens <= TOKENS
    else:
        assert 0 < state.usage.cost_usd <= DOLLARS
    # The step would have spent far more: its second request was cut at what was left.
    _, second = models.for_role(Role.PRODUCER)
    assert second.wanted == 1_000_000
    assert second.max_tokens is not None and second.output_tokens == second.max_tokens
    # PRODUCE and PREPARE ran side by side on halves of what was left (docs/loop.md#budgets):
    # together they could not spend more than it.
    [produce], [prepare] = produced, prepared
    given = [Allowance.model_validate(step["allowance"]) for step in (produce, prepare)]
    planned = sum(s.input_tokens + s.output_tokens for s in models.requests[:3])
    if "max_tokens" in budget:
        halves = [allowance.max_tokens or 0 for allowance in given]
        assert abs(halves[0] - halves[1]) <= 1 and sum(halves) == TOKENS - planned
    else:
        halves_usd = [allowance.max_cost_usd or 0.0 for allowance in given]
        assert abs(halves_usd[0] - halves_usd[1]) < 2e-6 and sum(halves_usd) < DOLLARS
    # The work so far is the run's: committed, its artifact on the pushed branch; what
    # PREPARE did not spend came back for the reflection.
    flow = names(events)
    assert flow[-4:] == ["artifact_created", "stopped", "reflection_done", "pushed"]
    assert on_branch(harness, state.branch, ARTIFACT_PATH)
    trajectory = on_branch(harness, state.branch, ".loops/trajectory/01-produce.jsonl")
    assert "budget is spent" in trajectory.splitlines()[-1]


async def test_a_single_shot_step_that_would_spend_far_more_is_cut_and_counted(
    harness: LoopHarness,
) -> None:
    models = SpendingModels(wants={Role.HYDRATOR: 1_000_000, Role.REFLECTOR: 1_000_000})
    async with harness.worker(models=models):
        handle = await harness.start(task="Write a guide", budget={"max_tokens": 30_000})
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert (state.status, state.stop_reason) == (RunStatus.STOPPED, StopReason.BUDGET_EXHAUSTED)
    [hydrate] = models.for_role(Role.HYDRATOR)
    assert hydrate.max_tokens is not None and hydrate.output_tokens == hydrate.max_tokens
    # The cut answer was paid for: the run counts it, and no more than its budget.
    assert 0 < state.usage.total_tokens == recorded(models) <= 30_000
    # Reflection gets what is left, and is refused or cut too; the run still pushes.
    flow = names(events)
    assert flow[-3:] == ["stopped", "failed", "pushed"]
    assert events[-2].payload.step == Step.REFLECT.value  # type: ignore[union-attr]
    assert "budget is spent" in events[-2].payload.error  # type: ignore[union-attr]


async def test_a_run_without_a_budget_is_not_capped(harness: LoopHarness) -> None:
    models = SpendingModels(max_tokens=4096)
    async with harness.worker(models=models):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        produced = await scheduled_inputs(handle, "produce_artifact")

    assert state.status == RunStatus.COMPLETED
    assert {spent.max_tokens for spent in models.requests} == {4096}  # the model's own cap
    assert produced[0]["allowance"] is None
    assert state.usage.total_tokens == recorded(models)


async def test_a_skill_sub_loop_out_of_budget_keeps_nothing_unreviewed_and_counts_its_cost(
    harness: LoopHarness, repo: Path
) -> None:
    # The run and its sub-loop's generator fit; the skill reflector would not stop talking.
    models = SpendingModels(wants={Role.SKILL_REFLECTOR: 1_000_000})
    async with harness.worker(models=models):
        handle = await harness.start(
            task="Document how to run the test suite [skill:count_words]",
            repo=str(repo),
            playbook=True,
            budget={"max_tokens": 200_000},
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED  # its loop ended before the budget did
    [done] = [event for event in events if event.event == EventName.SKILL_LOOP_DONE]
    helper = ".loops/skills/count_words.py"
    assert done.payload.error is None and done.payload.accepted == []  # type: ignore[union-attr]
    assert done.payload.rejected == {  # type: ignore[union-attr]
        helper: "not reviewed: the run's budget is spent"
    }
    [review] = models.for_role(Role.SKILL_REFLECTOR)
    assert review.max_tokens is not None and review.output_tokens == review.max_tokens
    # The generator's and the cut review's tokens are the run's, within its budget.
    assert models.for_role(Role.SKILL_GENERATOR)
    assert state.usage.total_tokens == recorded(models) <= 200_000
    listed = ["git", "ls-tree", "-r", "--name-only", state.branch]
    files = subprocess.run(listed, cwd=repo, capture_output=True, text=True, check=True)
    assert helper not in files.stdout.split()


# The producer answers in text and never writes artifact.md: reminded once, it answers in
# text again, and the step ends as invalid output (docs/loop.md#invalid-answers).
NO_ARTIFACT = OfflineScript.model_validate({"producer": {"*": "I am done."}})


async def test_a_step_that_ends_in_invalid_output_counts_what_it_spent(
    harness: LoopHarness,
) -> None:
    """The step's requests were billed, but its failure carried no usage: the run, and so
    its graph's total and its client's day, counted none of them."""
    models = SpendingModels(wants={Role.PRODUCER: 10_000}, script=NO_ARTIFACT)
    async with harness.worker(models=models):
        handle = await harness.start(task="Write a guide", budget={"max_tokens": 100_000})
        state = (await handle.result()).state

    assert (state.status, state.stop_reason) == (RunStatus.FAILED, StopReason.PHASE_ERROR)
    producer = sum(s.input_tokens + s.output_tokens for s in models.for_role(Role.PRODUCER))
    assert producer > 20_000  # both of the producer's requests were answered, and billed
    assert state.usage.total_tokens == recorded(models)


async def test_a_skill_sub_loop_that_fails_counts_what_it_spent(
    harness: LoopHarness, repo: Path
) -> None:
    """The sub-loop is a child workflow: one that failed (its skill reflector answered
    invalidly twice) reported nothing of what its calls were billed."""
    script = OfflineScript.model_validate({"skill-reflector": {"*": "I would rather not."}})
    models = SpendingModels(script=script)
    async with harness.worker(models=models):
        handle = await harness.start(
            task="Document how to run the test suite [skill:count_words]",
            repo=str(repo),
            playbook=True,
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    [done] = [event for event in events if event.event == EventName.SKILL_LOOP_DONE]
    assert done.payload.error is not None  # type: ignore[union-attr]
    assert len(models.for_role(Role.SKILL_REFLECTOR)) == 2
    assert models.for_role(Role.SKILL_GENERATOR)
    assert state.usage.total_tokens == recorded(models)
