"""The offline model: deterministic, no network, a schema-valid answer for every role.

It lets the whole service run anywhere and is what the tests use. It is a pydantic-ai
`FunctionModel`, so a step runs the same agent on it as on a real model. Its default
answers follow the step's inputs (a first draft, then refinements that apply the
critique), and a script file can override any role's answer for any call: see
`OfflineScript`.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, RootModel, model_validator
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopworks.llm.base import ModelCall
from loopworks.llm.offline.answers import closing_line, default_answer, draft_files, qa_failed
from loopworks.schemas.roles import Role


class ScriptEntry(BaseModel):
    """One scripted answer: an `answer` object, or `raw` text (which may be invalid on
    purpose), optionally after `delay_ms`."""

    answer: dict[str, Any] | None = None
    raw: str | None = None
    delay_ms: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _bare_answer(cls, value: Any) -> Any:
        # A bare object is shorthand for {"answer": object}.
        if isinstance(value, dict) and not {"answer", "raw", "delay_ms"} & value.keys():
            return {"answer": value}
        if isinstance(value, str):
            return {"raw": value}
        return value


class OfflineScript(RootModel[dict[Role, dict[str, list[ScriptEntry]]]]):
    """Scripted answers by role and call: `{"critic": {"1": {...}, "*": {...}}}`.

    The key is the role's call number in the run (the workflow counts calls, so an
    activity retry gets the same entry and a new step the next one); `*` matches any call
    without its own entry. An entry may be a list, one answer per request of the call:
    `[invalid, valid]` answers invalidly, then repairs; the last answer is repeated.
    """

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        # YAML reads `1:` as an int; call numbers are looked up as strings. A single entry
        # is a list of one.
        if isinstance(value, dict):
            return {
                role: {str(k): v if isinstance(v, list) else [v] for k, v in (calls or {}).items()}
                for role, calls in value.items()
            }
        return value

    def entry(self, role: Role, call_index: int, attempt: int = 0) -> ScriptEntry | None:
        """The answer to the `attempt`-th request (from 0) of the role's call."""
        entries = self.root.get(role, {})
        answers = entries.get(str(call_index)) or entries.get("*")
        if not answers:
            return None
        return answers[min(attempt, len(answers) - 1)]

    @classmethod
    def load(cls, path: Path) -> OfflineScript:
        data = yaml.safe_load(path.read_text()) or {}
        return cls.model_validate(data)


# The workspace tools the offline agents write their draft and run QA's commands with
# (agent.tools).
WRITE_FILE_TOOL = "write_file"
RUN_COMMAND_TOOL = "run_command"


class OfflineModels:
    """A ModelSource whose model answers every role from the step's context."""

    # Strict tool input means nothing to a function that builds valid answers itself.
    strict_output = False

    def __init__(self, latency_ms: int = 0, script: OfflineScript | None = None) -> None:
        self.latency_ms = latency_ms
        self.script = script or OfflineScript({})

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> FunctionModel:
        return FunctionModel(functools.partial(self.respond, call), model_name="offline")

    async def respond(
        self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        """The next response of `call`: the forced answer tool's input for a structured
        role, `write_file` calls then a closing line for an agent (PRODUCE, REFINE). The
        QA verifier first runs the commands its answer cites in `evidence`, scripted or
        not; its default answer then turns to ISSUES when one of them failed."""
        attempt = sum(isinstance(m, ModelResponse) for m in messages)
        entry = self.script.entry(call.role, call.call_index, attempt)
        answer = (
            entry.answer
            if entry is not None and entry.answer is not None
            else default_answer(call.role, call.context)
        )
        if attempt == 0 or info.output_tools:
            await self._wait(entry)
        parts: list[ModelResponsePart]
        raw = entry.raw if entry is not None and entry.raw is not None else None
        pending = _evidence_to_run(call, answer, messages, info) if raw is None else []
        if info.output_tools and pending:
            # A verifier runs what it cites before it answers (docs/loop.md#qas-evidence).
            ids = f"toolu_offline_qa_{call.call_index}_{attempt}"
            parts = [
                ToolCallPart(RUN_COMMAND_TOOL, {"command": command}, tool_call_id=f"{ids}_{n}")
                for n, command in enumerate(pending, start=1)
            ]
        elif info.output_tools:
            tool = info.output_tools[0].name
            if call.role == Role.QA_VERIFIER and entry is None:
                answer = qa_failed(answer, _failed_commands(messages))
            parts = [ToolCallPart(tool, raw if raw is not None else answer)]
        elif raw is not None:
            parts = [TextPart(raw)]
        else:
            parts = _agent_turn(call, answer, _written(messages))
        return ModelResponse(parts=parts, model_name="offline")

    async def _wait(self, entry: ScriptEntry | None) -> None:
        delay = (entry.delay_ms if entry and entry.delay_ms else self.latency_ms) / 1000
        if delay:
            await asyncio.sleep(delay)


def _agent_turn(
    call: ModelCall, answer: dict[str, Any], written: set[str]
) -> list[ModelResponsePart]:
    """`write_file` for each file of the draft not written yet, else the closing line."""
    files = [f for f in draft_files(answer) if f["path"] not in written]
    if not files:
        return [TextPart(closing_line(answer))]
    return [
        ToolCallPart(
            WRITE_FILE_TOOL,
            {"path": file["path"], "content": file["content"]},
            tool_call_id=f"toolu_offline_{call.call_index}_{number}",
        )
        for number, file in enumerate(files, start=1)
    ]


def _evidence_to_run(
    call: ModelCall, answer: dict[str, Any], messages: list[ModelMessage], info: AgentInfo
) -> list[str]:
    """The commands a QA answer cites that this conversation has not run yet, when the
    command tool is offered."""
    if call.role != Role.QA_VERIFIER:
        return []
    if RUN_COMMAND_TOOL not in {tool.name for tool in info.function_tools}:
        return []
    cited = answer.get("evidence")
    if not isinstance(cited, list):
        return []
    ran = set(_commands(messages).values())
    return [c for c in dict.fromkeys(cited) if isinstance(c, str) and c not in ran]


def _commands(messages: list[ModelMessage]) -> dict[str, str]:
    """Each command the conversation ran, by its tool call id."""
    return {
        part.tool_call_id: str(part.args_as_dict().get("command"))
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.tool_name == RUN_COMMAND_TOOL
    }


def _failed_commands(messages: list[ModelMessage]) -> dict[str, str]:
    """The commands whose result came back failed (a non-zero exit), with that result."""
    commands = _commands(messages)
    return {
        commands[part.tool_call_id]: part.model_response_str(wrap_if_error=False)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
        and part.tool_call_id in commands
        and part.outcome != "success"
    }


def _written(messages: list[ModelMessage]) -> set[str]:
    """Paths the conversation's earlier turns wrote with `write_file`."""
    paths = set()
    for message in messages:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_name == WRITE_FILE_TOOL:
                    path = part.args_as_dict().get("path")
                    if isinstance(path, str):
                        paths.add(path)
    return paths
