"""The task-graph tools of `loops mcp` (docs/mcp.md): start, read, approve, steer."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.types import ToolAnnotations
from pydantic import Field

from loopworks.cli.client import ApiClient
from loopworks.cli.graphs import GraphApi
from loopworks.cli.mcp.facts import (
    BUDGETS,
    GRAPH_ID,
    GRAPH_STATUS_TOOL,
    ITERATIONS,
    MODES,
    NOTE,
    BaseBranch,
    Repo,
    notify_description,
)
from loopworks.cli.mcp.tools import Tools
from loopworks.cli.mcp.views import GraphView, RunView, api_errors, graph_view, run_view
from loopworks.schemas.graph import GraphState, RequestedTask
from loopworks.schemas.notify import NotifyRequest
from loopworks.schemas.run import Budget, Mode, RunStatus
from loopworks.schemas.tasks import TASK_ID_PATTERN, TaskStatus

GraphId = Annotated[str, Field(min_length=1, description=GRAPH_ID)]


def blocked_loops(client: ApiClient, state: GraphState) -> set[str]:
    """The in-progress tasks' latest loops that wait at a custodiet block (the graph's
    own state does not say; at most max_parallel loops are asked)."""
    blocked: set[str] = set()
    for task in state.tasks:
        if task.status != TaskStatus.IN_PROGRESS or not task.run_ids:
            continue
        if client.run_state(task.run_ids[-1]).status == RunStatus.BLOCKED:
            blocked.add(task.run_ids[-1])
    return blocked


def add_graph_tools(
    tools: Tools,
    client: ApiClient,
    read: ToolAnnotations,
    change: ToolAnnotations,
    ending: ToolAnnotations,
) -> None:
    graphs = GraphApi(client)

    def graph(state: GraphState) -> GraphView:
        return graph_view(state, blocked_loops(client, state))

    @tools.tool(annotations=change)
    def start_graph(
        goal: Annotated[
            str,
            Field(min_length=1, max_length=20_000, description="What the graph should achieve."),
        ],
        repo: Repo = None,
        base_branch: BaseBranch = None,
        mode: Annotated[
            Mode, Field(description=MODES.format(kind="graph", tool="approve_graph"))
        ] = Mode.AUTO,
        max_parallel: Annotated[
            int, Field(ge=1, le=10, description="At most this many task loops at once.")
        ] = 3,
        max_iterations: Annotated[
            int | None, Field(ge=1, le=20, description=ITERATIONS["graph"])
        ] = None,
        notify: Annotated[
            NotifyRequest | None, Field(description=notify_description("graph"))
        ] = None,
        budget: Annotated[Budget | None, Field(description=BUDGETS["loop"])] = None,
        total_budget: Annotated[Budget | None, Field(description=BUDGETS["graph"])] = None,
    ) -> GraphView:
        """Start a task graph: the goal is split into atomic tasks (ids `T-001`, `T-002`,
        …), each run as a loop of its own in dependency order, merged onto one
        integration branch. Answers its graph_id; read graph_status until it ends."""
        body: dict[str, Any] = {
            "goal": goal,
            "mode": mode.value,
            "max_parallel": max_parallel,
        }
        optional = {"repo": repo, "base_branch": base_branch, "max_iterations": max_iterations}
        body.update({name: value for name, value in optional.items() if value is not None})
        if notify is not None:
            body["notify"] = notify.model_dump(mode="json")
        limits = {"budget": budget, "total_budget": total_budget}
        for name, limit in limits.items():
            if limit is not None:
                body[name] = limit.model_dump(mode="json", exclude_none=True)
        with api_errors():
            return graph(graphs.state(graphs.create(body).graph_id))

    @tools.tool(annotations=read, description=GRAPH_STATUS_TOOL)
    def graph_status(graph_id: GraphId) -> GraphView:
        with api_errors():
            return graph(graphs.state(graph_id))

    @tools.tool(annotations=change)
    def approve_graph(
        graph_id: GraphId,
        tasks: Annotated[
            list[RequestedTask] | None,
            Field(
                description="An edited task list, replacing the planned one; a field a task "
                "does not have is refused. Omitted: as planned (graph_status lists them)."
            ),
        ] = None,
        note: Annotated[str | None, Field(max_length=2000, description=NOTE)] = None,
    ) -> GraphView:
        """Approve a graph waiting at gate `approval` (status `awaiting_approval`): its
        tasks start. Refused (HTTP 409) in any other status."""
        body: dict[str, Any] = {}
        if tasks is not None:
            body["tasks"] = [item.model_dump(mode="json") for item in tasks]
        if note:
            body["note"] = note
        with api_errors():
            return graph(graphs.message(graph_id, "approve", body))

    @tools.tool(annotations=change)
    def clear_graph_block(
        graph_id: GraphId,
        task_id: Annotated[
            str,
            Field(
                pattern=TASK_ID_PATTERN,
                description="The task whose loop waits at gate `block` (`T-001`; graph_status "
                "marks it).",
            ),
        ],
        note: Annotated[str, Field(min_length=1, max_length=5000, description=NOTE)],
    ) -> RunView:
        """Release the custodiet block of a graph task's loop; answers that loop's status.
        The same as clear_block on the loop's run_id."""
        with api_errors():
            return run_view(graphs.clear_block(graph_id, task_id, note))

    @tools.tool(annotations=change)
    def pause_graph(graph_id: GraphId) -> GraphView:
        """Pause a graph: no new task starts (running task loops go on); it waits at gate
        `pause` until resume_graph."""
        with api_errors():
            return graph(graphs.message(graph_id, "pause"))

    @tools.tool(annotations=change)
    def resume_graph(graph_id: GraphId) -> GraphView:
        """Resume a graph waiting at gate `pause` (status `paused`): new tasks start
        again."""
        with api_errors():
            return graph(graphs.message(graph_id, "resume"))

    @tools.tool(annotations=ending)
    def stop_graph(
        graph_id: GraphId,
        reason: Annotated[
            str | None, Field(max_length=2000, description="Recorded as the stop message.")
        ] = None,
    ) -> GraphView:
        """Stop a graph for good: every running task loop is stopped (each still pushes
        what it has) and no task starts any more."""
        with api_errors():
            return graph(graphs.message(graph_id, "stop", {"reason": reason} if reason else {}))
