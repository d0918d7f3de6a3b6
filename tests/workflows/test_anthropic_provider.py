"""Whole runs with LOOPS_LLM=anthropic: pydantic-ai and the real SDK, over a socket, to the
local stand-in.

The worker is built from settings the way the entry point builds it (`build_models`), so
these runs cover the client, the forced-tool answers and their repair, the agent's turns,
the error classification and the workflow's handling of each, with Temporal doing every
retry of a failed request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from loopworks.agent.loop import READ_ONLY_TOOLS
from loopworks.agent.tools import TOOLS
from loopworks.agent.trajectory import from_jsonl
from loopworks.llm.anthropic import AnthropicModels
from loopworks.prompts.catalog import load_agents
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_models, build_worker
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.policies import MODEL_CALL
from tests.fakes.messages_api import (
    FakeMessagesAPI,
    RecordedRequest,
    answer,
    error,
    result_text,
    truncated,
)
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_loop import remote_file

pytestmark = pytest.mark.workflow

KEY = "test-key"
AGENTS = load_agents()
HALF_A_PLAN = {"focus": "fix the ti"}
# Roles that work in the workspace with tools instead of answering one forced tool.
AGENT_ROLES = {Role.PRODUCER, Role.REFINER, Role.SKILL_GENERATOR}


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as fake:
        yield fake
    assert not fake.failures, "the fake could not answer a request"


def anthropic_settings(harness: LoopHarness, api: FakeMessagesAPI, **overrides: Any) -> Settings:
    values = {
        "LOOPS_DATA_DIR": harness.data_dir,
        "LOOPS_TASK_QUEUE": harness.task_queue,
        "LOOPS_LLM": "anthropic",
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": api.base_url,
    }
    return Settings(**{**values, **overrides})


@asynccontextmanager
async def anthropic_worker(
    harness: LoopHarness, api: FakeMessagesAPI, **overrides: Any
) -> AsyncIterator[Settings]:
    settings = anthropic_settings(harness, api, **overrides)
    model = build_models(settings)
    assert isinstance(model, AnthropicModels)
    try:
        async with build_worker(harness.env.client, settings, models=model):
            yield settings
    finally:
        await model.provider.client.close()


def cached(block: dict[str, Any]) -> bool:
    control = block.get("cache_control")
    return isinstance(control, dict) and control.get("type") == "ephemeral"


def reported(requests: list[RecordedRequest], field: str) -> int:
    """What the fake's replies to `requests` reported for a usage field."""
    return sum((r.reply_usage or {}).get(field) or 0 for r in requests)


async def attempts(handle: WorkflowHandle[Any, Any], activity: str) -> list[dict[str, Any]]:
    """Per scheduled `activity`: the attempt that ran last and how long (in the server's
    time) it waited from scheduling to that attempt's start. (The time-skipping server
    leaves `last_failure` empty, so the failures are checked at the fake instead.)"""
    history = await handle.fetch_history()
    scheduled = {
        e.event_id: e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    }
    found = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            continue
        started = event.activity_task_started_event_attributes
        if started.scheduled_event_id not in scheduled:
            continue
        waited = (
            event.event_time.ToDatetime()
            - scheduled[started.scheduled_event_id].event_time.ToDatetime()
        )
        found.append({"attempt": started.attempt, "waited": waited.total_seconds()})
    return found


