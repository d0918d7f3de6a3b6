"""The agent loop of PRODUCE and REFINE: a model working in the run's workspace with tools.

The model, offered the workspace tools (`loopworks.agent.tools`), works turn by turn until
it answers without a tool call, or the turn limit. A call the guard refuses comes back to the
model as a failed tool result it can adapt to, never as an exception. An answer given
before `artifact.md` exists is sent back once with a reminder (the nudge); ending without
it again is invalid output. The conversation becomes the step's trajectory (seed 003's
trajectory export: JSON lines tagged with the step and the iteration).
"""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai.direct import model_request
from pydantic_ai.messages import (
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from loopworks.agent.tools import TOOLS, ToolResult, execute
from loopworks.checks.redaction import redacted
from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource, usage_of, user_prompt
from loopworks.llm.errors import CUT_OFF, model_errors
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workspace import files

# `skill`: the skill sub-loop's generator (seed 003), whose records are `loop_type: skill`.
AgentStep = Literal["produce", "refine", "skill"]
LoopType = Literal["task", "skill"]
RecordKind = Literal["system", "user", "assistant", "tool_call", "tool_result", "retry", "limit"]

# Texts in the trajectory are cut here: it records what happened, not every byte written.
RECORD_TEXT_CAP = 4000
# Tools whose successful call writes the file named by their `path` argument.
_WRITING_TOOLS = frozenset({"write_file", "edit_file"})
WRITE_FILE = TOOLS["write_file"].name
# An answer without the deliverable is sent back this many times before it is invalid.
NUDGES = 1
NUDGE = (
    f"You ended your turn without writing `{ARTIFACT_PATH}`. The step's deliverable must "
    f"be in `{ARTIFACT_PATH}` at the workspace root: write it with `{WRITE_FILE}`, then "
    "end your turn with a short summary and no tool call."
)


class TrajectoryRecord(BaseModel):
    """One line of a step's trajectory.

    `input` is what went to the model or a tool (a message's text, a tool's arguments);
    `output` what came back (the model's text, a tool's result); both are capped.
    """

    run_id: str
    step: AgentStep
    # Seed 003's one trajectory: the task loop's and the skill sub-loop's lines, told
    # apart by `loop_type`, linked to the run by `trajectory_id` (the run id).
    loop_type: LoopType = "task"
    trajectory_id: str | None = None
    iteration: int
    turn: int
    kind: RecordKind
    tool: str | None = None
    tool_use_id: str | None = None
    input: Any = None
    output: str | None = None
    ok: bool | None = None
    stop_reason: str | None = None
    ts: datetime = Field(default_factory=lambda: datetime.now(UTC))


@dataclass
class AgentOutcome:
    final_text: str
    turns: int
    usage: TokenUsage
    records: list[TrajectoryRecord]
    files_written: list[str] = field(default_factory=list)
    limit_reached: bool = False
    # What the model was sent back to fix (the nudge when it forgot the deliverable).
    repairs: list[str] = field(default_factory=list)


def to_jsonl(records: list[TrajectoryRecord]) -> str:
    return "".join(record.model_dump_json() + "\n" for record in records)


def from_jsonl(text: str) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.model_validate_json(line) for line in text.splitlines() if line]


async def run_agent(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    workspace: Path,
    max_turns: int,
    step_label: AgentStep,
    deliverable: str | None = ARTIFACT_PATH,
) -> AgentOutcome:
    """Run the role's agent over `workspace` until it answers, or for `max_turns` turns.

    Model errors (a provider's ApplicationError, InvalidOutput) propagate: the activity's
    retry starts the whole loop again from the same commit. Without a `deliverable` (the
    skill generator: its files are judged by the skill reflector) there is no nudge.
    """
    agent = _AgentRun(call.role, instructions, user_prompt(call.context), workspace, deliverable)
    with model_errors(call.role):
        answer = await agent.run(source.model(call), max_turns)
    messages = agent.messages
    records = trajectory(messages, call, instructions, step_label)
    turns = sum(isinstance(m, ModelResponse) for m in messages)
    if answer is None:
        records.append(
            _record(
                call,
                step_label,
                turns,
                "limit",
                output=f"stopped at the turn limit ({max_turns} turns) with work unfinished",
            )
        )
    return AgentOutcome(
        # The model's last words become a commit message and the step's summary.
        final_text=redacted(answer if answer is not None else _last_text(messages)),
        turns=turns,
        usage=_usage(messages),
        records=records,
        files_written=list(agent.written),
        limit_reached=answer is None,
        repairs=[r.output or "" for r in records if r.kind == "retry"],
    )


