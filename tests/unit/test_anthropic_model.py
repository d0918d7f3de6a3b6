"""The anthropic model source through pydantic-ai and the real SDK, over a real socket,
against the local stand-in: structured answers (`ask`), their repair, the agent loop's
turns (`run_agent`), errors, and the client's settings."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.exceptions import ApplicationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.agent.loop import NUDGE, run_agent
from loopworks.agent.tools import TOOLS
from loopworks.llm.anthropic import AnthropicModels, build_anthropic_client
from loopworks.llm.base import InvalidOutput, ModelCall, render_context, user_prompt
from loopworks.llm.errors import MODEL_REQUEST_REJECTED, MODEL_UNAVAILABLE
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.llm.pricing import cost_usd
from loopworks.llm.structured import ask
from loopworks.prompts.catalog import load_agents, load_templates
from loopworks.schemas.contexts import PlannerContext
from loopworks.schemas.roles import IterationPlan, Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.settings import LLMProvider, Settings
from loopworks.schemas.steps import ARTIFACT_PATH, INVALID_OUTPUT, ModelStep
from loopworks.worker.build import build_models
from loopworks.workspace.git import GitWorkspaces
from tests.fakes.messages_api import (
    FakeMessagesAPI,
    RecordedRequest,
    answer,
    error,
    refusal,
    result_text,
    text_only,
    tool_calls,
    truncated,
)

pytestmark = pytest.mark.unit

KEY = "test-key"
AGENTS = load_agents()
PLANNER = AGENTS["planner"].prompt
PRODUCER = AGENTS["producer"].prompt
PLAN_CONTEXT: dict[str, Any] = {
    "task": "Write a guide",
    "intent": "A short guide",
    "acceptance_criteria": ["has a title"],
    "iteration": 1,
    "last_evaluation": None,
}
PRODUCE_CONTEXT: dict[str, Any] = {
    "task": "Write a testing guide",
    "intent": "A guide to testing",
    "acceptance_criteria": ["has a title"],
    "rules": [],
    "plan": {"focus": "first draft", "steps": ["Draft it"]},
    "current_artifact": None,
    "blocked_attempt": None,
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
async def models(api: FakeMessagesAPI) -> AsyncIterator[AnthropicModels]:
    built = AnthropicModels(build_anthropic_client(settings_for(api)), max_tokens=1234)
    yield built
    await built.provider.client.close()


def plan_call(**overrides: Any) -> ModelCall:
    values: dict[str, Any] = {
        "role": Role.PLANNER,
        "run_id": "run-1",
        "model": "claude-test-model",
        "context": PLAN_CONTEXT,
    }
    return ModelCall(**{**values, **overrides})


def produce_call(**overrides: Any) -> ModelCall:
    values: dict[str, Any] = {
        "role": Role.PRODUCER,
        "run_id": "run-1",
        "model": "claude-test-model",
        "context": PRODUCE_CONTEXT,
    }
    return ModelCall(**{**values, **overrides})


async def plan(models: AnthropicModels, **overrides: Any) -> Any:
    return await ask(models, plan_call(), PLANNER, IterationPlan, **overrides)


def cached(block: dict[str, Any]) -> bool:
    """Whether a block is a prompt-cache breakpoint (any TTL)."""
    control = block.get("cache_control")
    return isinstance(control, dict) and control.get("type") == "ephemeral"


def last_block(request: RecordedRequest) -> dict[str, Any]:
    content = request.body["messages"][-1]["content"]
    assert isinstance(content, list)
    block: dict[str, Any] = content[-1]
    return block


# --- structured answers: one forced tool ------------------------------------------------


async def test_structured_output_is_one_forced_tool_call(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    answered = await plan(models)

    assert answered.answer == IterationPlan(
        focus="first complete draft", steps=["Draft every section of the plan"]
    )
    assert answered.repairs == []
    [request] = api.requests
    body = request.body
    assert request.path == "/v1/messages"
    assert body["model"] == "claude-test-model"
    assert body["max_tokens"] == 1234
    [tool] = body["tools"]
    assert tool["name"] == ANSWER_TOOL
    assert "planner" in tool["description"]
    schema = tool["input_schema"]
    assert set(schema["properties"]) == set(IterationPlan.model_fields)
    assert sorted(schema["required"]) == ["focus", "steps"]
    # Strict tool input is asked for until the server refuses it.
    assert tool["strict"] is True
    # pydantic-ai forces the only tool with `any`.
    assert body["tool_choice"] == {"type": "any"}
    # The agent's prompt is the whole system prompt; it, the tools and the last message are
    # prompt-cache breakpoints.
    [system] = body["system"]
    assert (system["type"], system["text"]) == ("text", PLANNER)
    assert cached(system) and cached(tool)
    [message] = body["messages"]
    assert message["role"] == "user"
    [block] = message["content"]
    assert block["text"] == user_prompt(PLAN_CONTEXT) == render_context(PLAN_CONTEXT)
    assert cached(block)
    assert request.context == PLAN_CONTEXT
    assert request.role == Role.PLANNER
    assert request.api_key == KEY
    assert request.headers["x-stainless-retry-count"] == "0"


async def test_the_answer_is_the_tool_input(api: FakeMessagesAPI, models: AnthropicModels) -> None:
    api.script(Role.PLANNER, answer({"focus": "fix has-title", "steps": ["Add a title"]}))
    answered = await plan(models)
    assert answered.answer == IterationPlan(focus="fix has-title", steps=["Add a title"])
    assert answered.usage.calls == 1


async def test_an_invalid_answer_is_repaired_from_its_validation_errors(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, answer({"focus": "", "steps": []}))
    answered = await plan(models)

    # The second answer (the fake's default) is the one kept.
    assert answered.answer.focus == "first complete draft"
    [repair] = answered.repairs
    assert "focus" in repair and "steps" in repair
    first, second = api.requests
    # The repair request repeats the conversation: the invalid tool call, then its errors
    # as a failed tool result.
    [invalid] = [b for b in second.body["messages"][1]["content"] if b["type"] == "tool_use"]
    assert invalid["input"] == {"focus": "", "steps": []}
    [result] = second.tool_results
    assert result["tool_use_id"] == invalid["id"]
    assert result["is_error"] is True
    errors = result_text(result)
    assert "String should have at least 1 character" in errors
    assert "List should have at least 1 item" in errors
    assert first.tool_results == []
    # Both requests are counted.
    assert answered.usage.calls == 2


async def test_two_invalid_answers_are_invalid_output(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, answer({"focus": "", "steps": []}), answer({"focus": "x"}))
    with pytest.raises(InvalidOutput, match="planner answered with invalid output") as raised:
        await plan(models)
    assert raised.value.role == Role.PLANNER
    assert "steps" in raised.value.detail  # the second answer's error
    assert len(api.requests) == 2


async def test_a_check_refusing_an_answer_is_repaired_with_its_message(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    def check(answer: IterationPlan) -> None:
        if answer.focus == "anything":
            raise ValueError("`focus` must name a rule of the evaluation")

    api.script(Role.PLANNER, answer({"focus": "anything", "steps": ["do it"]}))
    answered = await plan(models, check=check)

    assert answered.answer.focus == "first complete draft"
    assert answered.repairs == ["`focus` must name a rule of the evaluation"]
    [result] = api.requests[1].tool_results
    assert result["is_error"] is True
    assert result_text(result) == "`focus` must name a rule of the evaluation"


async def test_the_first_valid_answer_of_several_calls_is_kept(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(
        Role.PLANNER,
        tool_calls((None, {"focus": ""}), (None, {"focus": "second", "steps": ["do it"]})),
    )
    answered = await plan(models)
    assert answered.answer == IterationPlan(focus="second", steps=["do it"])
    assert answered.repairs == [] and len(api.requests) == 1


async def test_every_tool_call_of_an_unusable_answer_gets_its_failed_result(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    # The Messages API refuses a conversation in which a tool_use has no tool_result.
    api.script(Role.PLANNER, tool_calls((None, {"focus": ""}), ("write_file", {"path": "x"})))
    answered = await plan(models)

    assert answered.answer.focus == "first complete draft"
    uses = [b for b in api.requests[1].body["messages"][1]["content"] if b["type"] == "tool_use"]
    results = api.requests[1].tool_results
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
    assert all(r["is_error"] is True for r in results)
    invalid, unknown = (result_text(r) for r in results)
    assert "steps" in invalid
    assert "Unknown tool name: 'write_file'" in unknown and f"'{ANSWER_TOOL}'" in unknown
    [repair] = answered.repairs
    assert "steps" in repair and "write_file" in repair


@pytest.mark.parametrize(
    ("responder", "detail"),
    [
        (refusal(), "the model refused to answer"),
        # A compatible server that ignores tool_choice: told to use the tool, it answers
        # in prose again.
        (
            text_only("I would rather write prose."),
            "no valid answer after 1 repair: Please include your response in a tool call",
        ),
    ],
    ids=["refusal", "no-tool-call"],
)
async def test_unusable_answers_are_invalid_output(
    api: FakeMessagesAPI, models: AnthropicModels, responder: Any, detail: str
) -> None:
    api.script(Role.PLANNER, responder, responder)
    with pytest.raises(InvalidOutput, match="planner answered with invalid output") as raised:
        await plan(models)
    assert detail in raised.value.detail


def refused_with_text(text: str) -> Any:
    """A refusal that says why, as the API may: text, then the `refusal` stop reason."""

    def respond(api: FakeMessagesAPI, request: RecordedRequest) -> Any:
        return api.message(request, [{"type": "text", "text": text}], "refusal", None, 0.0)

    return respond


async def test_a_refusal_is_not_asked_again_and_is_kept_with_the_failure(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    # Asked again, a model refuses again: the text beside it is no answer to repair.
    api.script(Role.PLANNER, refused_with_text("I can't help with that."))
    with pytest.raises(InvalidOutput) as raised:
        await plan(models)
    assert len(api.requests) == 1
    assert "the model refused to answer (stop reason 'refusal')" in raised.value.detail
    # The refusal is what the run's trajectory records for the failed call.
    *_, refused = raised.value.messages
    assert isinstance(refused, ModelResponse) and refused.finish_reason == "content_filter"
    assert "I can't help with that." in refused.text


async def test_tools_it_does_not_have_get_one_repair_too(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    # Each unknown name has a retry of its own in pydantic-ai; the call has one repair.
    api.script(
        Role.PLANNER,
        tool_calls(("write_file", {"path": "x"})),
        tool_calls(("read_file", {"path": "x"})),
    )
    with pytest.raises(InvalidOutput) as raised:
        await plan(models)
    assert len(api.requests) == 2
    assert "no valid answer after 1 repair: Unknown tool name: 'read_file'" in raised.value.detail


async def test_an_answer_without_the_tool_call_is_repaired(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, text_only("I would rather write prose."))
    answered = await plan(models)
    assert answered.answer.focus == "first complete draft"
    assert len(answered.repairs) == 1 and "tool" in answered.repairs[0]
    assert len(api.requests) == 2


async def test_a_truncated_answer_is_repaired_once(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, truncated({"focus": "fix the ti"}))
    answered = await plan(models)
    assert answered.answer.focus == "first complete draft"
    [repair] = answered.repairs
    assert "steps" in repair and "Field required" in repair


async def test_a_truncated_answer_twice_is_invalid_output(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, truncated({"focus": "fix the ti"}), truncated({"focus": "fix the ti"}))
    with pytest.raises(InvalidOutput, match="planner answered with invalid output"):
        await plan(models)
    assert len(api.requests) == 2


async def test_an_answer_cut_off_twice_says_to_raise_max_tokens(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, truncated({"focus": "fix the ti"}), truncated({"focus": "fix the ti"}))
    with pytest.raises(InvalidOutput) as raised:
        await plan(models)
    assert "LOOPS_ANTHROPIC_MAX_TOKENS" in raised.value.detail


# --- strict tool input ------------------------------------------------------------------


async def test_a_server_rejecting_strict_tools_is_asked_again_without(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, error(400, "tools.0.custom.strict: Extra inputs are not permitted"))
    answered = await plan(models)

    assert answered.answer.focus == "first complete draft"
    rejected, retried = api.requests
    assert rejected.body["tools"][0]["strict"] is True
    assert "strict" not in retried.body["tools"][0]
    # For the source's lifetime: later calls do not ask again.
    assert models.strict_output is False
    await plan(models)
    assert "strict" not in api.requests[-1].body["tools"][0]
    assert len(api.requests) == 3


async def test_another_bad_request_is_not_taken_for_a_strict_rejection(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, error(400, "messages: at least one message is required"))
    with pytest.raises(ApplicationError) as raised:
        await plan(models)
    assert raised.value.type == MODEL_REQUEST_REJECTED and raised.value.non_retryable
    assert len(api.requests) == 1
    assert models.strict_output is True


async def test_a_source_without_strict_never_asks_for_it(api: FakeMessagesAPI) -> None:
    source = AnthropicModels(build_anthropic_client(settings_for(api)), strict=False)
    try:
        await ask(source, plan_call(), PLANNER, IterationPlan)
    finally:
        await source.provider.client.close()
    [request] = api.requests
    assert "strict" not in request.body["tools"][0]


# --- usage -------------------------------------------------------------------------------


async def test_usage_includes_cache_reads_and_writes(
    api: FakeMessagesAPI, models: AnthropicModels
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
    first = (await plan(models)).usage
    second = (await plan(models)).usage

    assert (first.output_tokens, first.calls) == (7, 1)
    assert (first.cache_read_input_tokens, first.cache_creation_input_tokens) == (500, 30)
    assert second == TokenUsage(input_tokens=5, output_tokens=2, calls=1)


async def test_input_tokens_are_the_uncached_input_as_the_api_reports_it(
    api: FakeMessagesAPI, models: AnthropicModels
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
    )
    usage = (await plan(models)).usage
    assert usage == TokenUsage(
        input_tokens=11,
        output_tokens=7,
        cache_read_input_tokens=500,
        cache_creation_input_tokens=30,
        calls=1,
    )


async def test_the_stable_system_prompt_is_written_once_then_read(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    first = (await plan(models)).usage
    second = (await plan(models)).usage
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0


# --- errors ------------------------------------------------------------------------------


async def test_sdk_retries_are_off_a_500_is_one_request(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, error(500, "boom"), error(500, "boom"), error(500, "boom"))
    with pytest.raises(ApplicationError) as raised:
        await plan(models)

    assert len(api.requests) == 1
    err = raised.value
    assert err.type == MODEL_UNAVAILABLE and not err.non_retryable
    assert isinstance(err.__cause__, ModelAPIError)
    assert isinstance(err.__cause__.__cause__, anthropic.InternalServerError)


async def test_retry_after_reaches_the_application_error(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, error(429, "slow down", headers={"retry-after": "12"}))
    with pytest.raises(ApplicationError) as raised:
        await plan(models)
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
    api: FakeMessagesAPI, models: AnthropicModels, status: int, retried: bool
) -> None:
    api.script(Role.PLANNER, error(status, "nope"))
    with pytest.raises(ApplicationError) as raised:
        await plan(models)
    err = raised.value
    assert len(api.requests) == 1
    assert err.non_retryable is not retried
    assert err.type == (MODEL_UNAVAILABLE if retried else MODEL_REQUEST_REJECTED)
    assert f"HTTP {status}: nope" in err.message
    # ApplicationError <- pydantic-ai's ModelAPIError <- the SDK's error
    assert isinstance(err.__cause__, ModelAPIError)
    cause = err.__cause__.__cause__
    assert isinstance(cause, anthropic.APIStatusError) and cause.status_code == status


async def test_a_missing_model_names_the_model_requested(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    api.script(Role.PLANNER, error(404, "model: claude-test-model"))
    with pytest.raises(ApplicationError) as raised:
        await plan(models)
    assert "(requested 'claude-test-model')" in raised.value.message


async def test_a_wrong_key_fails_with_an_actionable_message(api: FakeMessagesAPI) -> None:
    source = AnthropicModels(build_anthropic_client(settings_for(api, ANTHROPIC_API_KEY="wrong")))
    try:
        with pytest.raises(ApplicationError) as raised:
            await ask(source, plan_call(), PLANNER, IterationPlan)
    finally:
        await source.provider.client.close()
    assert raised.value.non_retryable
    assert raised.value.message.startswith("authentication failed: check ANTHROPIC_API_KEY")
    assert len(api.requests) == 1


async def test_an_unreachable_server_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}")
    source = AnthropicModels(build_anthropic_client(settings))
    try:
        with pytest.raises(ApplicationError) as raised:
            await ask(source, plan_call(), PLANNER, IterationPlan)
    finally:
        await source.provider.client.close()
    assert not raised.value.non_retryable
    assert raised.value.message.startswith(
        f"cannot reach the model server at http://127.0.0.1:{port}"
    )


async def test_a_slow_server_times_out_once_and_is_retryable(api: FakeMessagesAPI) -> None:
    api.script(Role.PLANNER, answer(delay_s=3))
    source = AnthropicModels(
        build_anthropic_client(settings_for(api, LOOPS_ANTHROPIC_TIMEOUT_S=0.5))
    )
    try:
        with pytest.raises(ApplicationError) as raised:
            await ask(source, plan_call(), PLANNER, IterationPlan)
    finally:
        await source.provider.client.close()
    assert len(api.requests) == 1
    assert not raised.value.non_retryable
    assert raised.value.message.endswith("timed out")


async def test_cancelling_a_long_call_ends_it_at_once(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    """A stop cancels the activity; the cancellation must not turn into a retryable error."""
    api.script(Role.PLANNER, answer(delay_s=30))
    task = asyncio.create_task(plan(models))
    while not api.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)


async def test_the_fake_reports_a_request_it_cannot_answer(
    api: FakeMessagesAPI, models: AnthropicModels
) -> None:
    with pytest.raises(ApplicationError, match="the system prompt matches no agent"):
        await ask(models, plan_call(), "You are nobody in particular.", IterationPlan)
    [failure] = api.failures
    assert isinstance(failure, LookupError)
    api.failures.clear()


# --- an agent's turns --------------------------------------------------------------------


async def test_an_agent_turn_offers_the_tools_without_forcing_one(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    await run_agent(models, produce_call(), PRODUCER, tmp_path, 5, "produce")

    first = api.requests[0]
    body = first.body
    assert body["tool_choice"] == {"type": "auto"}
    assert [t["name"] for t in body["tools"]] == list(TOOLS)
    for tool in body["tools"]:
        spec = TOOLS[tool["name"]].input_schema
        assert set(tool["input_schema"]["properties"]) == set(spec["properties"])
        assert tool["input_schema"].get("required") == spec.get("required")
    assert body["max_tokens"] == 1234
    assert body["system"][0]["text"] == PRODUCER
    assert cached(body["system"][0]) and cached(body["tools"][-1])
    # The last block is a cache breakpoint too: the next turn reads this prefix back.
    assert cached(last_block(first))
    assert first.context == PRODUCE_CONTEXT
    assert first.role == Role.PRODUCER


async def test_a_whole_agent_run_writes_through_tools(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    outcome = await run_agent(models, produce_call(), PRODUCER, tmp_path, 5, "produce")

    assert (tmp_path / ARTIFACT_PATH).read_text().startswith("# Write a testing guide")
    assert outcome.turns == 2 and outcome.final_text == "first draft: initial generation"
    assert outcome.files_written == [ARTIFACT_PATH] and outcome.repairs == []
    first, second = api.requests
    assert first.tool_results == []
    [use] = [b for b in second.body["messages"][1]["content"] if b["type"] == "tool_use"]
    assert (use["name"], use["input"]["path"]) == ("write_file", ARTIFACT_PATH)
    [result] = second.tool_results
    assert result["tool_use_id"] == use["id"] and result["is_error"] is False
    assert result_text(result).startswith(f"created {ARTIFACT_PATH}")
    assert cached(last_block(second))
    # Turn two reads turn one's prefix from the cache; both turns are counted.
    assert outcome.usage.calls == 2
    assert outcome.usage.cache_read_input_tokens > 0
    assert outcome.usage.cache_creation_input_tokens > 0


async def test_a_refused_tool_call_is_a_failed_result_the_model_sees(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # Turn one writes outside the workspace; the default turns then write artifact.md.
    api.script(Role.PRODUCER, answer({"files": [{"path": "../escape", "content": "out"}]}))
    outcome = await run_agent(models, produce_call(), PRODUCER, workspace, 5, "produce")

    assert not (tmp_path / "escape").exists()
    [refused] = api.requests[1].tool_results
    assert refused["is_error"] is True
    assert "refusing" in result_text(refused) and ".." in result_text(refused)
    assert outcome.files_written == [ARTIFACT_PATH]
    assert [(r.tool, r.ok) for r in outcome.records if r.kind == "tool_result"] == [
        ("write_file", False),
        ("write_file", True),
    ]


async def test_an_agent_that_answers_without_the_artifact_is_nudged_once(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    api.script(Role.PRODUCER, text_only("Nothing to do."))
    outcome = await run_agent(models, produce_call(), PRODUCER, tmp_path, 5, "produce")

    assert (tmp_path / ARTIFACT_PATH).is_file()
    reminded = api.requests[1]
    assert NUDGE in reminded.user_text
    assert [NUDGE in repair for repair in outcome.repairs] == [True]


async def test_an_agent_that_never_writes_the_artifact_is_invalid_output(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    api.script(Role.PRODUCER, text_only("No."), text_only("Still no."))
    with pytest.raises(InvalidOutput, match=r"ended without writing artifact\.md, even when"):
        await run_agent(models, produce_call(), PRODUCER, tmp_path, 5, "produce")
    assert len(api.requests) == 2


async def test_a_refused_agent_turn_says_it_was_refused(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    api.script(Role.PRODUCER, refusal())
    with pytest.raises(InvalidOutput) as raised:
        await run_agent(models, produce_call(), PRODUCER, tmp_path, 5, "produce")
    assert "even when reminded" not in raised.value.detail


@pytest.mark.parametrize(
    ("status", "kind", "non_retryable"),
    [(401, MODEL_REQUEST_REJECTED, True), (429, MODEL_UNAVAILABLE, False)],
)
async def test_agent_errors_are_classified_as_for_answers(
    api: FakeMessagesAPI,
    models: AnthropicModels,
    tmp_path: Path,
    status: int,
    kind: str,
    non_retryable: bool,
) -> None:
    api.script(Role.PRODUCER, error(status))
    with pytest.raises(ApplicationError) as raised:
        await run_agent(models, produce_call(), PRODUCER, tmp_path, 5, "produce")
    assert raised.value.type == kind
    assert raised.value.non_retryable is non_retryable


# --- the path around the model -----------------------------------------------------------


class Raising:
    """A ModelSource whose model raises `exc` on its first request."""

    strict_output = False

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> FunctionModel:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            raise self.exc

        return FunctionModel(respond)


def deps_with(source: Any, tmp_path: Path) -> StepDeps:
    return StepDeps(
        settings=Settings(),
        models=source,
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
        await consult(
            deps, Role.PLANNER, ModelStep(run_id="r"), PlannerContext(**PLAN_CONTEXT), IterationPlan
        )
    assert raised.value is rejected


async def test_consult_turns_invalid_output_twice_into_non_retryable_invalid_output(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    api.script(Role.PLANNER, truncated({"focus": "half"}), truncated({"focus": "half"}))
    deps = deps_with(models, tmp_path)
    with pytest.raises(ApplicationError) as raised:
        await consult(
            deps, Role.PLANNER, ModelStep(run_id="r"), PlannerContext(**PLAN_CONTEXT), IterationPlan
        )
    assert raised.value.type == INVALID_OUTPUT and raised.value.non_retryable
    assert "planner answered with invalid output" in raised.value.message


async def test_consult_asks_the_agents_model_with_its_prompt_and_prices_it(
    api: FakeMessagesAPI, models: AnthropicModels, tmp_path: Path
) -> None:
    settings = Settings()
    deps = deps_with(models, tmp_path)
    api.script(Role.PLANNER, answer({"focus": "", "steps": []}))
    answered = await consult(
        deps,
        Role.PLANNER,
        ModelStep(run_id="r", operator_note="keep it short"),
        PlannerContext(**PLAN_CONTEXT),
        IterationPlan,
    )
    model = settings.model_for(AGENTS["planner"].model)
    assert {r.body["model"] for r in api.requests} == {model}
    assert api.requests[0].system_text == PLANNER
    assert api.requests[0].context == {**PLAN_CONTEXT, "operator_note": "keep it short"}
    assert len(answered.repairs) == 1
    assert answered.usage.cost_usd == cost_usd(model, answered.usage, settings.prices) > 0


# --- settings and wiring -----------------------------------------------------------------


async def test_build_models_wires_the_anthropic_provider(api: FakeMessagesAPI) -> None:
    settings = settings_for(
        api,
        LOOPS_ANTHROPIC_MAX_TOKENS=2048,
        LOOPS_ANTHROPIC_TIMEOUT_S=42,
    )
    built = build_models(settings)
    assert isinstance(built, AnthropicModels)
    client = built.provider.client
    try:
        assert built.max_tokens == 2048
        assert built.strict_output is settings.anthropic_strict_output
        assert client.max_retries == 0
        assert str(client.base_url).rstrip("/") == api.base_url
        timeout = client.timeout
        assert isinstance(timeout, anthropic.Timeout) and timeout.read == 42
        answered = await ask(built, plan_call(), PLANNER, IterationPlan)
        assert answered.answer.focus
        [request] = api.requests
        assert request.body["max_tokens"] == 2048
    finally:
        await client.close()


async def test_one_model_per_model_id_on_one_client(api: FakeMessagesAPI) -> None:
    built = AnthropicModels(build_anthropic_client(settings_for(api)))
    try:
        first = built.model(plan_call(model="claude-a"))
        assert built.model(plan_call(model="claude-a", role=Role.CRITIC)) is first
        other = built.model(plan_call(model="claude-b"))
        assert other is not first and other.model_name == "claude-b"
        assert first.client is other.client is built.provider.client
    finally:
        await built.provider.client.close()


def test_a_key_selects_the_anthropic_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPS_LLM", raising=False)  # the suite's choice (tests/conftest.py)
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
    # The worker's env file copied from its example and not filled in: a key left blank is
    # none. The worker started, looked healthy, and every run failed at its first call.
    for blank in ("", "  "):
        monkeypatch.setenv("ANTHROPIC_API_KEY", blank)
        monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", blank)
        with pytest.raises(ValueError, match="LOOPS_LLM=anthropic needs a key"):
            build_models(Settings(LOOPS_LLM="anthropic"))


def test_no_default_model_is_one_the_sdk_calls_deprecated_and_each_has_a_price() -> None:
    """The SDK warns on every request to a deprecated model, and the model stops
    answering at its end of life: a default must not be one (claude-opus-4-5 was, with
    end of life 2027-01-22). Budgets in dollars need each default's price."""
    from anthropic._data import DEPRECATED_MODELS  # the SDK's own list; no public name

    settings = Settings()
    defaults = [settings.model_haiku, settings.model_sonnet, settings.model_opus]
    assert [m for m in defaults if m in DEPRECATED_MODELS] == []
    one_of_each = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert [m for m in defaults if cost_usd(m, one_of_each, settings.prices) == 0] == []
