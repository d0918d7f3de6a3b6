"""The agent loop of PRODUCE and REFINE: a model working in the run's workspace with tools.

The model answers a turn; every tool call it makes runs through `activities.tools` (whose
guard turns a denied call into an error result the model reads, never an exception); the
results go back as the next user message; until the model ends its turn without calling a
tool, or the turn limit is reached. Every message and tool call is a `TrajectoryRecord`
(seed 003's trajectory export: JSON lines tagged with the step and the iteration).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from activities.deps import heartbeating
from activities.llm.base import Conversation, LanguageModel, ToolUse
from activities.tools import ToolResult, execute
from schemas.run import TokenUsage

AgentStep = Literal["produce", "refine"]
RecordKind = Literal["system", "user", "assistant", "tool_call", "tool_result", "limit"]

# Texts in the trajectory are cut here: it records what happened, not every byte written.
RECORD_TEXT_CAP = 4000
# Tools whose successful call writes the file named by their `path` argument.
_WRITING_TOOLS = frozenset({"write_file", "edit_file"})


class TrajectoryRecord(BaseModel):
    """One line of a step's trajectory.

    `input` is what went to the model or a tool (a message's text, a tool's arguments);
    `output` what came back (the model's text, a tool's result); both are capped.
    """

    run_id: str
    step: AgentStep
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


def to_jsonl(records: list[TrajectoryRecord]) -> str:
    return "".join(record.model_dump_json() + "\n" for record in records)


def from_jsonl(text: str) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.model_validate_json(line) for line in text.splitlines() if line]


async def run_agent(
    model: LanguageModel,
    conversation: Conversation,
    workspace: Path,
    max_turns: int,
    step_label: AgentStep,
) -> AgentOutcome:
    """Converse until the model ends a turn without tool calls, or `max_turns` turns.

    Model errors (InvalidOutput, a provider's ApplicationError) propagate: the activity's
    retry starts the whole loop again from the same commit.
    """
    records: list[TrajectoryRecord] = []

    def record(turn: int, kind: RecordKind, **fields: Any) -> None:
        records.append(
            TrajectoryRecord(
                run_id=conversation.run_id,
                step=step_label,
                iteration=conversation.iteration,
                turn=turn,
                kind=kind,
                **fields,
            )
        )

    record(0, "system", input=_cap(conversation.system))
    for message in conversation.messages:
        kind: RecordKind = "assistant" if message.get("role") == "assistant" else "user"
        record(0, kind, input=_cap(_message_text(message)))

    messages = list(conversation.messages)
    usage = TokenUsage()
    written: dict[str, None] = {}  # ordered set
    final_text = ""
    async with heartbeating():
        for turn in range(1, max_turns + 1):
            # A snapshot: the conversation a model was sent stays as it was sent.
            sent = conversation.model_copy(update={"messages": list(messages)})
            reply = await model.converse(sent)
            usage = usage + reply.usage
            final_text = reply.text
            record(turn, "assistant", output=_cap(reply.text), stop_reason=reply.stop_reason)
            messages.append(reply.as_message())
            calls = reply.tool_uses
            if not calls:
                return AgentOutcome(final_text, turn, usage, records, list(written))
            results = []
            for call in calls:
                record(
                    turn,
                    "tool_call",
                    tool=call.name,
                    tool_use_id=call.id,
                    input=_capped(call.input),
                )
                result = await _run_tool(workspace, call)
                record(
                    turn,
                    "tool_result",
                    tool=call.name,
                    tool_use_id=call.id,
                    output=_cap(result.content),
                    ok=result.ok,
                )
                if (
                    result.ok
                    and call.name in _WRITING_TOOLS
                    and isinstance(call.input.get("path"), str)
                ):
                    written[call.input["path"]] = None
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": result.content,
                }
                if not result.ok:
                    block["is_error"] = True
                results.append(block)
            messages.append({"role": "user", "content": results})
    record(
        max_turns,
        "limit",
        output=f"stopped at the turn limit ({max_turns} turns) with tool results unanswered",
    )
    return AgentOutcome(final_text, max_turns, usage, records, list(written), limit_reached=True)


async def _run_tool(workspace: Path, call: ToolUse) -> ToolResult:
    """One tool call, off the event loop (commands block) so heartbeats keep going."""
    try:
        return await asyncio.to_thread(execute, workspace, call.name, call.input)
    except Exception as exc:  # `execute` never raises by contract; a model must not crash us
        return ToolResult(ok=False, content=f"{call.name} failed: {type(exc).__name__}: {exc}")


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") if isinstance(b, dict) and b.get("type") == "text" else json.dumps(b)
            for b in content
        )
    return json.dumps(content, default=str)


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