class _AgentRun:
    """One agent conversation: requests with the tools offered, each turn's tool calls run
    in order and answered, until a turn without a tool call.

    Requests go out through pydantic-ai's direct `model_request` with the tool definitions
    an `Agent` sent: an agent run's machinery cost more CPU than the request itself.
    """

    def __init__(
        self, role: Role, instructions: str, prompt: str, root: Path, deliverable: str | None
    ) -> None:
        self.role = role
        self.instructions = instructions
        self.root = root
        self.deliverable = deliverable
        self.messages: list[ModelMessage] = [self._request(UserPromptPart(prompt))]
        self.written: dict[str, None] = {}  # an ordered set
        self.nudges = 0

    async def run(self, model: Model, max_turns: int) -> str | None:
        """The final answer's text; None when the turn limit came first."""
        parameters = ModelRequestParameters(
            function_tools=_tool_definitions(),
            # What model_request would otherwise copy the parameters to set, on every request.
            instruction_parts=[InstructionPart(content=self.instructions)],
        )
        for _ in range(max_turns):
            response = await model_request(
                model, self.messages, model_request_parameters=parameters
            )
            self.messages.append(response)
            calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
            if calls:
                results = [await self._result(c) for c in calls]
                self.messages.append(self._request(*results))
                continue
            answer = self._answer(response)
            if answer is not None:
                return answer
            self.nudges += 1
            self.messages.append(
                self._request(
                    RetryFeedbackPart(content=NUDGE, retry=RetryInfo(cause="model_retry"))
                )
            )
        return None

    def _answer(self, response: ModelResponse) -> str | None:
        """A turn without tool calls: its text is the answer once the deliverable exists;
        None when the model is to be reminded of it."""
        text = _text_of(response)
        if response.finish_reason == "content_filter":
            raise InvalidOutput(self.role, f"the model refused to go on: {text.strip()[:500]}")
        if response.finish_reason == "length" and not text.strip():
            raise InvalidOutput(self.role, CUT_OFF)
        if self.deliverable is None or _delivered(self.root, self.deliverable):
            return text
        if self.nudges < NUDGES:
            return None
        raise InvalidOutput(
            self.role, f"it ended without writing {self.deliverable}, even when reminded"
        )

    async def _result(self, call: ToolCallPart) -> ToolReturnPart:
        """Run one tool call (off the event loop: commands block, and heartbeats must go
        on); a refused or failed call is a failed result the model can adapt to."""
        arguments = call.args_as_dict()
        result = await _execute(self.root, call.tool_name, arguments)
        if result.ok and call.tool_name in _WRITING_TOOLS:
            path = arguments.get("path")
            if isinstance(path, str):
                self.written[path] = None
        return ToolReturnPart(
            tool_name=call.tool_name,
            content=result.content,
            tool_call_id=call.tool_call_id,
            outcome="success" if result.ok else "failed",
        )

    def _request(self, *parts: ModelRequestPart) -> ModelRequest:
        # Every request carries the agent definition: a model reads the system prompt of
        # the last request.
        return ModelRequest(parts=list(parts), instructions=self.instructions)


@functools.cache
def _tool_definitions() -> list[ToolDefinition]:
    """The workspace tools as the model is offered them; their JSON schemas are made once."""
    return [
        ToolDefinition(
            name=spec.name,
            description=spec.description,
            parameters_json_schema=spec.input_schema,
            sequential=True,
        )
        for spec in TOOLS.values()
    ]


