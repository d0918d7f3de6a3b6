"""What the MCP tools answer (docs/mcp.md): compact views of runs and graphs, built from
the API's models by plain functions, so a model reads a few fields instead of the whole
run state, and every view names its gate and the tool that moves it on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from loopworks.api.models import RunSummary
from loopworks.cli.client import CliError
from loopworks.schemas.events import Event
from loopworks.schemas.graph import GraphState, GraphStatus, TaskState
from loopworks.schemas.proof import RunProof
from loopworks.schemas.run import Budget, RunState, RunStatus, TokenUsage
from loopworks.schemas.tasks import TaskStatus


@contextmanager
def api_errors() -> Iterator[None]:
    """The API's message (or why it could not be reached) as the tool's error: the model
    reads `HTTP 409: <the API's sentence>` and can act on it."""
    try:
        yield
    except CliError as err:
        raise ToolError(str(err)) from err


class Gate(StrEnum):
    """Where a run or graph waits for a person; the tool named beside each moves it on."""

    APPROVAL = "approval"
    BLOCK = "block"
    PAUSE = "pause"


# What each gate means and the tool that releases it, for a run and for a graph. The
# tools' descriptions quote these (tests/unit/test_mcp_contracts.py checks the names).
RUN_GATE_TOOLS: dict[Gate, str] = {
    Gate.APPROVAL: "approve_run",
    Gate.BLOCK: "clear_block",
    Gate.PAUSE: "resume_run",
}
GRAPH_GATE_TOOLS: dict[Gate, str] = {
    Gate.APPROVAL: "approve_graph",
    Gate.BLOCK: "clear_graph_block",
    Gate.PAUSE: "resume_graph",
}
GATE_MEANINGS: dict[Gate, str] = {
    Gate.APPROVAL: "interactive mode: the drafted rules wait for a person's approval "
    "before any work starts",
    Gate.BLOCK: "the custodiet (the run's auditor) blocked the work; a person must read "
    "the reason and clear the block with a note",
    Gate.PAUSE: "a person paused it; it waits until resumed",
}
RUN_GATES: dict[RunStatus, Gate] = {
    RunStatus.AWAITING_APPROVAL: Gate.APPROVAL,
    RunStatus.BLOCKED: Gate.BLOCK,
    RunStatus.PAUSED: Gate.PAUSE,
}


class Spent(BaseModel):
    """What model calls used so far."""

    total_tokens: int = Field(description="input + output tokens")
    cost_usd: float = Field(description="US dollars")
    calls: int = Field(description="model calls")


def spent(usage: TokenUsage) -> Spent:
    return Spent(total_tokens=usage.total_tokens, cost_usd=usage.cost_usd, calls=usage.calls)


class ProofView(BaseModel):
    """How the run's work is proven, and what the proof showed."""

    source: str = Field(
        description="`request` (its `verify`), `repository` (`.loops/verify`), `detected` "
        "(its test setup) or `none`"
    )
    commands: list[str]
    status: str = Field(
        description="`pending` (not run yet), `passed`, `failed`, `not_needed` (only the "
        "artifact changed), `unverified` (code changed and nothing proves it)"
    )
    allow_unverified: bool
    results: list[str] = Field(description="each command's latest result, one line each")


class RunView(BaseModel):
    """A run, compact."""

    run_id: str
    alias: str
    status: RunStatus
    gate: Gate | None = Field(description="where it waits for a person; null: it does not")
    next_action: str = Field(description="what moves it on, naming the tool")
    task: str
    template: str | None
    iteration: int
    max_iterations: int
    phase: str
    current_step: str
    last_score: float
    stop_reason: str | None
    message: str = Field(description="the block's reason, or why it stopped")
    branch: str
    origin: str
    usage: Spent = Field(description="what the run spent so far")
    budget: Budget | None = Field(
        description="what it may spend; reaching a limit stops it (`budget_exhausted`). "
        "null: not known (a run recorded before its state carried it)"
    )
    proof: ProofView | None = Field(
        default=None,
        description="how its work is proven; null: a run recorded before runs had a proof",
    )


class RunRow(BaseModel):
    run_id: str
    alias: str | None
    status: RunStatus
    gate: Gate | None
    iteration: int | None
    last_score: float | None
    started_at: str
    started_by: str | None


class TaskView(BaseModel):
    task_id: str
    title: str
    status: TaskStatus
    attempts: int
    run_id: str | None = Field(description="its latest loop's run id")
    gate: Gate | None = Field(description="`block` when that loop waits at a custodiet block")


class GraphView(BaseModel):
    graph_id: str
    goal: str
    status: GraphStatus
    gate: Gate | None
    next_action: str
    integration_branch: str
    message: str
    usage: Spent = Field(description="what its task loops spent, all together")
    total_budget: Budget | None = Field(
        description="what the whole graph may spend; once spent it starts no more tasks"
    )
    tasks: list[TaskView]