async def test_a_whole_run_through_the_sdk(harness: LoopHarness, api: FakeMessagesAPI) -> None:
    async with anthropic_worker(harness, api) as settings:
        # The curator's marker starts the skill sub-loop: every role but the task planner
        # (task graphs only) goes through the SDK.
        handle = await harness.start(
            task="Write a testing guide [skill:count_words]", audit_probability=1.0, playbook=True
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED
    assert state.stop_reason == StopReason.THRESHOLD_REACHED
    assert names(events)[-1] == "pushed"
    # Every role of a loop answered through the API, each with its tier's model and agent
    # prompt (the task planner plans a task graph, before any loop).
    assert {r.role for r in api.requests} == set(Role) - {Role.TASK_PLANNER}
    for request in api.requests:
        assert request.role is not None
        agent = AGENTS[request.role.value]
        body = request.body
        assert body["model"] == settings.model_for(agent.model)
        assert request.system_text == agent.prompt
        if request.role in AGENT_ROLES:
            # An agent's turn: the workspace tools offered, none forced.
            assert body["tool_choice"] == {"type": "auto"}
            assert {t["name"] for t in body["tools"]} == set(TOOLS)
        elif request.role == Role.QA_VERIFIER:
            # A verifier: the tools that read and the command tool, then the answer tool,
            # one of them forced on every turn.
            assert body["tool_choice"] == {"type": "any"}
            assert [t["name"] for t in body["tools"]] == [*READ_ONLY_TOOLS, "answer"]
        else:
            # The one answer tool, forced.
            assert body["tool_choice"] == {"type": "any"}
            assert [t["name"] for t in body["tools"]] == ["answer"]
        # Prompt-cache breakpoints: the system prompt, the tools, the last message.
        assert cached(body["system"][-1]) and cached(body["tools"][-1])
        assert cached(body["messages"][-1]["content"][-1])
    assert {r.body["model"] for r in api.requests} == {
        settings.model_haiku,
        settings.model_sonnet,
        settings.model_opus,
    }
    # Usage is summed in the status: one call per request, cache writes then reads, as
    # the server reported them.
    usage = state.usage
    assert usage.calls == len(api.requests)
    assert usage.input_tokens > 0
    assert usage.output_tokens == reported(api.requests, "output_tokens")
    assert usage.cache_creation_input_tokens == reported(
        api.requests, "cache_creation_input_tokens"
    )
    assert usage.cache_read_input_tokens == reported(api.requests, "cache_read_input_tokens")
    assert usage.cache_creation_input_tokens > 0 and usage.cache_read_input_tokens > 0
    assert usage.cost_usd > 0

    # The producer wrote the artifact through tools: its second turn carried the results
    # of its write_file calls, and the branch holds the trajectory of that turn.
    produced = api.requests_for(Role.PRODUCER)[:2]  # iteration 1's two turns
    assert [len(r.tool_results) for r in produced] == [0, 1]
    [result] = produced[1].tool_results
    assert result["is_error"] is False and "artifact.md" in result_text(result)
    records = from_jsonl(
        remote_file(harness.origin, state.branch, ".loops/trajectory/01-produce.jsonl")
    )
    assert {(r.step, r.iteration, r.run_id) for r in records} == {("produce", 1, handle.id)}
    calls = [r for r in records if r.kind == "tool_call"]
    results = [r for r in records if r.kind == "tool_result"]
    assert [(c.tool, c.input["path"]) for c in calls] == [("write_file", "artifact.md")]
    assert [(r.tool, r.ok, r.tool_use_id) for r in results] == [
        ("write_file", True, calls[0].tool_use_id)
    ]
    assert records[-1].kind == "assistant" and records[-1].stop_reason == "stop"


async def test_rate_limit_is_retried_by_temporal_after_retry_after(
    harness: LoopHarness, api: FakeMessagesAPI
) -> None:
    # Longer than the policy's first backoff (1s): the server's wait must win.
    api.script(Role.PLANNER, error(429, "slow down", headers={"retry-after": "20"}))
    async with anthropic_worker(harness, api):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        planning = await attempts(handle, "plan_iteration")

    assert state.status == RunStatus.COMPLETED
    first = planning[0]
    assert first["attempt"] == 2
    assert first["waited"] >= 20
    # Exactly one HTTP request per Temporal attempt: the SDK itself never retried.
    assert len(api.requests_for(Role.PLANNER)) == sum(p["attempt"] for p in planning)
    assert all(r.headers["x-stainless-retry-count"] == "0" for r in api.requests)


async def test_overloaded_is_retried_with_the_policys_backoff(
    harness: LoopHarness, api: FakeMessagesAPI
) -> None:
    api.script(Role.HYDRATOR, error(529, "Overloaded"), error(529, "Overloaded"))
    async with anthropic_worker(harness, api):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        hydrating = await attempts(handle, "hydrate")

    assert state.status == RunStatus.COMPLETED
    assert [h["attempt"] for h in hydrating] == [3]
    # No retry-after: the policy's backoff (1s, then 2s) spaced the attempts.
    initial = MODEL_CALL.retry.initial_interval.total_seconds()
    assert hydrating[0]["waited"] >= initial * (1 + MODEL_CALL.retry.backoff_coefficient)
    assert len(api.requests_for(Role.HYDRATOR)) == 3


async def test_a_bad_key_fails_the_run_fast_with_an_actionable_message(
    harness: LoopHarness, api: FakeMessagesAPI
) -> None:
    started = time.monotonic()
    async with anthropic_worker(harness, api, ANTHROPIC_API_KEY="sk-wrong"):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)
        hydrating = await attempts(handle, "hydrate")
    elapsed = time.monotonic() - started

    assert state.status == RunStatus.FAILED
    assert state.stop.message.startswith("authentication failed: check ANTHROPIC_API_KEY")
    failed = next(e for e in events if e.event.value == "failed")
    assert failed.payload.error.startswith("authentication failed: check ANTHROPIC_API_KEY")
    # Not retried: one attempt, one request; the failed run still pushed its branch.
    assert [h["attempt"] for h in hydrating] == [1]
    assert len(api.requests_for(Role.HYDRATOR)) == 1
    assert names(events)[-1] == "pushed"
    # Six attempts would wait 31s of backoff (skipped in time, but each is a round trip).
    assert elapsed < 5


