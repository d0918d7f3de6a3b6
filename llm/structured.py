"""A structured role's answer: a pydantic-ai `Agent` whose output is the answer model,
given through one forced tool.

The model answers by calling one tool (`ANSWER_TOOL`) whose input schema is the answer
model's (`answer_output`). An answer that does not fit the schema, or that the step's own
check refuses (the output validator's `ModelRetry`), is sent back once as the call's
failed result, with its errors, so the model can repair it (docs/loop.md#invalid-answers);
a second invalid answer is `InvalidOutput`, which the workflow turns into `phase_error`.

A single-shot call (`ask`) is that agent with no tools; the QA verifier
(`loopworks.agent.loop.run_answering_agent`) is the same answer, repair and failure with
the workspace's read-only tools beside it. PRODUCE, REFINE and the skill generator answer
in prose on the same `Agent` (`loopworks.agent.loop`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel, ValidationError
from pydantic_ai import Agent, ModelRetry, RunContext, ToolOutput
from pydantic_ai.capabilities import AbstractCapability, RaiseContentFilterError
from pydantic_ai.exceptions import (
    ContentFilterError,
    ModelHTTPError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    ToolReturnPart,
)
from pydantic_ai.run import AgentRun
from pydantic_ai.usage import UsageLimits

from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource, usage_of, user_prompt
from loopworks.llm.budget import BudgetGuard, Meter
from loopworks.llm.errors import CUT_OFF, model_errors
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage

logger = logging.getLogger(__name__)

Answer = TypeVar("Answer", bound=BaseModel)

# An invalid answer is retried once (docs/loop.md#invalid-answers). Here the retry is a
# repair: the model sees its answer's errors.
REPAIR_ATTEMPTS = 1

# The question and its one repair: a model that calls tools it does not have gets no more
# requests than one whose answer is invalid (pydantic-ai gives each unknown name a retry).
QUESTION_AND_REPAIR = UsageLimits(request_limit=1 + REPAIR_ATTEMPTS)

# A single-shot run's deps: the step's own check of the answer, if it has one.
Check = Callable[[Any], None] | None


@dataclass
class Answered(Generic[Answer]):
    """A validated answer, what it cost, the validation errors it was repaired from, and
    the conversation (the run's trajectory records it)."""

    answer: Answer
    usage: TokenUsage
    repairs: list[str] = field(default_factory=list)
    messages: list[ModelMessage] = field(default_factory=list)


async def ask(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    answer_type: type[Answer],
    check: Callable[[Answer], None] | None = None,
    meter: Meter | None = None,
) -> Answered[Answer]:
    """Ask the role's model for an `answer_type`, repairing one invalid answer.

    `check` refuses an answer that fits the schema but not the step (a ValueError, whose
    message the model gets as the repair's feedback). Strict tool input is asked for while
    the source says its server takes it; a server that rejects the option gets the same
    request again without it, once per source. Each request is held to what `meter` has
    left (`loopworks.llm.budget`): one it refuses, or cuts, raises `BudgetSpent`.
    """
    strict = source.strict_output
    with model_errors(call.role):
        try:
            return await _run(source, call, instructions, answer_type, check, strict, meter)
        except ModelHTTPError as exc:
            if not (strict and is_strict_rejection(exc)):
                raise
            logger.warning(
                "the model server rejected strict tool input (%s); asking without it from now on",
                exc.message,
            )
            source.strict_rejected()
        return await _run(source, call, instructions, answer_type, check, False, meter)


async def _run(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    answer_type: type[Answer],
    check: Callable[[Answer], None] | None,
    strict: bool,
    meter: Meter | None,
) -> Answered[Answer]:
    agent = _answer_agent(answer_type, call.role, strict)
    agent_run: AgentRun[Check, BaseModel] | None = None
    try:
        async with agent.iter(
            user_prompt(call.context),
            model=source.model(call),
            instructions=instructions,
            deps=check,
            usage_limits=QUESTION_AND_REPAIR,
            capabilities=guarded(meter, call),
        ) as agent_run:
            async for _ in agent_run:
                pass
    except (UnexpectedModelBehavior, UsageLimitExceeded) as exc:
        messages = agent_run.all_messages() if agent_run is not None else []
        raise not_answered(call.role, messages, exc) from exc
    if agent_run.result is None:  # pragma: no cover - iter ends with a result or raises
        raise InvalidOutput(call.role, "it ended without an answer")
    messages = agent_run.all_messages()
    return Answered(
        answer=cast(Answer, agent_run.result.output),
        usage=usage_of(agent_run.usage),
        repairs=repairs_in(messages),
        messages=sent(messages),
    )


def not_answered(
    role: Role, messages: list[ModelMessage], exc: UnexpectedModelBehavior | UsageLimitExceeded
) -> InvalidOutput:
    """What an answer agent's run that ended without a valid answer raises: a refusal as
    it was said, else what was wrong with the last answer (said to raise the token limit
    when an answer was cut off at it), with the conversation for the run's trajectory."""
    shown = sent(messages)
    if isinstance(exc, ContentFilterError):
        # The refusal ends the run before it joins the conversation; the error carries it.
        refused = ModelMessagesTypeAdapter.validate_json(exc.body) if exc.body else []
        shown = [*shown, *refused]
        failed = InvalidOutput(role, refusal(shown))
    else:
        # What the run would have sent back next, had it a repair left.
        unsent = [_said(part) for message in messages[len(shown) :] for part in _retried(message)]
        said = "\n".join(unsent) if unsent else _cause(exc)
        detail = f"no valid answer after {REPAIR_ATTEMPTS} repair: {said[:1000]}"
        cut_off = any(isinstance(m, ModelResponse) and m.finish_reason == "length" for m in shown)
        failed = InvalidOutput(role, f"{CUT_OFF}; {detail}" if cut_off else detail)
    failed.messages = shown
    return failed


def _cause(exc: Exception) -> str:
    """What the last answer was told was wrong with it, from the error pydantic-ai ended
    the run with: its validation errors as the model reads them, or the message."""
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        return cause.json(include_url=False, include_context=False)
    return str(cause) if cause is not None else str(exc)


def refusal(messages: Sequence[ModelMessage]) -> str:
    """What a model that refused to answer said, from its last response."""
    last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    details = (last.provider_details if last is not None else None) or {}
    reason = details.get("finish_reason", "content_filter")
    said = f": {details['refusal']!r}" if details.get("refusal") else ""
    return f"the model refused to answer (stop reason {reason!r}){said}"


def sent(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The conversation as the model saw it: a run ends with the request it would have
    sent next (the answer's `Final result processed.`, the failed repair's errors),
    which no model read."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelResponse)), default=-1)
    return messages[: last + 1]


def repairs_in(messages: list[ModelMessage]) -> list[str]:
    """What the model was sent back to fix, one text a request that went to it."""
    return _feedback(sent(messages))


def _feedback(messages: Sequence[ModelMessage]) -> list[str]:
    """For each request that sends the answer back (its failed result: validation errors,
    the check's message; or the reminder to answer with the tool), every failed result it
    carries: a tool the model does not have is named beside its answer's errors. A
    verifier's refused write or failed read alone is its work, not a repair."""
    repairs = []
    for message in messages:
        retried = _retried(message)
        if any(isinstance(p, RetryFeedbackPart) or p.tool_name == ANSWER_TOOL for p in retried):
            repairs.append("\n".join(_said(p) for p in retried))
    return repairs


def _retried(message: ModelMessage) -> list[ToolReturnPart | RetryFeedbackPart]:
    """The parts of a request that send something back to be done again."""
    if not isinstance(message, ModelRequest):
        return []
    return [
        part
        for part in message.parts
        if isinstance(part, RetryFeedbackPart)
        or (isinstance(part, ToolReturnPart) and part.outcome == "retried")
    ]


def _said(part: ToolReturnPart | RetryFeedbackPart) -> str:
    if isinstance(part, RetryFeedbackPart):
        return part.model_response()
    return part.model_response_str(wrap_if_error=False)


def guarded(meter: Meter | None, call: ModelCall) -> list[AbstractCapability[Any]]:
    """The capabilities that hold a call's requests to its step's `meter`: none without one."""
    return [BudgetGuard(meter, call.model)] if meter is not None else []


def answer_output(answer_type: type[Answer], role: Role, strict: bool) -> ToolOutput[Answer]:
    """The forced tool a role answers with: the answer model's schema as its input, and
    the model's docstring after what the tool is for."""
    return ToolOutput(
        answer_type,
        name=ANSWER_TOOL,
        description=(
            f"Give your whole answer as the {role.value}: the input of this tool is the "
            "answer, and must match its schema"
        ),
        strict=strict,
    )


# What every answer agent runs with: a refusal asked again is refused again, so it ends
# the run at once, even with text beside it. (JSON arguments a compatible server wrapped
# in a Markdown fence pydantic-ai reads as the JSON inside.)
def answer_capabilities() -> list[AbstractCapability[Any]]:
    return [RaiseContentFilterError()]


# Building an agent generates its answer's JSON schema, the larger share of making one;
# an agent holds nothing of a run (model, instructions and check come with each run), so
# one serves every call of its shape. Bounded because some answer types are made per set
# of questions (`judgements_model`): a new set misses, and old ones age out.
AGENT_CACHE_SIZE = 64

_AnswerAgent = Agent[Check, BaseModel]


@functools.lru_cache(maxsize=AGENT_CACHE_SIZE)
def _answer_agent(answer_type: type[BaseModel], role: Role, strict: bool) -> _AnswerAgent:
    agent: _AnswerAgent = Agent(
        output_type=answer_output(answer_type, role, strict),
        deps_type=Check,
        retries={"tools": REPAIR_ATTEMPTS, "output": REPAIR_ATTEMPTS},
        capabilities=answer_capabilities(),
    )
    agent.output_validator(_checked)
    return agent


def _checked(ctx: RunContext[Check], answer: BaseModel) -> BaseModel:
    """The answer, once the step's check takes it; else its message, as a repair."""
    if ctx.deps is not None:
        try:
            ctx.deps(answer)
        except ValueError as exc:
            raise ModelRetry(str(exc)) from exc
    return answer


def is_strict_rejection(exc: ModelHTTPError) -> bool:
    """A 400 that names the `strict` option: the server does not know constrained tool
    input (compatible servers, older API versions)."""
    return exc.status_code == 400 and "strict" in str(exc.body or exc.message).lower()
