"""A step's trajectory: the agent's conversation as JSON lines, one per message part,
tagged with the run, the step and the iteration, capped and redacted of the worker's
secrets (`checks.redaction`): they are committed, pushed and served."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from loopworks.checks.redaction import redacted
from loopworks.llm.base import ModelCall

# `skill`: the skill sub-loop's generator, whose records are `loop_type: skill`.
AgentStep = Literal["produce", "refine", "skill", "qa"]
LoopType = Literal["task", "skill"]
RecordKind = Literal["system", "user", "assistant", "tool_call", "tool_result", "retry", "limit"]

# Texts in the trajectory are cut here: it records what happened, not every byte written.
RECORD_TEXT_CAP = 4000


class TrajectoryRecord(BaseModel):
    """One line of a step's trajectory.

    `input` is what went to the model or a tool (a message's text, a tool's arguments);
    `output` what came back (the model's text, a tool's result); both are capped.
    """

    run_id: str
    step: AgentStep
    # One trajectory per run: the task loop's and the skill sub-loop's lines, told apart
    # by `loop_type`, linked to the run by `trajectory_id` (the run id).
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


def to_jsonl(records: list[TrajectoryRecord]) -> str:
    return "".join(record.model_dump_json() + "\n" for record in records)


def from_jsonl(text: str) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.model_validate_json(line) for line in text.splitlines() if line]


def trajectory(
    messages: list[ModelMessage], call: ModelCall, instructions: str, step: AgentStep
) -> list[TrajectoryRecord]:
    """The conversation as trajectory records: turn n is the model's n-th answer, and the
    tool results and reminders sent back after it."""
    records = [record(call, step, 0, "system", input=_cap(instructions))]
    turn = 0
    for message in messages:
        if isinstance(message, ModelResponse):
            turn += 1
            text = text_of(message)
            records.append(
                record(
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
                        record(
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
                    records.append(record(call, step, turn, "user", input=_cap(text)))
                elif isinstance(request_part, ToolReturnPart):
                    records.append(
                        record(
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
                        record(call, step, turn, "retry", output=request_part.model_response())
                    )
    return records


def record(
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


def text_of(response: ModelResponse) -> str:
    return "\n".join(p.content for p in response.parts if isinstance(p, TextPart))


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