async def test_a_truncated_answer_twice_is_a_phase_error(
    harness: LoopHarness, api: FakeMessagesAPI
) -> None:
    api.script(Role.PLANNER, truncated(HALF_A_PLAN), truncated(HALF_A_PLAN))
    async with anthropic_worker(harness, api):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)
        planning = await attempts(handle, "plan_iteration")

    assert state.status == RunStatus.FAILED
    assert state.stop_reason == StopReason.PHASE_ERROR
    [error_event] = [e for e in events if e.event.value == "phase_error"]
    assert error_event.payload.step == "PLAN"
    assert "attempt" not in error_event.payload
    assert "planner answered with invalid output" in error_event.payload.error
    assert "steps" in error_event.payload.error  # what the cut-off answer lacked
    assert "output_repaired" not in names(events)
    # The repair was the one retry: one activity attempt, two requests (the second carried
    # the first answer's errors); Temporal does not retry invalid output.
    assert [p["attempt"] for p in planning] == [1]
    first, second = api.requests_for(Role.PLANNER)
    assert first.tool_results == []
    [result] = second.tool_results
    assert result["is_error"] is True and "steps" in result_text(result)
    assert names(events)[-1] == "pushed"


async def test_a_truncated_answer_once_recovers(harness: LoopHarness, api: FakeMessagesAPI) -> None:
    api.script(Role.PLANNER, truncated(HALF_A_PLAN))
    async with anthropic_worker(harness, api):
        handle = await harness.start(task="Write a guide")
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED
    assert "phase_error" not in names(events)
    [repaired] = [e for e in events if e.event.value == "output_repaired"]
    assert repaired.step == "PLAN"
    [feedback] = repaired.payload.repairs
    assert "steps" in feedback and "Field required" in feedback
    # Both requests of the repaired call are counted.
    assert state.usage.calls == len(api.requests)


async def test_stop_during_a_long_model_call_ends_the_run_within_seconds(
    harness: LoopHarness, api: FakeMessagesAPI
) -> None:
    api.script(Role.PRODUCER, answer(delay_s=120))
    async with anthropic_worker(harness, api):
        handle = await harness.start(task="Write a guide")
        while not api.requests_for(Role.PRODUCER):
            await asyncio.sleep(0.05)
        stopped_at = time.monotonic()
        await handle.signal(LoopWorkflow.stop, "enough")
        state = (await asyncio.wait_for(handle.result(), timeout=30)).state
        elapsed = time.monotonic() - stopped_at

    assert state.status == RunStatus.STOPPED
    assert state.stop_reason == StopReason.USER_STOP
    # The cancellation reaches the activity with a heartbeat, which the worker sends at
    # most every 80% of the heartbeat timeout; the HTTP call then ends at once.
    assert MODEL_CALL.heartbeat is not None
    assert elapsed < MODEL_CALL.heartbeat.total_seconds() + 5
