"""The agent loop of PRODUCE, REFINE and the skill generator: a pydantic-ai `Agent` working
in the run's workspace with tools.

The agent is offered the workspace tools (`loopworks.agent.tools`) and runs until the
model answers without a tool call, or the turn limit (`UsageLimits`: the tools of the last
turn still run). A call the guard refuses comes back to the model as a failed tool result
it can adapt to, never as an exception. An answer given before the deliverable
(`artifact.md`) exists is sent back once with a reminder, the nudge (the output
validator's `ModelRetry`); ending without it again is invalid output. The conversation
(`all_messages()`) becomes the step's trajectory (`loopworks.agent.trajectory`).

A gate (`ToolGate`: the custodiet's audit during the work, activities/audit.py) may be
asked before each tool call, with what the tools have done so far; a call it refuses is a
failed result, and once it refuses for good the agent stops after that turn's calls, none
of which runs.

The QA verifier is the same loop with the tools that only read (`READ_ONLY_TOOLS`: no
tool of its set writes a file; its commands run in a checkout of their own, thrown away),
ending not with prose but with the forced answer tool (`run_answering_agent`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ModelRequestNode,
    ModelRetry,
    RunContext,
    Tool,
    ToolFailed,
)
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.run import AgentRun
from pydantic_ai.usage import UsageLimits

from loopworks.agent.actions import RUN_COMMAND, ended
from loopworks.agent.tools import TOOLS, ToolResult, ToolSpec, execute
from loopworks.agent.trajectory import (
    AgentStep,
    TrajectoryRecord,
    cap,
    capped,
    record,
    text_of,
    trajectory,
)
from loopworks.checks.output import stoppable
from loopworks.checks.redaction import redacted
from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource, usage_of, user_prompt
from loopworks.llm.budget import BudgetGuard, BudgetSpent, Meter
from loopworks.llm.errors import model_errors
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.llm.structured import (
    REPAIR_ATTEMPTS,
    answer_capabilities,
    answer_output,
    not_answered,
    repairs_in,
)
from loopworks.schemas.actions import CommandRun
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workspace import files

# Tools whose successful call writes the file named by their `path` argument.
_WRITING_TOOLS = frozenset({"write_file", "edit_file"})
WRITE_FILE = TOOLS["write_file"].name
# What a verifier may use: reading and running, never writing a file.
READ_ONLY_TOOLS = ("read_file", "list_files", "search", "run_command")
Answer = TypeVar("Answer", bound=BaseModel)
Output = TypeVar("Output")
# An answer without the deliverable is sent back this many times before it is invalid.
NUDGES = 1
NUDGE = (
    f"You ended your turn without writing `{ARTIFACT_PATH}`. The step's deliverable must "
    f"be in `{ARTIFACT_PATH}` at the workspace root: write it with `{WRITE_FILE}`, then "
    "end your turn with a short summary and no tool call."
)


class ToolGate(Protocol):
    """What may hold an agent's tool calls back, asked before each one."""

    async def before(
        self, tool: str, arguments: dict[str, Any], done: Sequence[TrajectoryRecord]
    ) -> str | None:
        """None lets the call run; a text refuses it, and the model reads that text.
        `done`: each call the tools ran (or refused) in this step so far, with its result."""
        ...

    @property
    def closed(self) -> bool:
        """Whether it refuses every call from now on: then the agent stops."""
        ...


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
    # The gate closed: the agent was stopped, its last turn's calls refused.
    stopped_by_gate: bool = False
    # Nothing was left of the step's budget for its next request (or an answer was cut at
    # what was left): why. The conversation so far is the outcome.
    budget_exhausted: str | None = None


