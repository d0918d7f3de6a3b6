"""The agent loop of PRODUCE and REFINE: a model working in the run's workspace with tools.

A pydantic-ai agent with the workspace tools (`loopworks.agent.tools`) runs until the model
answers without a tool call, or the turn limit. A call the guard refuses comes back to the
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
from pydantic_ai import Agent, ModelRetry, RunContext, Tool, ToolFailed, capture_run_messages
from pydantic_ai.exceptions import UsageLimitExceeded
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
from pydantic_ai.usage import UsageLimits

from loopworks.agent.tools import TOOLS, ToolResult, ToolSpec, execute
from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource, usage_of, user_prompt
from loopworks.llm.errors import model_errors
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import ARTIFACT_PATH

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


@dataclass
class _ToolLog:
    """What the tools did, by call: whether each succeeded, and the files written."""

    ok: dict[str, bool] = field(default_factory=dict)
    written: dict[str, None] = field(default_factory=dict)  # an ordered set


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
    log = _ToolLog()
    agent = _tool_agent()
    limit_reached = False
    final_text = ""
    with capture_run_messages() as messages:
        try:
            with model_errors(call.role):
                result = await agent.run(
                    user_prompt(call.context),
                    model=source.model(call),
                    instructions=instructions,
                    deps=_Workspace(workspace, log, deliverable),
                    usage_limits=UsageLimits(request_limit=max_turns),
                    # Bad tool arguments go back to the model; the turn limit bounds how often.
                    retries={"tools": max_turns},
                )
            final_text = result.output
        except UsageLimitExceeded:
            limit_reached = True
        except InvalidOutput as exc:
            # Only the nudge's retries running out means the deliverable was never written;
            # a refusal or a cut-off turn keeps its own message.
            if NUDGE in exc.detail and not (workspace / ARTIFACT_PATH).is_file():
                raise InvalidOutput(
                    call.role, f"it ended without writing {ARTIFACT_PATH}, even when reminded"
                ) from exc
            raise
    records = trajectory(messages, call, instructions, step_label)
    turns = sum(isinstance(m, ModelResponse) for m in messages)
    if limit_reached:
        final_text = _last_text(messages)
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
        final_text=final_text,
        turns=turns,
        usage=_usage(messages),
        records=records,
        files_written=list(log.written),
        limit_reached=limit_reached,
        repairs=[r.output or "" for r in records if r.kind == "retry"],
    )


@dataclass(frozen=True)
class _Workspace:
    """A run's own side of the shared agent: where its tools work, what they did, and the
    file its answer must have written."""

    root: Path
    log: _ToolLog
    deliverable: str | None


# Building the agent generates every tool's JSON schema; the agent holds nothing of a run
# (model, instructions, workspace and turn limit come with each run), so one serves all.
@functools.cache
def _tool_agent() -> Agent[_Workspace, str]:
    return _new_tool_agent()


def _new_tool_agent() -> Agent[_Workspace, str]:
    agent: Agent[_Workspace, str] = Agent(
        deps_type=_Workspace,
        tools=[_tool(spec) for spec in TOOLS.values()],
        output_type=str,
        retries={"output": NUDGES},
    )
    agent.output_validator(_deliverable_written)
    return agent


def _deliverable_written(ctx: RunContext[_Workspace], text: str) -> str:
    deliverable = ctx.deps.deliverable
    if deliverable is not None and not (ctx.deps.root / deliverable).is_file():
        raise ModelRetry(NUDGE)
    return text


def _tool(spec: ToolSpec[Any]) -> Tool[_Workspace]:
    """A workspace tool for pydantic-ai: the guarded `execute`, off the event loop (commands
    block) so heartbeats keep going; a refused or failed call is a failed tool result."""

    async def run(ctx: RunContext[_Workspace], **arguments: Any) -> str:
        result = await _execute(ctx.deps.root, spec.name, arguments)
        log = ctx.deps.log
        log.ok[ctx.tool_call_id or ""] = result.ok
        if not result.ok:
            raise ToolFailed(result.content)
        if spec.name in _WRITING_TOOLS and isinstance(arguments.get("path"), str):
            log.written[arguments["path"]] = None
        return result.content

    # One call at a time: two edits of one file must not race.
    return Tool.from_schema(
        run,
        name=spec.name,
        description=spec.description,
        json_schema=spec.input_schema,
        takes_ctx=True,
        sequential=True,
    )


async def _execute(workspace: Path, name: str, arguments: dict[str, Any]) -> ToolResult:
    try:
        return await asyncio.to_thread(execute, workspace, name, arguments)
    except Exception as exc:  # `execute` never raises by contract; a model must not crash us
        return ToolResult(ok=False, content=f"{name} failed: {type(exc).__name__}: {exc}")


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
