"""The interface every model provider implements, and the one place answers are validated."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field, ValidationError

from schemas.roles import Role
from schemas.run import TokenUsage

Answer = TypeVar("Answer", bound=BaseModel)


class ModelCall(BaseModel):
    """One request to a model for one role.

    `context` carries the structured inputs the prompt was built from: the offline model
    answers from it, a real model reads the rendered `prompt`.
    """

    role: Role
    run_id: str
    call_index: int = 1
    iteration: int = 0
    model: str
    system: str
    prompt: str
    context: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any]


class ModelAnswer(BaseModel):
    text: str
    usage: TokenUsage = Field(default_factory=TokenUsage)


class Conversation(BaseModel):
    """A tool-using exchange with a model for one role: the messages so far, the tools it
    may call. The model answers with the next assistant `Turn`.

    `messages` are in the Messages API's shape (`{"role": "user"|"assistant", "content":
    str | [blocks]}`); `context` carries the structured inputs of the first message, for
    the offline model; `max_tokens` None leaves the provider's default.
    """

    role: Role
    run_id: str
    call_index: int = 1
    iteration: int = 0
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    context: dict[str, Any] = Field(default_factory=dict)
    max_tokens: int | None = Field(default=None, gt=0)


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolUse(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


Block = Annotated[TextBlock | ToolUse, Field(discriminator="type")]


class Turn(BaseModel):
    """One assistant reply in a conversation: text and tool calls, in order."""

    content: list[Block] = Field(default_factory=list)
    stop_reason: str | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock)).strip()

    @property
    def tool_uses(self) -> list[ToolUse]:
        return [b for b in self.content if isinstance(b, ToolUse)]

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        return {"role": "assistant", "content": [b.model_dump() for b in self.content]}


class LanguageModel(Protocol):
    async def answer(self, call: ModelCall) -> ModelAnswer: ...

    async def converse(self, conversation: Conversation) -> Turn: ...


class InvalidOutput(Exception):
    """A model's answer does not fit its role's schema (seed 001: retry once, then fail)."""

    def __init__(self, role: Role, detail: str) -> None:
        super().__init__(f"{role.value} answered with invalid output: {detail}")
        self.role = role
        self.detail = detail


async def ask(
    model: LanguageModel, call: ModelCall, answer_type: type[Answer]
) -> tuple[Answer, TokenUsage]:
    """Ask `model` and validate its answer as `answer_type`."""
    reply = await model.answer(call)
    try:
        parsed = answer_type.model_validate_json(_strip_fences(reply.text))
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise InvalidOutput(call.role, errors) from exc
    return parsed, reply.usage


def _strip_fences(text: str) -> str:
    """Models often wrap JSON in a markdown fence; the content is what counts."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped


def has_tool_results(messages: list[dict[str, Any]]) -> bool:
    """Whether any user message carries tool results (the conversation is past its first turn)."""
    return any(
        message.get("role") == "user"
        and isinstance(message.get("content"), list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in message["content"])
        for message in messages
    )


# The inputs travel as one JSON document in a fenced block after the rendered prompt.
CONTEXT_FENCE = "```context"


def with_context(prompt: str, context: dict[str, Any]) -> str:
    """The rendered prompt, then the same inputs as one JSON document in a `context` block.

    The JSON is exact where the rendered sections are for reading (strings there are
    unquoted), so a model, a proxy's log or a test stand-in can read the inputs back.
    """
    document = json.dumps(context, ensure_ascii=False, separators=(",", ":"), default=str)
    fenced = f"{CONTEXT_FENCE}\n{document}\n```"
    return f"{prompt}\n\n{fenced}" if prompt else fenced


def render_context(context: dict[str, Any]) -> str:
    """The prompt a real model reads: the step's inputs as labelled JSON sections."""
    parts = []
    for key, value in context.items():
        if value in (None, [], {}, ""):
            continue
        body = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
        parts.append(f"## {key.replace('_', ' ').title()}\n{body}")
    return "\n\n".join(parts)