class EventsPage(BaseModel):
    run_id: str
    events: list[dict[str, Any]]
    next_cursor: int = Field(description="pass as `after` to read the events after these")
    more: bool = Field(description="more events are already there after next_cursor")


class ArtifactView(BaseModel):
    run_id: str
    run_status: str
    final: bool = Field(description="false: the run is live and this is its latest draft")
    commit: str | None
    markdown: str
    truncated: bool


def run_next_action(state: RunState) -> str:
    gate = RUN_GATES.get(state.status)
    if gate is not None:
        return f"waits for {RUN_GATE_TOOLS[gate]}: {GATE_MEANINGS[gate]}"
    if state.status.is_terminal:
        return "nothing: the run has ended; read it with run_artifact and run_events"
    return "nothing: it is working; read run_status again later"


def run_view(state: RunState) -> RunView:
    message = state.block.reason if state.status == RunStatus.BLOCKED else state.stop.message
    return RunView(
        run_id=state.run_id,
        alias=state.alias,
        status=state.status,
        gate=RUN_GATES.get(state.status),
        next_action=run_next_action(state),
        task=state.task,
        template=state.template,
        iteration=state.iteration,
        max_iterations=state.max_iterations,
        phase=state.phase.value,
        current_step=state.current_step.value,
        last_score=state.last_score,
        stop_reason=state.stop_reason.value if state.stop_reason else None,
        message=message,
        branch=state.branch,
        origin=state.origin,
        usage=spent(state.usage),
        budget=state.budget,
        proof=proof_view(state.proof),
    )


def proof_view(proof: RunProof | None) -> ProofView | None:
    if proof is None:
        return None
    results = [
        f"{'passed' if r.passed else 'failed'}: {r.command}"
        + ("" if r.exit_code is None else f" (exit code {r.exit_code})")
        for r in proof.results
    ]
    return ProofView(
        source=proof.source.value,
        commands=proof.commands,
        status=proof.status.value,
        allow_unverified=proof.allow_unverified,
        results=results,
    )


def run_row(summary: RunSummary) -> RunRow:
    return RunRow(
        run_id=summary.run_id,
        alias=summary.alias,
        status=summary.status,
        gate=RUN_GATES.get(summary.status),
        iteration=summary.iteration,
        last_score=summary.last_score,
        started_at=summary.started_at.isoformat(),
        started_by=summary.started_by,
    )


def task_view(task: TaskState, blocked_runs: set[str]) -> TaskView:
    latest = task.run_ids[-1] if task.run_ids else None
    return TaskView(
        task_id=task.task.id,
        title=task.task.title,
        status=task.status,
        attempts=task.attempts,
        run_id=latest,
        gate=Gate.BLOCK if latest in blocked_runs else None,
    )


def graph_view(state: GraphState, blocked_runs: set[str]) -> GraphView:
    """`blocked_runs`: the task loops found waiting at a custodiet block."""
    tasks = [task_view(task, blocked_runs) for task in state.tasks]
    gate: Gate | None = {
        GraphStatus.AWAITING_APPROVAL: Gate.APPROVAL,
        GraphStatus.PAUSED: Gate.PAUSE,
    }.get(state.status)
    blocked = [task.task_id for task in tasks if task.gate == Gate.BLOCK]
    if gate is None and blocked and not state.status.is_terminal:
        gate = Gate.BLOCK
    if gate == Gate.BLOCK:
        next_action = (
            f"waits for {GRAPH_GATE_TOOLS[gate]} on task {', '.join(blocked)}: "
            f"{GATE_MEANINGS[gate]}"
        )
    elif gate is not None:
        next_action = f"waits for {GRAPH_GATE_TOOLS[gate]}: {GATE_MEANINGS[gate]}"
    elif state.status.is_terminal:
        next_action = "nothing: the graph has ended"
    else:
        next_action = "nothing: it is working; read graph_status again later"
    return GraphView(
        graph_id=state.graph_id,
        goal=state.goal,
        status=state.status,
        gate=gate,
        next_action=next_action,
        integration_branch=state.integration_branch,
        message=state.message,
        usage=spent(state.usage),
        total_budget=state.total_budget,
        tasks=tasks,
    )


def events_page(run_id: str, events: list[Event], after: int, limit: int) -> EventsPage:
    shown = events[:limit]
    cursor = shown[-1].seq if shown else after
    return EventsPage(
        run_id=run_id,
        events=[event.model_dump(mode="json") for event in shown],
        next_cursor=cursor,
        more=len(events) > len(shown),
    )
