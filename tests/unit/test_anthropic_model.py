"""AnthropicModel through the real SDK, over a real socket, against the local stand-in."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from temporalio.exceptions import ApplicationError

from activities.catalog import load_agents, load_templates
from activities.deps import INVALID_OUTPUT, StepDeps
from activities.llm.anthropic import ANSWER_TOOL, AnthropicModel, build_anthropic_client
from activities.llm.base import InvalidOutput, ModelCall, ask, render_context
from activities.llm.errors import MODEL_REQUEST_REJECTED, MODEL_UNAVAILABLE
from activities.workspace import GitWorkspaces
from schemas.roles import IterationPlan, Role
from schemas.run import TokenUsage
from schemas.settings import LLMProvider, Settings
from schemas.steps import ModelStep
from tests.fakes.messages_api import (
    FakeMessagesAPI,
    answer,
    error,
    refusal,
    text_only,
    truncated,
)
from worker.build import build_models

pytestmark = pytest.mark.unit

KEY = "test-key"
AGENTS = load_agents()
PLAN_CONTEXT: dict[str, Any] = {
    "task": "Write a guide",
    "intent": "A short guide",
    "acceptance_criteria": ["has a title"],
    "iteration": 1,
    "last_evaluation": None,
}


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as fake:
        yield fake
    assert not fake.failures, "the fake could not answer a request"


def settings_for(api: FakeMessagesAPI, **overrides: Any) -> Settings:
    values = {
        "LOOPS_LLM": "anthropic",
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": api.base_url,
    }
    return Settings(**{**values, **overrides})


@pytest.fixture
async def model(api: FakeMessagesAPI) -> AsyncIterator[AnthropicModel]:
    built = AnthropicModel(build_anthropic_client(settings_for(api)), max_tokens=1234)
    yield built
    await built.client.close()


def plan_call(**overrides: Any) -> ModelCall:
    values: dict[str, Any] = {
        "role": Role.PLANNER,
        "run_id": "run-1",
        "model": "claude-test-model",
        "system": AGENTS["planner"].prompt,
        "prompt": render_context(PLAN_CONTEXT),
        "context": PLAN_CONTEXT,
        "output_schema": IterationPlan.model_json_schema(),
    }
    return ModelCall(**{**values, **overrides})


async def test_structured_output_is_one_forced_tool_call(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    plan, _ = await ask(model, plan_call(), IterationPlan)

    assert plan == IterationPlan(
        focus="first complete draft", steps=["Draft every section of the plan"]
    )
    [request] = api.requests
    body = request.body
    assert request.path == "/v1/messages"
    assert body["model"] == "claude-test-model"
    assert body["max_tokens"] == 1234
    assert body["tools"] == [
        {
            "name": ANSWER_TOOL,
            "description": body["tools"][0]["description"],
            "input_schema": IterationPlan.model_json_schema(),
        }
    ]
    assert "planner" in body["tools"][0]["description"]
    assert body["tool_choice"] == {"type": "tool", "name": ANSWER_TOOL}
    # The agent's prompt is the system prompt, marked for prompt caching.
    assert body["system"] == [
        {"type": "text", "text": AGENTS["planner"].prompt, "cache_control": {"type": "ephemeral"}}
    ]
    [message] = body["messages"]
    assert message["role"] == "user"
    assert message["content"].startswith(render_context(PLAN_CONTEXT) + "\n\n```context\n")
    assert request.context == PLAN_CONTEXT
    assert request.role == Role.PLANNER
    assert request.api_key == KEY
    assert request.headers["x-stainless-retry-count"] == "0"


async def test_answer_text_is_the_tool_input(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.script(Role.PLANNER, answer({"focus": "fix has-title", "steps": ["Add a title"]}))
    reply = await model.answer(plan_call())
    assert reply.text == '{"focus": "fix has-title", "steps": ["Add a title"]}'


async def test_an_answer_that_misses_the_schema_is_invalid_output(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.script(Role.PLANNER, answer({"focus": "", "steps": []}))
    with pytest.raises(InvalidOutput, match="planner answered with invalid output: focus"):
        await ask(model, plan_call(), IterationPlan)


async def test_usage_includes_cache_reads_and_writes(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.script(
        Role.PLANNER,
        answer(
            usage={
                "input_tokens": 11,
                "output_tokens": 7,
                "cache_read_input_tokens": 500,
                "cache_creation_input_tokens": 30,
            }
        ),
        # Compatible servers may leave the cache fields out or send null.
        answer(usage={"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": None}),
    )
    _, first = await ask(model, plan_call(), IterationPlan)
    _, second = await ask(model, plan_call(), IterationPlan)

    assert first == TokenUsage(
        input_tokens=11,
        output_tokens=7,
        cache_read_input_tokens=500,
        cache_creation_input_tokens=30,
        calls=1,
    )
    assert second == TokenUsage(input_tokens=5, output_tokens=2, calls=1)


async def test_the_stable_system_prompt_is_written_once_then_read(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    _, first = await ask(model, plan_call(), IterationPlan)
    _, second = await ask(model, plan_call(), IterationPlan)
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0


@pytest.mark.parametrize(
    ("responder", "detail"),
    [
        (truncated({"focus": "fix the ti"}), "cut off at max_tokens=1234"),
        (answer({"focus": "x", "steps": ["y"]}, stop_reason="max_tokens"), "cut off"),
        (refusal(), "refused"),
        (text_only("I would rather write prose."), "it said: I would rather write prose."),
    ],
    ids=["truncated", "truncated-but-parsable", "refusal", "no-tool-call"],
)
async def test_unusable_answers_are_invalid_output(
    api: FakeMessagesAPI, model: AnthropicModel, responder: Any, detail: str
) -> None:
    api.script(Role.PLANNER, responder)
    with pytest.raises(InvalidOutput, match="planner answered with invalid output") as raised:
        await ask(model, plan_call(), IterationPlan)
    assert detail in raised.value.detail
    assert len(api.requests) == 1


async def test_sdk_retries_are_off_a_500_is_one_request(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.script(Role.PLANNER, error(500, "boom"), error(500, "boom"), error(500, "boom"))
    with pytest.raises(ApplicationError) as raised:
        await model.answer(plan_call())

    assert len(api.requests) == 1
    err = raised.value
    assert err.type == MODEL_UNAVAILABLE and not err.non_retryable
    assert isinstance(err.__cause__, anthropic.InternalServerError)


async def test_retry_after_reaches_the_application_error(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.script(Role.PLANNER, error(429, "slow down", headers={"retry-after": "12"}))
    with pytest.raises(ApplicationError) as raised:
        await model.answer(plan_call())
    assert len(api.requests) == 1
    assert raised.value.next_retry_delay is not None
    assert raised.value.next_retry_delay.total_seconds() == 12


# Over the wire: the SDK picks the exception class, `classify` the verdict.
WIRE_STATUSES = [
    (400, False),
    (401, False),
    (402, False),
    (403, False),
    (404, False),
    (408, True),
    (409, True),
    (413, False),
    (422, False),
    (429, True),
    (500, True),
    (502, True),
    (503, True),
    (529, True),
]


@pytest.mark.parametrize(
    ("status", "retried"), WIRE_STATUSES, ids=[str(s) for s, _ in WIRE_STATUSES]
)
async def test_http_statuses_over_the_wire(
    api: FakeMessagesAPI, model: AnthropicModel, status: int, retried: bool
) -> None:
    api.script(Role.PLANNER, error(status, "nope"))
    with pytest.raises(ApplicationError) as raised:
        await model.answer(plan_call())
    err = raised.value
    assert len(api.requests) == 1
    assert err.non_retryable is not retried
    assert err.type == (MODEL_UNAVAILABLE if retried else MODEL_REQUEST_REJECTED)
    assert f"HTTP {status}: nope" in err.message
    cause = err.__cause__
    assert isinstance(cause, anthropic.APIStatusError) and cause.status_code == status


async def test_a_wrong_key_fails_with_an_actionable_message(api: FakeMessagesAPI) -> None:
    model = AnthropicModel(build_anthropic_client(settings_for(api, ANTHROPIC_API_KEY="wrong")))
    try:
        with pytest.raises(ApplicationError) as raised:
            await model.answer(plan_call())
    finally:
        await model.client.close()
    assert raised.value.non_retryable
    assert raised.value.message.startswith("authentication failed: check ANTHROPIC_API_KEY")


async def test_an_unreachable_server_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}")
    model = AnthropicModel(build_anthropic_client(settings))
    try:
        with pytest.raises(ApplicationError) as raised:
            await model.answer(plan_call())
    finally:
        await model.client.close()
    assert not raised.value.non_retryable
    assert raised.value.message.startswith(
        f"cannot reach the model server at http://127.0.0.1:{port}"
    )


async def test_a_slow_server_times_out_once_and_is_retryable(api: FakeMessagesAPI) -> None:
    api.script(Role.PLANNER, answer(delay_s=3))
    settings = settings_for(api, LOOPS_ANTHROPIC_TIMEOUT_S=0.5)
    model = AnthropicModel(build_anthropic_client(settings))
    try:
        with pytest.raises(ApplicationError) as raised:
            await model.answer(plan_call())
    finally:
        await model.client.close()
    assert len(api.requests) == 1
    assert not raised.value.non_retryable
    assert raised.value.message.endswith("timed out")


async def test_cancelling_a_long_call_ends_it_at_once(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    """A stop cancels the activity; the cancellation must not turn into a retryable error."""
    api.script(Role.PLANNER, answer(delay_s=30))
    task = asyncio.create_task(model.answer(plan_call()))
    while not api.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)


async def test_the_fake_reports_a_request_it_cannot_answer(model: AnthropicModel) -> None:
    with FakeMessagesAPI(api_key=KEY) as fake:
        model.client = model.client.with_options(base_url=fake.base_url)
        with pytest.raises(ApplicationError, match="the system prompt matches no agent"):
            await model.answer(plan_call(system="You are nobody in particular."))
    [failure] = fake.failures
    assert isinstance(failure, LookupError)


# --- the path around the model -----------------------------------------------------------


class Raising:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def answer(self, call: ModelCall) -> Any:
        raise self.exc


def deps_with(model: Any, tmp_path: Path) -> StepDeps:
    return StepDeps(
        settings=Settings(),
        model=model,
        agents=AGENTS,
        templates=load_templates(),
        workspaces=GitWorkspaces(tmp_path, author_name="t", author_email="t@localhost"),
    )


async def test_consult_passes_provider_errors_through_unchanged(tmp_path: Path) -> None:
    rejected = ApplicationError(
        "authentication failed", type=MODEL_REQUEST_REJECTED, non_retryable=True
    )
    deps = deps_with(Raising(rejected), tmp_path)
    with pytest.raises(ApplicationError) as raised:
        await deps.consult(Role.PLANNER, ModelStep(run_id="r"), PLAN_CONTEXT, IterationPlan)
    assert raised.value is rejected


async def test_consult_turns_a_truncated_answer_into_non_retryable_invalid_output(
    api: FakeMessagesAPI, model: AnthropicModel, tmp_path: Path
) -> None:
    api.script(Role.PLANNER, truncated({"focus": "half"}))
    deps = deps_with(model, tmp_path)
    with pytest.raises(ApplicationError) as raised:
        await deps.consult(Role.PLANNER, ModelStep(run_id="r"), PLAN_CONTEXT, IterationPlan)
    assert raised.value.type == INVALID_OUTPUT and raised.value.non_retryable
    assert "cut off at max_tokens" in raised.value.message


# --- settings and wiring -----------------------------------------------------------------


async def test_build_model_wires_the_anthropic_provider(api: FakeMessagesAPI) -> None:
    settings = settings_for(api, LOOPS_ANTHROPIC_MAX_TOKENS=2048, LOOPS_ANTHROPIC_TIMEOUT_S=42)
    built = build_models(settings)
    assert isinstance(built, AnthropicModel)
    try:
        assert built.max_tokens == 2048
        assert built.client.max_retries == 0
        assert str(built.client.base_url).rstrip("/") == api.base_url
        timeout = built.client.timeout
        assert isinstance(timeout, anthropic.Timeout) and timeout.read == 42
        plan, _ = await ask(built, plan_call(), IterationPlan)
        assert plan.focus
    finally:
        await built.client.close()


def test_a_key_selects_the_anthropic_provider() -> None:
    assert Settings(ANTHROPIC_API_KEY="k").llm == LLMProvider.ANTHROPIC
    assert Settings(ANTHROPIC_API_KEY="k", LOOPS_LLM="offline").llm == LLMProvider.OFFLINE


def test_anthropic_without_any_key_fails_at_worker_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Nothing for the SDK's own lookup to find: no key or token, no profile, no federation.
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "ANTHROPIC_FEDERATION_RULE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ValueError, match="LOOPS_LLM=anthropic needs a key: set ANTHROPIC_API_KEY"):
        build_models(Settings(LOOPS_LLM="anthropic"))
