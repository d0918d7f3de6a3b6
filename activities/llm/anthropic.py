"""The anthropic provider: the official SDK, structured answers by forced tool use.

The client (key, base URL, timeout, retries off) is built from settings apart from the
model adapter, so tests and compatible servers only swap the client. Forcing one tool
whose input schema is the role's answer schema works on the Anthropic API and on
compatible servers alike (LiteLLM, Ollama); the tool input is the answer.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
from anthropic.types import Message, ToolUseBlock

from activities.llm.base import InvalidOutput, ModelAnswer, ModelCall
from activities.llm.errors import classify
from schemas.run import TokenUsage
from schemas.settings import Settings

ANSWER_TOOL = "answer"
CONTEXT_FENCE = "```context"

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


def user_message(call: ModelCall) -> str:
    """The rendered prompt, then the same inputs as one JSON document in a `context` block.

    The JSON is exact where the rendered sections are for reading (strings there are
    unquoted), so a model, a proxy's log or a test stand-in can read the inputs back.
    """
    context = json.dumps(call.context, ensure_ascii=False, separators=(",", ":"), default=str)
    fenced = f"{CONTEXT_FENCE}\n{context}\n```"
    return f"{call.prompt}\n\n{fenced}" if call.prompt else fenced


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
