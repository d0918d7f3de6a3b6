"""AnthropicModel.converse: an agent's turns through the real SDK, against the local stand-in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.agent_loop import run_agent
from activities.catalog import load_agents
from activities.llm.anthropic import AnthropicModel, build_anthropic_client
from activities.llm.base import (
    Conversation,
    InvalidOutput,
    TextBlock,
    ToolUse,
    render_context,
    with_context,
)
from activities.llm.errors import MODEL_REQUEST_REJECTED, MODEL_UNAVAILABLE
from activities.tools import tool_definitions
from schemas.roles import Role
from schemas.settings import Settings
from schemas.steps import ARTIFACT_PATH
from tests.fakes.messages_api import FakeMessagesAPI, answer, error, refusal, text_only

pytestmark = pytest.mark.unit

KEY = "test-key"
AGENTS = load_agents()
CONTEXT: dict[str, Any] = {
    "task": "Write a testing guide",
    "intent": "A guide to testing",
    "acceptance_criteria": ["has a title"],
    "rules": [],
    "plan": {"focus": "first draft", "steps": ["Draft it"]},
    "current_artifact": None,
}


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as fake:
        yield fake
    assert not fake.failures, "the fake could not answer a request"


@pytest.fixture
async def model(api: FakeMessagesAPI) -> AsyncIterator[AnthropicModel]:
    settings = Settings(
        LOOPS_LLM="anthropic", ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=api.base_url
    )
    built = AnthropicModel(build_anthropic_client(settings), max_tokens=2048)
    yield built
    await built.client.close()


def producing(**overrides: Any) -> Conversation:
    values: dict[str, Any] = {
        "role": Role.PRODUCER,
        "run_id": "run-1",
        "model": "claude-test-model",
        "system": AGENTS["producer"].prompt,
        "messages": [{"role": "user", "content": with_context(render_context(CONTEXT), CONTEXT)}],
        "tools": tool_definitions(),
        "context": CONTEXT,
    }
    return Conversation(**{**values, **overrides})


async def test_a_turn_offers_the_tools_without_forcing_one(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    turn = await model.converse(producing())

    [request] = api.requests
    body = request.body
    assert "tool_choice" not in body
    assert body["tools"] == tool_definitions()
    assert body["max_tokens"] == 2048
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    # The last block is a cache breakpoint too: the next turn reads this prefix back.
    [message] = body["messages"]
    assert message["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert request.context == CONTEXT

    assert turn.stop_reason == "tool_use"
    [use] = turn.tool_uses
    assert isinstance(use, ToolUse) and use.name == "write_file"
    assert use.input["path"] == ARTIFACT_PATH
    assert turn.usage.calls == 1 and turn.usage.cache_creation_input_tokens > 0


async def test_the_callers_messages_are_not_changed(model: AnthropicModel) -> None:
    conversation = producing(max_tokens=100)
    before = conversation.model_dump()
    await model.converse(conversation)
    assert conversation.model_dump() == before


async def test_a_whole_agent_run_writes_through_tools(
    api: FakeMessagesAPI, model: AnthropicModel, tmp_path: Path
) -> None:
    outcome = await run_agent(model, producing(), tmp_path, 5, "produce")

    assert (tmp_path / ARTIFACT_PATH).read_text().startswith("# Write a testing guide")
    assert outcome.turns == 2 and outcome.final_text == "first draft: initial generation"
    first, second = api.requests
    assert first.tool_results == []
    [result] = second.tool_results
    assert result["tool_use_id"] == first_tool_use_id(second) and "is_error" not in result
    # Turn two reads turn one's prefix from the cache.
    assert outcome.usage.cache_read_input_tokens > 0


def first_tool_use_id(request: Any) -> str:
    assistant = request.body["messages"][1]
    assert assistant["role"] == "assistant"
    block_id: str = assistant["content"][0]["id"]
    return block_id


async def test_a_text_reply_is_a_turn_without_tool_calls(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.script(Role.PRODUCER, text_only("Nothing to do."))
    turn = await model.converse(producing())
    assert turn.content == [TextBlock(text="Nothing to do.")]
    assert turn.tool_uses == [] and turn.stop_reason == "end_turn"


async def test_a_scripted_draft_is_written_through_tools(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.script(Role.PRODUCER, answer({"files": [{"path": "x.md", "content": "X"}]}))
    turn = await model.converse(producing())
    assert [(u.name, u.input) for u in turn.tool_uses] == [
        ("write_file", {"path": "x.md", "content": "X"})
    ]


@pytest.mark.parametrize(
    ("responder", "detail"),
    [(refusal(), "refused"), (answer(stop_reason="max_tokens"), "cut off at max_tokens=2048")],
    ids=["refusal", "max-tokens"],
)
async def test_a_refused_or_cut_off_turn_is_invalid_output(
    api: FakeMessagesAPI, model: AnthropicModel, responder: Any, detail: str
) -> None:
    api.script(Role.PRODUCER, responder)
    with pytest.raises(InvalidOutput, match=detail) as raised:
        await model.converse(producing())
    assert raised.value.role == Role.PRODUCER


@pytest.mark.parametrize(
    ("status", "kind", "non_retryable"),
    [(401, MODEL_REQUEST_REJECTED, True), (429, MODEL_UNAVAILABLE, False)],
)
async def test_errors_are_classified_as_for_answers(
    api: FakeMessagesAPI, model: AnthropicModel, status: int, kind: str, non_retryable: bool
) -> None:
    api.script(Role.PRODUCER, error(status))
    with pytest.raises(ApplicationError) as raised:
        await model.converse(producing())
    assert raised.value.type == kind
    assert raised.value.non_retryable is non_retryable
