"""What every model source offers, and how a step's inputs are put to a model.

The model layer is pydantic-ai's `Model`, which a `ModelSource` gives for each call, and
every call is a pydantic-ai `Agent` run on it with the role's agent definition as
instructions: a structured role's agent answers through a forced tool whose input is the
answer model (`loopworks.llm.structured`); PRODUCE, REFINE and the skill generator work
with the workspace tools, and the QA verifier reads with them before it answers as a
structured role does (`loopworks.agent.loop`). Sources are the Anthropic Messages API
(`loopworks.llm.anthropic`) and the offline model (`loopworks.llm.offline.model`, a pydantic-ai
`FunctionModel`).
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field, TypeAdapter
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage, RunUsage

from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage


class ModelCall(BaseModel):
    """One model-backed step's request for a model: who asks, for which call of the run.

    `context` carries the structured inputs the prompt is built from: the offline model
    answers from it, a real model reads them rendered in the first user message.
    """

    role: Role
    run_id: str
    call_index: int = 1
    iteration: int = 0
    model: str
    context: dict[str, Any] = Field(default_factory=dict)


class ModelSource(Protocol):
    """Gives the pydantic-ai `Model` for a call, and knows whether its server takes strict
    (schema-constrained) tool input."""

    @property
    def strict_output(self) -> bool: ...

    def strict_rejected(self) -> None:
        """The server refused strict tool input: ask without it from now on."""

    def model(self, call: ModelCall) -> Model: ...


class InvalidOutput(Exception):
    """A model's answer does not fit its role's schema, even after it was shown the errors
    (one repair, then phase_error: docs/loop.md#invalid-answers)."""

    def __init__(self, role: Role, detail: str) -> None:
        super().__init__(f"{role.value} answered with invalid output: {detail}")
        self.role = role
        self.detail = detail
        # What was sent and answered, when a single-shot call gave up on its answer: the
        # run's trajectory records it before the step fails (activities/model_calls.py).
        self.messages: list[ModelMessage] = []


def usage_of(usage: RunUsage | RequestUsage) -> TokenUsage:
    """pydantic-ai's usage of a run or of one request as the run's `TokenUsage` (priced
    later by settings).

    pydantic-ai counts cache reads and writes inside `input_tokens`; the Messages API, and
    `TokenUsage`, count them apart, each at its own price: they are taken out here.
    """
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    return TokenUsage(
        input_tokens=max(0, usage.input_tokens - cached),
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens,
        calls=usage.requests if isinstance(usage, RunUsage) else 1,
    )


# Sent when a step has no inputs at all: the Messages API refuses an empty user message.
NO_INPUTS = "(no inputs)"


def user_prompt(context: dict[str, Any]) -> str:
    """The first user message of a step: its inputs as labelled sections, once; a second
    copy of them as JSON would be input tokens a real model is paid for twice."""
    return render_context(context) or NO_INPUTS


def render_context(context: dict[str, Any]) -> str:
    """The step's inputs as labelled sections: `## Acceptance Criteria` and its JSON.

    The JSON is pydantic's (in Rust): the standard library encodes indented JSON in Python,
    at five times the CPU (0.29 ms against 0.05 for a PRODUCE step's inputs). The text is the
    same, but that text outside ASCII goes as it is, not as `\\u` escapes (fewer tokens)."""
    parts = []
    for key, value in context.items():
        if value in (None, [], {}, ""):
            continue
        body = value if isinstance(value, str) else _json(value)
        parts.append(f"## {section_title(key)}\n{body}")
    return "\n\n".join(parts)


_ANY = TypeAdapter(Any)


def _json(value: Any) -> str:
    return _ANY.dump_json(value, indent=2, fallback=str).decode()


def section_title(key: str) -> str:
    """An input's section title: `acceptance_criteria` is `Acceptance Criteria`."""
    return key.replace("_", " ").title()
