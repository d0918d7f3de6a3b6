"""One line of a run's trajectory (docs/observability.md#the-trajectory): the shape the
agents write (`agent/trajectory.py`) and every reader of the served lines takes: the
API's `loop_type` filter, the dashboard's pages and `loops mcp`'s `run_trajectory`.

The route serves `.loops/trajectory/*.jsonl` as it finds them, a repository's own file
or a command's among them, so a reader takes the lines that are records and leaves the
others out (`read_record`) rather than failing on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import CallStep

# The steps whose model works with tools: `skill` is the skill sub-loop's generator.
AgentStep = Literal["produce", "refine", "skill", "qa"]
LoopType = Literal["task", "skill"]
# `limit`: the turn limit, or the run's budget, stopped the agent; `blocked`: a custodiet
# block during the work did.
RecordKind = Literal[
    "system", "user", "assistant", "tool_call", "tool_result", "retry", "limit", "blocked"
]


class TrajectoryRecord(BaseModel):
    """One line of a step's trajectory.

    `input` is what went to the model or a tool (a message's text, a tool's arguments);
    `output` what came back (the model's text, a tool's result); both are capped.
    """

    run_id: str
    step: AgentStep | CallStep
    # Lines written before every role was recorded name no role.
    role: Role | None = None
    # One trajectory per run: the task loop's lines carry the run id as `trajectory_id`;
    # a skill session's lines (`loop_type: skill`) carry the session's own id and the
    # run's as `parent_trajectory_id` (docs/observability.md#the-trajectory).
    loop_type: LoopType = "task"
    trajectory_id: str | None = None
    parent_trajectory_id: str | None = None
    iteration: int
    turn: int
    kind: RecordKind
    tool: str | None = None
    tool_use_id: str | None = None
    input: Any = None
    output: str | None = None
    ok: bool | None = None
    stop_reason: str | None = None
    # An `assistant` line: the model asked and the tokens its answer took (priced by the
    # reader's price table: the dashboard shows each call's cost).
    model: str | None = None
    usage: TokenUsage | None = None
    # When the line was written: its writer stamps it (agent/trajectory.py), as a module
    # a workflow imports reads no clock.
    ts: datetime


def read_record(line: str) -> TrajectoryRecord | None:
    """The line as a record; None when it is not one (blank, not JSON, or JSON of
    another shape)."""
    if not line.strip():
        return None
    try:
        return TrajectoryRecord.model_validate_json(line)
    except ValidationError:
        return None


def read_records(text: str) -> list[TrajectoryRecord]:
    """The lines of a trajectory that are records, in order; the others left out."""
    return [record for line in text.splitlines() if (record := read_record(line)) is not None]