async def run_agent(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    workspace: Path,
    max_turns: int,
    step_label: AgentStep,
    deliverable: str | None = ARTIFACT_PATH,
    *,
    graph_task: bool = False,
    graph_base: str | None = None,
    gate: ToolGate | None = None,
    meter: Meter | None = None,
) -> AgentOutcome:
    """Run the role's agent over `workspace` until it answers, or for `max_turns` turns
    (a task graph's loop's, with `graph_task`: its tools refuse the graph's records, and
    put back as `graph_base` has them what a command changed of them), or until `gate`
    closes, or until `meter` has too little left for the next request
    (`loopworks.llm.budget`; the gate's own model calls may find that too).

    Model errors (a provider's ApplicationError, InvalidOutput) propagate: the activity's
    retry starts the whole loop again from the same commit. Without a `deliverable` (the
    skill generator: its files are judged by the skill reflector) there is no nudge.
    """
    deps = _Workspace(
        call.role,
        workspace,
        deliverable,
        graph_task=graph_task,
        graph_base=graph_base,
        gate=gate,
        call=call,
        step=step_label,
    )
    refused: list[ModelMessage] = []
    guard = BudgetGuard(meter, call.model) if meter is not None else None
    spent: BudgetSpent | None = None
    with model_errors(call.role):
        try:
            async with _started(
                _agent(), source, call, instructions, deps, max_turns, NUDGES, guard
            ) as agent_run:
                async for node in agent_run:
                    if gate is not None and gate.closed and isinstance(node, ModelRequestNode):
                        # The refused calls' results, which no model request will carry.
                        refused.append(node.request)
                        break
        except UsageLimitExceeded:
            pass  # the turn limit: the conversation so far is the outcome
        except BudgetSpent as exc:
            spent = exc  # the budget: so is it
        except UnexpectedModelBehavior as exc:
            if deps.nudged and not _delivered(workspace, deliverable):
                raise InvalidOutput(
                    call.role, f"it ended without writing {deliverable}, even when reminded"
                ) from exc
            raise
    cut = [spent.cut] if spent is not None and spent.cut is not None else []
    messages = [*agent_run.all_messages(), *cut, *refused]
    answer = agent_run.result.output if agent_run.result is not None else None
    records = trajectory(messages, call, instructions, step_label)
    turns = sum(isinstance(m, ModelResponse) for m in messages)
    if refused:
        records.append(
            record(call, step_label, turns, "blocked", output=deps.refusal or "tools refused")
        )
    elif spent is not None:
        records.append(record(call, step_label, turns, "limit", output=spent.reason))
    elif answer is None:
        records.append(
            record(
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
        # Every request's tokens, whether the run ended well or not (one cut short too).
        usage=guard.used if guard is not None else usage_of(agent_run.usage),
        records=records,
        files_written=list(deps.written),
        limit_reached=answer is None and not refused and spent is None,
        repairs=[r.output or "" for r in records if r.kind == "retry"],
        stopped_by_gate=bool(refused),
        budget_exhausted=spent.reason if spent is not None else None,
    )


def _started(
    agent: Agent[_Workspace, Output],
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    deps: _Workspace,
    max_turns: int,
    output_retries: int,
    guard: BudgetGuard | None,
) -> AbstractAsyncContextManager[AgentRun[_Workspace, Output]]:
    """One run of `agent` for `call`, at most `max_turns` model requests, each held to the
    step's budget by `guard`; bad tool calls go back to the model (the turn limit bounds
    how often), a bad final answer at most `output_retries` times."""
    return agent.iter(
        user_prompt(call.context),
        model=source.model(call),
        instructions=instructions,
        deps=deps,
        usage_limits=UsageLimits(request_limit=max_turns),
        retries={"tools": max_turns, "output": output_retries},
        capabilities=[guard] if guard is not None else [],
    )


@dataclass
class _Workspace:
    """A run's own side of the shared agent: where its tools work, what they wrote, and
    the file its answer must have written."""

    role: Role
    root: Path
    deliverable: str | None
    graph_task: bool = False
    graph_base: str | None = None
    written: dict[str, None] = field(default_factory=dict)  # an ordered set
    nudged: bool = False
    # The gate asked before each call, with `done`: the calls the tools ran (or refused)
    # in this step, each with its result, recorded as the trajectory records them.
    gate: ToolGate | None = None
    call: ModelCall | None = None
    step: AgentStep = "produce"
    done: list[TrajectoryRecord] = field(default_factory=list)
    refusal: str = ""
    # Every command the command tool was asked to run, whole, with how it ended: the
    # trajectory caps a call's arguments, and a verifier's evidence is checked against
    # the commands exactly as they ran.
    commands: list[CommandRun] = field(default_factory=list)


# Building the agent makes every tool's schema; it holds nothing of a run (model,
# instructions, workspace and turn limit come with each run), so one serves all.
@functools.cache
def _agent() -> Agent[_Workspace, str]:
    agent: Agent[_Workspace, str] = Agent(
        deps_type=_Workspace,
        tools=[_tool(spec) for spec in TOOLS.values()],
        output_type=str,
    )
    agent.output_validator(_deliverable_written)
    return agent


async def _deliverable_written(ctx: RunContext[_Workspace], text: str) -> str:
    """The answer, once the deliverable exists; else the nudge. A refusal is not sent
    back: asked again, a model refuses again."""
    response = ctx.messages[-1] if ctx.messages else None
    if isinstance(response, ModelResponse) and response.finish_reason == "content_filter":
        raise InvalidOutput(ctx.deps.role, f"the model refused to go on: {text.strip()[:500]}")
    if _delivered(ctx.deps.root, ctx.deps.deliverable):
        return text
    ctx.deps.nudged = True
    raise ModelRetry(NUDGE)


def _tool(spec: ToolSpec[Any]) -> Tool[_Workspace]:
    """A workspace tool for the agent: the guarded `execute`, off the event loop (commands
    block, and heartbeats must go on); a refused or failed call is a failed tool result."""

    async def run(ctx: RunContext[_Workspace], **arguments: Any) -> str:
        deps = ctx.deps
        refusal = None
        if deps.gate is not None:
            refusal = await deps.gate.before(spec.name, arguments, list(deps.done))
        if refusal is not None:
            deps.refusal = refusal
            result = ToolResult(ok=False, content=refusal)
        else:
            result = await _execute(
                deps.root, spec.name, arguments, deps.graph_task, deps.graph_base
            )
        _done(ctx, spec.name, arguments, result)
        command = arguments.get("command")
        if spec.name == RUN_COMMAND and isinstance(command, str):
            # Redacted as the trajectory redacts the call's arguments: this text leaves the
            # worker in the step's result.
            deps.commands.append(ended(deps.step, redacted(command), result.content))
        if not result.ok:
            raise ToolFailed(result.content)
        path = arguments.get("path")
        if spec.name in _WRITING_TOOLS and isinstance(path, str):
            deps.written[path] = None
        return result.content

    # One call at a time, in the order the model made them: two edits of a file must not race.
    return Tool.from_schema(
        run,
        name=spec.name,
        description=spec.description,
        json_schema=spec.input_schema,
        takes_ctx=True,
        sequential=True,
    )


def _done(
    ctx: RunContext[_Workspace], tool: str, arguments: dict[str, Any], result: ToolResult
) -> None:
    """Keep the call and its result for the gate, as the trajectory will record them."""
    deps = ctx.deps
    if deps.gate is None or deps.call is None:
        return
    uid, turn = ctx.tool_call_id, ctx.run_step
    called = capped(arguments)
    deps.done.append(
        record(deps.call, deps.step, turn, "tool_call", tool=tool, tool_use_id=uid, input=called)
    )
    deps.done.append(
        record(
            deps.call,
            deps.step,
            turn,
            "tool_result",
            tool=tool,
            tool_use_id=uid,
            output=cap(result.content),
            ok=result.ok,
        )
    )


async def _execute(
    workspace: Path,
    name: str,
    arguments: dict[str, Any],
    graph_task: bool = False,
    graph_base: str | None = None,
) -> ToolResult:
    """A tool's result, redacted (`checks.redaction`): what a tool read (a file holding a
    key, a URL with a token) goes back to the model, and into the trajectory, without the
    worker's secrets."""
    try:
        result = await stoppable(
            workspace,
            functools.partial(execute, graph_task=graph_task, graph_base=graph_base),
            workspace,
            name,
            arguments,
        )
    except Exception as exc:  # `execute` never raises by contract; a model must not crash us
        result = ToolResult(ok=False, content=f"{name} failed: {type(exc).__name__}: {exc}")
    return redacted(result)


def _last_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            text = text_of(message)
            if text.strip():
                return text.strip()
    return ""


def _delivered(root: Path, deliverable: str | None) -> bool:
    """Whether the deliverable is a file in the workspace (no deliverable: always). A path
    the worker refuses (a link out of it) counts as there: the step's own read of it
    fails, saying why."""
    if deliverable is None:
        return True
    try:
        return files.is_file(root, deliverable)
    except files.UnsafePath:
        return True


@dataclass
class AnsweredOutcome(Generic[Answer]):
    """A verifier's validated answer, and what it took to reach it."""

    answer: Answer
    turns: int
    usage: TokenUsage
    records: list[TrajectoryRecord]
    repairs: list[str] = field(default_factory=list)
    # The commands it ran, in order, each whole and redacted, with how it ended.
    commands: list[CommandRun] = field(default_factory=list)


async def run_answering_agent(
    source: ModelSource,
    call: ModelCall,
    instructions: str,
    workspace: Path,
    max_turns: int,
    step_label: AgentStep,
    answer_type: type[Answer],
    meter: Meter | None = None,
) -> AnsweredOutcome[Answer]:
    """Run the role's read-only agent over `workspace` until it answers through the
    forced answer tool (`ANSWER_TOOL`), for at most `max_turns` turns.

    The answer is a single-shot call's (`llm.structured`): the same forced tool, one
    repair with its errors (docs/loop.md#invalid-answers), a refusal not asked again; a
    second invalid answer, or no answer within the turns, is InvalidOutput, then
    phase_error. Each request is held to what `meter` has left: one it refuses, or cuts,
    raises `BudgetSpent`.
    """
    deps = _Workspace(call.role, workspace, None, step=step_label)
    guard = BudgetGuard(meter, call.model) if meter is not None else None
    with model_errors(call.role):
        try:
            async with _started(
                _answering_agent(answer_type, call.role),
                source,
                call,
                instructions,
                deps,
                max_turns,
                REPAIR_ATTEMPTS,
                guard,
            ) as agent_run:
                async for _ in agent_run:
                    pass
        except UsageLimitExceeded as exc:
            raise InvalidOutput(
                call.role, f"it did not answer with `{ANSWER_TOOL}` within {max_turns} turns"
            ) from exc
        except UnexpectedModelBehavior as exc:
            raise not_answered(call.role, agent_run.all_messages(), exc) from exc
    messages = agent_run.all_messages()
    if agent_run.result is None:  # pragma: no cover - iter ends with a result or raises
        raise InvalidOutput(call.role, "it ended without an answer")
    records = trajectory(messages, call, instructions, step_label)
    return AnsweredOutcome(
        answer=agent_run.result.output,
        turns=sum(isinstance(m, ModelResponse) for m in messages),
        usage=usage_of(agent_run.usage),
        records=records,
        repairs=repairs_in(messages),
        commands=list(deps.commands),
    )


# One agent per answer type and role, as `_agent`: the tools' schemas and the answer
# tool's are built once.
@functools.cache
def _answering_agent(answer_type: type[Answer], role: Role) -> Agent[_Workspace, Answer]:
    agent: Agent[_Workspace, Answer] = Agent(
        deps_type=_Workspace,
        tools=[_tool(TOOLS[name]) for name in READ_ONLY_TOOLS],
        output_type=answer_output(answer_type, role, False),
        capabilities=answer_capabilities(),
    )
    return agent
