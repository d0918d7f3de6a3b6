"""A structured role's answer: one pydantic-ai agent run whose output is the answer model.

The model answers by calling one forced tool (`ANSWER_TOOL`) whose input schema is the
answer model's; pydantic-ai validates the input and, when it does not fit, sends the model
its answer's validation errors once so it can repair it (seed 001's "retry once"). A
second invalid answer is `InvalidOutput`, which the workflow turns into `phase_error`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext, ToolOutput, capture_run_messages
from pydantic_ai.exceptions import ModelHTTPError, UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    ToolReturnPart,
)

from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource, usage_of, user_prompt
from loopworks.llm.errors import CUT_OFF, invalid_detail, model_errors
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage

logger = logging.getLogger(__name__)

Answer = TypeVar("Answer", bound=BaseModel)

# Seed 001: an invalid answer is retried once. Here the retry is a repair: the model sees
# its answer's errors.
REPAIR_ATTEMPTS = 1

# A run's deps: the step's own check of the answer, if it has one.
_Check = Callable[[Any], None] | None
_AnswerAgent = Agent[_Check, BaseModel]


@dataclass
class Answered(Generic[Answer]):
    """A validated answer, what it cost, and the validation errors it was repaired from."""

    answer: Answer
    usage: TokenUsage
    repairs: list[str] = field(default_factory=list)


async def ask(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    answer_type: type[Answer],
    check: Callable[[Answer], None] | None = None,
) -> Answered[Answer]:
    """Ask the role's model for an `answer_type`, repairing one invalid answer.

    `check` refuses an answer that fits the schema but not the step (a ValueError, whose
    message the model gets as the repair's feedback). Strict tool input is asked for while
    the source says its server takes it; a server that rejects the option gets the same
    request again without it, once per source.
    """
    strict = source.strict_output
    with model_errors(call.role):
        try:
            return await _run(source, call, instructions, answer_type, check, strict)
        except ModelHTTPError as exc:
            if not (strict and is_strict_rejection(exc)):
                raise
            logger.warning(
                "the model server rejected strict tool input (%s); asking without it from now on",
                exc.message,
            )
            source.strict_rejected()
        return await _run(source, call, instructions, answer_type, check, strict=False)


async def _run(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    answer_type: type[Answer],
    check: Callable[[Answer], None] | None,
    strict: bool,
) -> Answered[Answer]:
    agent = _answer_agent(answer_type, call.role, strict)
    with capture_run_messages() as messages:
        try:
            result = await agent.run(
                user_prompt(call.context),
                model=source.model(call),
                instructions=instructions,
                deps=check,
            )
        except UnexpectedModelBehavior as exc:
            if any(isinstance(m, ModelResponse) and m.finish_reason == "length" for m in messages):
                # A cut-off answer fails validation like any other; say what would help.
                raise InvalidOutput(call.role, f"{CUT_OFF}; {invalid_detail(exc)}") from exc
            raise
    return Answered(
        answer=cast(Answer, result.output),
        usage=usage_of(result.usage),
        repairs=repairs_in(result.all_messages()),
    )


# Building an agent generates its answer's JSON schema, a large share of a call's CPU; an
# agent holds nothing of a run (the model, instructions and check come with each run), so
# one serves every call of its shape. Bounded because some answer types are made per
# set of questions (`judgements_model`): a new set misses, and old ones age out.
AGENT_CACHE_SIZE = 64


@functools.lru_cache(maxsize=AGENT_CACHE_SIZE)
def _answer_agent(answer_type: type[BaseModel], role: Role, strict: bool) -> _AnswerAgent:
    return _new_answer_agent(answer_type, role, strict)


def _new_answer_agent(answer_type: type[BaseModel], role: Role, strict: bool) -> _AnswerAgent:
    agent: _AnswerAgent = Agent(
        output_type=ToolOutput(
            answer_type,
            name=ANSWER_TOOL,
            description=(
                f"Give your whole answer as the {role.value}: the input of this tool is "
                "the answer, and must match its schema"
            ),
            strict=strict,
        ),
        deps_type=_Check,
        retries={"output": REPAIR_ATTEMPTS},
    )
    agent.output_validator(_checked)
    return agent


def _checked(ctx: RunContext[_Check], answer: BaseModel) -> BaseModel:
    if ctx.deps is None:
        return answer
    try:
        ctx.deps(answer)
    except ValueError as exc:
        raise ModelRetry(str(exc)) from exc
    return answer


def repairs_in(messages: list[ModelMessage]) -> list[str]:
    """What the model was asked to fix during a run: the feedback of each retried answer
    (validation errors of an output tool's input, an output validator's message)."""
    repairs = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.outcome == "retried":
                repairs.append(part.model_response_str())
            elif isinstance(part, RetryFeedbackPart):
                repairs.append(part.model_response())
    return repairs


def is_strict_rejection(exc: ModelHTTPError) -> bool:
    """A 400 that names the `strict` option: the server does not know constrained tool
    input (compatible servers, older API versions)."""
    return exc.status_code == 400 and "strict" in str(exc.body or exc.message).lower()
