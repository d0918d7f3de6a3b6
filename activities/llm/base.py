"""The interface every model provider implements, and the one place answers are validated."""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeVar

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


class LanguageModel(Protocol):
    async def answer(self, call: ModelCall) -> ModelAnswer: ...


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


def render_context(context: dict[str, Any]) -> str:
    """The prompt a real model reads: the step's inputs as labelled JSON sections."""
    parts = []
    for key, value in context.items():
        if value in (None, [], {}, ""):
            continue
        body = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
        parts.append(f"## {key.replace('_', ' ').title()}\n{body}")
    return "\n\n".join(parts)
