"""A run's trajectory: every model call's conversation as JSON lines, one per message
part, tagged with the run, the step, the role, the loop and the iteration, capped, and
redacted of the worker's secrets (`checks.redaction`) as they are written (`to_jsonl`):
they are committed, pushed and served (docs/observability.md#the-trajectory). A line's
shape (`TrajectoryRecord`) is in schemas/trajectory.py, for the readers of what is served."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

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
from loopworks.llm.base import ModelCall, usage_of
from loopworks.schemas.roles import Role
from loopworks.schemas.steps import CallStep
from loopworks.schemas.trajectory import AgentStep, RecordKind, TrajectoryRecord

# The skill sub-loop's roles: their lines are `loop_type: skill`, in the skill session's
# own trajectory.
SKILL_ROLES = frozenset({Role.SKILL_GENERATOR, Role.SKILL_REFLECTOR, Role.SKILL_CURATOR})

# Texts in the trajectory are cut here: it records what happened, not every byte written.
RECORD_TEXT_CAP = 4000


def to_jsonl(records: list[TrajectoryRecord]) -> str:
    """The records as the JSON lines of a trajectory file. Every file of a trajectory is
    written from this text, so its texts (prompts, the model's words and tool calls, tool
    results) are redacted here, in one pass over the call's records."""
    return "".join(record.model_dump_json() + "\n" for record in redacted(records))


def from_jsonl(text: str) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.model_validate_json(line) for line in text.splitlines() if line]


def skill_session_id(run_id: str, iteration: int) -> str:
    """A skill session's trajectory id: the run's, `skill`, and the iteration the run's
    sub-loop ran after (`run-1:skill:3`)."""
    return f"{run_id}:skill:{iteration}"


def trajectory(
    messages: Sequence[ModelMessage],
    call: ModelCall,
    instructions: str,
    step: AgentStep | CallStep,
) -> list[TrajectoryRecord]:
    """The conversation as trajectory records: turn n is the model's n-th answer, and the
    tool results and reminders sent back after it."""
    records = [record(call, step, 0, "system", input=cap(instructions))]
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
                    output=cap(text.strip()),
                    stop_reason=message.finish_reason,
                    model=call.model,
                    usage=usage_of(message.usage).model_dump(exclude={"cost_usd"}),
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
                            input=capped(part.args_as_dict()),
                        )
                    )
        elif isinstance(message, ModelRequest):
            for request_part in message.parts:
                if isinstance(request_part, UserPromptPart):
                    content = request_part.content
                    text = content if isinstance(content, str) else json.dumps(content, default=str)
                    records.append(record(call, step, turn, "user", input=cap(text)))
                elif isinstance(request_part, ToolReturnPart):
                    # The result as the tool gave it, a failure too (`ok` says which): the
                    # model reads a failure wrapped as `{"error": ...}`, but the record is
                    # what gates read back, a command's exit code first (agent/actions.py).
                    records.append(
                        record(
                            call,
                            step,
                            turn,
                            "tool_result",
                            tool=request_part.tool_name,
                            tool_use_id=request_part.tool_call_id,
                            output=cap(request_part.model_response_str(wrap_if_error=False)),
                            ok=request_part.outcome == "success",
                        )
                    )
                elif isinstance(request_part, RetryFeedbackPart):
                    records.append(
                        record(call, step, turn, "retry", output=request_part.model_response())
                    )
    return records


def record(
    call: ModelCall, step: AgentStep | CallStep, turn: int, kind: RecordKind, **fields: Any
) -> TrajectoryRecord:
    """One line of a trajectory, its texts as they were said: `to_jsonl` redacts them
    when the trajectory is written."""
    skill = call.role in SKILL_ROLES
    return TrajectoryRecord(
        run_id=call.run_id,
        step=step,
        role=call.role,
        loop_type="skill" if skill else "task",
        trajectory_id=skill_session_id(call.run_id, call.iteration) if skill else call.run_id,
        parent_trajectory_id=call.run_id if skill else None,
        iteration=call.iteration,
        turn=turn,
        kind=kind,
        ts=datetime.now(UTC),
        **fields,
    )


def text_of(response: ModelResponse) -> str:
    return "\n".join(p.content for p in response.parts if isinstance(p, TextPart))


def cap(text: str | None, limit: int = RECORD_TEXT_CAP) -> str | None:
    """`text` cut at `limit` characters, saying how many more there were."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def capped(value: Any) -> Any:
    """`value` with every string in it capped (a write_file's content can be megabytes)."""
    if isinstance(value, str):
        return cap(value)
    if isinstance(value, dict):
        return {key: capped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [capped(item) for item in value]
    return value
