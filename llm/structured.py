"""A structured role's answer: a forced tool call whose input is the answer model.

The model answers by calling one tool (`ANSWER_TOOL`) whose input schema is the answer
model's. An answer that does not fit the schema, or that the step's own check refuses, is
sent back once as the call's failed result, with its errors, so the model can repair it
(docs/loop.md#invalid-answers); a second invalid answer is `InvalidOutput`, which the workflow
turns into `phase_error`.

Each request goes out through pydantic-ai's direct `model_request`, on the same `Model`
(Anthropic or offline) and with the same tool definition an `Agent` would send: the
conversation is at most two requests with no tools to run, so an agent run's machinery
would add CPU and nothing else. PRODUCE, REFINE and the skill generator, which run
tools, are a pydantic-ai `Agent` (`loopworks.agent.loop`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    InstructionPart,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.tools import GenerateToolJsonSchema, ToolDefinition
from pydantic_ai.usage import RunUsage

from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource, usage_of, user_prompt
from loopworks.llm.errors import CUT_OFF, model_errors
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage

logger = logging.getLogger(__name__)

Answer = TypeVar("Answer", bound=BaseModel)

# An invalid answer is retried once (docs/loop.md#invalid-answers). Here the retry is a
# repair: the model sees its answer's errors.
REPAIR_ATTEMPTS = 1

# What a model that answered in prose is told.
USE_THE_TOOL = (
    f"Give your answer by calling the `{ANSWER_TOOL}` tool: its input is the whole answer, "
    "and must match its schema."
)


@dataclass
class Answered(Generic[Answer]):
    """A validated answer, what it cost, the validation errors it was repaired from, and
    the conversation (the run's trajectory records it)."""

    answer: Answer
    usage: TokenUsage
    repairs: list[str] = field(default_factory=list)
    messages: list[ModelRequest | ModelResponse] = field(default_factory=list)


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
    conversation = _Conversation(call, instructions, answer_type, check)
    with model_errors(call.role):
        try:
            return await conversation.run(source.model(call), strict)
        except ModelHTTPError as exc:
            if not (strict and is_strict_rejection(exc)):
                raise
            logger.warning(
                "the model server rejected strict tool input (%s); asking without it from now on",
                exc.message,
            )
            source.strict_rejected()
        return await conversation.run(source.model(call), strict=False)


class _Conversation(Generic[Answer]):
    """One call's requests: the question, then at most `REPAIR_ATTEMPTS` repairs."""

    def __init__(
        self,
        call: ModelCall,
        instructions: str,
        answer_type: type[Answer],
        check: Callable[[Answer], None] | None,
    ) -> None:
        self.role = call.role
        self.instructions = instructions
        self.prompt = user_prompt(call.context)
        self.answer_type = answer_type
        self.check = check

    async def run(self, model: Model, strict: bool) -> Answered[Answer]:
        tool = answer_tool(self.answer_type, self.role, strict)
        parameters = ModelRequestParameters(
            output_mode="tool",
            output_tools=[tool],
            allow_text_output=False,
            # What model_request would otherwise copy the parameters to set, on every request.
            instruction_parts=[InstructionPart(content=self.instructions)],
        )
        messages: list[ModelRequest | ModelResponse] = [self._request(UserPromptPart(self.prompt))]
        usage = RunUsage()
        repairs: list[str] = []
        cut_off = False
        while True:
            response = await model_request(model, messages, model_request_parameters=parameters)
            usage.requests += 1
            usage.incr(response.usage)
            cut_off = cut_off or response.finish_reason == "length"
            messages.append(response)
            try:
                answer, feedback = self._read(response)
            except InvalidOutput as exc:
                exc.messages = list(messages)  # a refusal: recorded as it was answered
                raise
            if answer is not None:
                return Answered(
                    answer=answer, usage=usage_of(usage), repairs=repairs, messages=messages
                )
            repairs.append(_feedback_text(feedback))
            if len(repairs) > REPAIR_ATTEMPTS:
                detail = f"no valid answer after {REPAIR_ATTEMPTS} repair: {repairs[-1][:1000]}"
                failed = InvalidOutput(self.role, f"{CUT_OFF}; {detail}" if cut_off else detail)
                failed.messages = list(messages)
                raise failed
            messages.append(self._request(*feedback))

    def _request(self, *parts: ModelRequestPart) -> ModelRequest:
        # Every request carries the agent definition: a model reads the system prompt of
        # the last request.
        return ModelRequest(parts=list(parts), instructions=self.instructions)

    def _read(self, response: ModelResponse) -> tuple[Answer | None, list[ModelRequestPart]]:
        """The first valid answer among the response's answer calls; else what the model
        is sent back, one failed result for each of its tool calls (the Messages API
        wants every `tool_use` answered)."""
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if not calls and response.finish_reason == "content_filter":
            # A refusal asked again is refused again.
            raise InvalidOutput(self.role, _refusal(response))
        if not calls:
            return None, [UserPromptPart(USE_THE_TOOL)]
        feedback: list[ModelRequestPart] = []
        for call in calls:
            if call.tool_name != ANSWER_TOOL:
                feedback.append(
                    _retried(call, f"There is no tool `{call.tool_name}`. {USE_THE_TOOL}")
                )
                continue
            try:
                answer = self._valid(call)
            except ValidationError as exc:
                errors = exc.errors(include_url=False, include_context=False)
                feedback.append(_retried(call, errors))
            except ValueError as exc:
                feedback.append(_retried(call, str(exc)))
            else:
                return answer, []
        return None, feedback

    def _valid(self, call: ToolCallPart) -> Answer:
        if isinstance(call.args, str):
            answer = self.answer_type.model_validate_json(unfenced(call.args) or "{}")
        else:
            answer = self.answer_type.model_validate(call.args or {})
        if self.check is not None:
            self.check(answer)
        return answer


def unfenced(text: str) -> str:
    """JSON arguments a compatible server wrapped in a Markdown fence, unwrapped (an
    unclosed fence too)."""
    text = text.strip()
    if not text.startswith("```"):
        return text
    _, _, body = text.partition("\n")
    body = body.rstrip()
    return body.removesuffix("```")


def _refusal(response: ModelResponse) -> str:
    details = response.provider_details or {}
    reason = details.get("finish_reason", "content_filter")
    said = f": {details['refusal']!r}" if details.get("refusal") else ""
    return f"the model refused to answer (stop reason {reason!r}){said}"


def _retried(call: ToolCallPart, content: object) -> ToolReturnPart:
    """The call's failed result: the Messages API's `tool_result` with `is_error`."""
    return ToolReturnPart(
        tool_name=call.tool_name,
        content=content,
        tool_call_id=call.tool_call_id,
        outcome="retried",
    )


def _feedback_text(feedback: list[ModelRequestPart]) -> str:
    """What the model was asked to fix, as the run's events keep it."""
    texts = []
    for part in feedback:
        if isinstance(part, ToolReturnPart):
            texts.append(part.model_response_str(wrap_if_error=False))
        elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
            texts.append(part.content)
    return "\n".join(texts)


# An answer's tool definition: its JSON schema is generated once per answer type, the
# larger share of building a request. Bounded because some answer types are made per set
# of questions (`judgements_model`): a new set misses, and old ones age out.
TOOL_CACHE_SIZE = 64


@functools.lru_cache(maxsize=TOOL_CACHE_SIZE)
def answer_tool(answer_type: type[BaseModel], role: Role, strict: bool) -> ToolDefinition:
    """The forced tool a role answers with: the answer model's schema as its input, and
    the model's docstring after what the tool is for."""
    schema = answer_type.model_json_schema(schema_generator=GenerateToolJsonSchema)
    description = (
        f"Give your whole answer as the {role.value}: the input of this tool is the answer, "
        "and must match its schema"
    )
    if docstring := schema.pop("description", None):
        description = f"{description}. {docstring}"
    return ToolDefinition(
        name=ANSWER_TOOL,
        parameters_json_schema=schema,
        description=description,
        strict=strict,
        kind="output",
    )


def is_strict_rejection(exc: ModelHTTPError) -> bool:
    """A 400 that names the `strict` option: the server does not know constrained tool
    input (compatible servers, older API versions)."""
    return exc.status_code == 400 and "strict" in str(exc.body or exc.message).lower()
