"""The anthropic provider: the official SDK, structured answers by forced tool use.

The client (key, base URL, timeout, retries off) is built from settings apart from the
model adapter, so tests and compatible servers only swap the client. Forcing one tool
whose input schema is the role's answer schema works on the Anthropic API and on
compatible servers alike (LiteLLM, Ollama); the tool input is the answer.
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import anthropic
from anthropic.types import Message, MessageParam, TextBlock, ToolParam, ToolUseBlock

from activities.llm import base
from activities.llm.base import (
    CONTEXT_FENCE,
    Conversation,
    InvalidOutput,
    ModelAnswer,
    ModelCall,
    Turn,
    with_context,
)
from activities.llm.errors import classify
from schemas.roles import Role
from schemas.run import TokenUsage
from schemas.settings import Settings

logger = logging.getLogger(__name__)

ANSWER_TOOL = "answer"
__all__ = ["ANSWER_TOOL", "CONTEXT_FENCE", "AnthropicModel", "build_anthropic_client"]

# A connection that cannot be made in this long will not be made by waiting longer.
CONNECT_TIMEOUT_SECONDS = 10.0


def build_anthropic_client(settings: Settings) -> anthropic.AsyncAnthropic:
    """The SDK client for `settings`; its own retries are off so that Temporal retries and
    every attempt is visible in the run's event history."""
    client = anthropic.AsyncAnthropic(
        api_key=settings.anthropic_api_key,
        # None lets the SDK fall back to its own lookup (ANTHROPIC_BASE_URL, a profile).
        base_url=settings.anthropic_base_url,
        max_retries=0,
        timeout=anthropic.Timeout(
            settings.anthropic_timeout_seconds, connect=CONNECT_TIMEOUT_SECONDS
        ),
    )
    if client.api_key is None and client.auth_token is None and client.credentials is None:
        # Fail at worker start, not at the first model call of the first run.
        raise ValueError(
            "LOOPS_LLM=anthropic needs a key: set ANTHROPIC_API_KEY (any value for a "
            "compatible server that ignores it), or unset LOOPS_LLM to run offline"
        )
    return client


class AnthropicModel:
    """A LanguageModel over the Messages API: one request per call, one forced tool."""

    def __init__(self, client: anthropic.AsyncAnthropic, max_tokens: int = 4096) -> None:
        self.client = client
        self.max_tokens = max_tokens

    async def answer(self, call: ModelCall) -> ModelAnswer:
        try:
            message = await self.client.messages.create(
                model=call.model,
                max_tokens=self.max_tokens,
                # The agent's prompt is the same for every call of a role: cache it.
                system=[
                    {"type": "text", "text": call.system, "cache_control": {"type": "ephemeral"}}
                ],
                messages=[{"role": "user", "content": user_message(call)}],
                tools=[
                    {
                        "name": ANSWER_TOOL,
                        "description": (
                            f"Give your whole answer as the {call.role.value}: the tool "
                            "input is the answer, and must match the schema."
                        ),
                        "input_schema": call.output_schema,
                    }
                ],
                tool_choice={"type": "tool", "name": ANSWER_TOOL},
            )
        except anthropic.APIError as exc:
            raise classify(exc) from exc
        answer = _answer_input(call, message, self.max_tokens)
        return ModelAnswer(text=json.dumps(answer), usage=usage_of(message))

    async def converse(self, conversation: Conversation) -> Turn:
        """The next assistant turn: the model may call any of the tools, or none and stop."""
        max_tokens = conversation.max_tokens or self.max_tokens
        try:
            message = await self.client.messages.create(
                model=conversation.model,
                max_tokens=max_tokens,
                # Tools, then this system block, are the same on every turn of the role:
                # one cache breakpoint here covers both.
                system=[
                    {
                        "type": "text",
                        "text": conversation.system,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
                # Plain dicts in the API's shape; the server validates them.
                messages=cast("list[MessageParam]", _cache_tail(conversation.messages)),
                tools=cast("list[ToolParam]", conversation.tools),
            )
        except anthropic.APIError as exc:
            raise classify(exc) from exc
        _check_stop(conversation.role, message, max_tokens)
        blocks: list[base.TextBlock | base.ToolUse] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                blocks.append(base.TextBlock(text=block.text))
            elif isinstance(block, ToolUseBlock):
                blocks.append(base.ToolUse(id=block.id, name=block.name, input=block.input))
            else:
                # Only client tools are offered and thinking is off; anything else is noise
                # a compatible server added, and the next request can do without it.
                logger.debug("dropping a %s block from the reply", block.type)
        return Turn(content=blocks, stop_reason=message.stop_reason, usage=usage_of(message))


def user_message(call: ModelCall) -> str:
    """The rendered prompt, then the inputs as JSON in a `context` block (`with_context`)."""
    return with_context(call.prompt, call.context)


def _cache_tail(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with a cache breakpoint on the last block, so each turn reads the turns
    before it from the cache. A copy: the caller's conversation stays as it was."""
    if not messages:
        return messages
    last = dict(messages[-1])
    content = last.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content or not isinstance(content[-1], dict):
        return messages
    last["content"] = [*content[:-1], {**content[-1], "cache_control": {"type": "ephemeral"}}]
    return [*messages[:-1], last]


def _check_stop(role: Role, message: Message, max_tokens: int) -> None:
    """A turn cut off mid-way, or refused, is invalid output (retry once, then phase_error)."""
    if message.stop_reason == "max_tokens":
        raise InvalidOutput(
            role,
            f"a turn was cut off at max_tokens={max_tokens}; raise "
            "LOOPS_ANTHROPIC_MAX_TOKENS if turns are this long",
        )
    if message.stop_reason == "model_context_window_exceeded":
        raise InvalidOutput(role, "the conversation outgrew the model's context window")
    if message.stop_reason == "refusal":
        raise InvalidOutput(role, "the model refused to continue")


def usage_of(message: Message) -> TokenUsage:
    usage = message.usage
    return TokenUsage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        calls=1,
    )


def _answer_input(call: ModelCall, message: Message, max_tokens: int) -> dict[str, Any]:
    """The forced tool's input, unless the answer was cut off, refused or not given."""
    if message.stop_reason == "max_tokens":
        raise InvalidOutput(
            call.role,
            f"the answer was cut off at max_tokens={max_tokens}; raise "
            "LOOPS_ANTHROPIC_MAX_TOKENS if answers are this long",
        )
    if message.stop_reason == "model_context_window_exceeded":
        raise InvalidOutput(call.role, "the answer was cut off by the model's context window")
    if message.stop_reason == "refusal":
        raise InvalidOutput(call.role, "the model refused to answer")
    for block in message.content:
        if isinstance(block, ToolUseBlock) and block.name == ANSWER_TOOL:
            return block.input
    text = " ".join(getattr(block, "text", "") for block in message.content).strip()
    raise InvalidOutput(
        call.role,
        f"no {ANSWER_TOOL!r} tool call in the reply (stop_reason {message.stop_reason})"
        + (f"; it said: {text[:200]}" if text else ""),
    )