async def _execute(workspace: Path, name: str, arguments: dict[str, Any]) -> ToolResult:
    """A tool's result, redacted (`checks.redaction`): what a tool read (a file holding a
    key, a URL with a token) goes back to the model, and into the trajectory, without the
    worker's secrets."""
    try:
        result = await asyncio.to_thread(execute, workspace, name, arguments)
    except Exception as exc:  # `execute` never raises by contract; a model must not crash us
        result = ToolResult(ok=False, content=f"{name} failed: {type(exc).__name__}: {exc}")
    return redacted(result)


def trajectory(
    messages: list[ModelMessage], call: ModelCall, instructions: str, step: AgentStep
) -> list[TrajectoryRecord]:
    """The conversation as trajectory records: turn n is the model's n-th answer, and the
    tool results and reminders sent back after it."""
    records = [_record(call, step, 0, "system", input=_cap(instructions))]
    turn = 0
    for message in messages:
        if isinstance(message, ModelResponse):
            turn += 1
            text = _text_of(message)
            records.append(
                _record(
                    call,
                    step,
                    turn,
                    "assistant",
                    output=_cap(text.strip()),
                    stop_reason=message.finish_reason,
                )
            )
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    records.append(
                        _record(
                            call,
                            step,
                            turn,
                            "tool_call",
                            tool=part.tool_name,
                            tool_use_id=part.tool_call_id,
                            input=_capped(part.args_as_dict()),
                        )
                    )
        elif isinstance(message, ModelRequest):
            for request_part in message.parts:
                if isinstance(request_part, UserPromptPart):
                    content = request_part.content
                    text = content if isinstance(content, str) else json.dumps(content, default=str)
                    records.append(_record(call, step, turn, "user", input=_cap(text)))
                elif isinstance(request_part, ToolReturnPart):
                    records.append(
                        _record(
                            call,
                            step,
                            turn,
                            "tool_result",
                            tool=request_part.tool_name,
                            tool_use_id=request_part.tool_call_id,
                            output=_cap(request_part.model_response_str()),
                            ok=request_part.outcome == "success",
                        )
                    )
                elif isinstance(request_part, RetryFeedbackPart):
                    records.append(
                        _record(call, step, turn, "retry", output=request_part.model_response())
                    )
    return records


def _record(
    call: ModelCall, step: AgentStep, turn: int, kind: RecordKind, **fields: Any
) -> TrajectoryRecord:
    # Every line of a trajectory is made here, and is committed, pushed and served: its
    # texts (prompts, the model's words and tool calls, tool results) redacted.
    fields = redacted(fields)
    return TrajectoryRecord(
        run_id=call.run_id,
        step=step,
        loop_type="skill" if step == "skill" else "task",
        trajectory_id=call.run_id,
        iteration=call.iteration,
        turn=turn,
        kind=kind,
        **fields,
    )


def _text_of(response: ModelResponse) -> str:
    return "\n".join(p.content for p in response.parts if isinstance(p, TextPart))


def _last_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            text = _text_of(message)
            if text.strip():
                return text.strip()
    return ""


def _usage(messages: list[ModelMessage]) -> TokenUsage:
    """Tokens of every answer in the conversation, whether the run ended well or not."""
    usage = TokenUsage()
    for message in messages:
        if isinstance(message, ModelResponse):
            usage = usage + usage_of(message.usage)
    return usage


def _cap(text: str | None, cap: int = RECORD_TEXT_CAP) -> str | None:
    if text is None or len(text) <= cap:
        return text
    return f"{text[:cap]}… [{len(text) - cap} more characters]"


def _capped(value: Any) -> Any:
    """`value` with every string in it capped (a write_file's content can be megabytes)."""
    if isinstance(value, str):
        return _cap(value)
    if isinstance(value, dict):
        return {key: _capped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_capped(item) for item in value]
    return value


def _delivered(root: Path, deliverable: str) -> bool:
    """Whether the deliverable is a file in the workspace. A path the worker refuses (a
    link out of it) counts as there: the step's own read of it fails, saying why."""
    try:
        return files.is_file(root, deliverable)
    except files.UnsafePath:
        return True
