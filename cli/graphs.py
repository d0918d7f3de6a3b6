"""`loops graph ...`: start a task graph, watch its tasks, read its ledger, steer it.

The same shape as `commands`: one function per command, calling the API (`/graphs`)
through `ApiClient`, parsing its answers with the API's models (`GraphState`,
`GraphCreated`, `GraphListed`, `LedgerLine`) and printing with `graph_render`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import TypeAdapter, ValidationError
from rich.live import Live

from loopworks.api.models import GraphCreated, GraphListed
from loopworks.cli import confirm
from loopworks.cli.client import ApiClient, ApiError, CliError, Unreachable, parse
from loopworks.cli.commands import (
    Context,
    budget_for_api,
    notify_for_api,
    print_listing,
    read_document,
    repo_for_api,
)
from loopworks.cli.graph_render import (
    changes,
    graph_line,
    graph_notes,
    graph_view,
    graphs_table,
    ledger_table,
)
from loopworks.cli.render import status_line
from loopworks.schemas.graph import GraphState, GraphStatus
from loopworks.schemas.run import RunState
from loopworks.schemas.tasks import Task, ledger_lines

# `status --follow` reads the graph this often: its tasks change in minutes, not seconds.
POLL_SECONDS = 1.0
# Polls in a row that may fail (API restarting, no worker answering the query) before
# following gives up; a 4xx ends it at once.
MAX_POLL_FAILURES = 10

GRAPH_STATE: TypeAdapter[GraphState] = TypeAdapter(GraphState)
GRAPHS: TypeAdapter[list[GraphListed]] = TypeAdapter(list[GraphListed])
GRAPH_CREATED: TypeAdapter[GraphCreated] = TypeAdapter(GraphCreated)
RUN_STATE: TypeAdapter[RunState] = TypeAdapter(RunState)
TASKS: TypeAdapter[list[Task]] = TypeAdapter(list[Task])


def graph_path(graph_id: str, *rest: str) -> str:
    return "/".join(["/graphs", quote(graph_id, safe=""), *rest])


class GraphApi:
    """The `/graphs` routes, answered as the API's models."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def create(self, body: dict[str, Any]) -> GraphCreated:
        return parse(GRAPH_CREATED, self.client.json("POST", "/graphs", body=body), "new graph")

    def state(self, graph_id: str) -> GraphState:
        return parse(GRAPH_STATE, self.client.json("GET", graph_path(graph_id)), graph_id)

    def listed(self, limit: int) -> list[GraphListed]:
        answer = self.client.json("GET", "/graphs", params={"limit": limit})
        return parse(GRAPHS, answer, "the list of graphs")

    def ledger(self, graph_id: str) -> str:
        path = graph_path(graph_id, "ledger")
        return self.client.request("GET", path, headers={"Accept": "application/x-ndjson"}).text

    def message(self, graph_id: str, action: str, body: Any = None) -> GraphState:
        """stop, pause, resume, approve: each answers the graph's state."""
        answer = self.client.json("POST", graph_path(graph_id, action), body=body)
        return parse(GRAPH_STATE, answer, f"{action} of graph {graph_id}")

    def clear_block(self, graph_id: str, task: str, note: str) -> RunState:
        """Answers the state of the task's loop, whose block was released."""
        body = {"task": task, "note": note}
        answer = self.client.json("POST", graph_path(graph_id, "clear-block"), body=body)
        return parse(RUN_STATE, answer, f"clear-block of {task} in graph {graph_id}")


def load_tasks(path: Path) -> list[Any]:
    """A tasks file: a JSON or YAML list of tasks (docs/graphs.md#tasks). The API validates
    them (ids, requirements, cycles, verification commands) and names every problem."""
    data = read_document(path)
    if not isinstance(data, list) or not data:
        raise CliError(f"{path} must hold a list of tasks (id, title, description, ...)")
    return data


# --- following ------------------------------------------------------------------------


def _poll(api: GraphApi, graph_id: str, failures: int) -> GraphState | None:
    """The graph's state, or None after a failure worth another try."""
    try:
        return api.state(graph_id)
    except (Unreachable, ApiError) as err:
        # 5xx: the API or Temporal restarting, or no worker answering the status query.
        if isinstance(err, ApiError) and err.status_code < 500:
            raise
        if failures >= MAX_POLL_FAILURES:
            raise CliError(f"gave up following graph {graph_id}: {err}") from err
        return None


def follow(ctx: Context, api: GraphApi, graph_id: str, json_output: bool = False) -> int:
    """Poll the graph until its status is terminal: exit 0 when it completed, else 1.

    On a terminal the tree is redrawn in place (rich's Live) with each change printed
    above it; otherwise the tree is printed at the start and the end with one line per
    change between, so logs and tests read the same every time. `--json` prints only
    the final state.
    """
    console = ctx.console
    state = api.state(graph_id)
    live: Live | None = None
    if json_output:
        pass
    elif console.is_terminal and not state.status.is_terminal:
        live = Live(graph_view(state), console=console, auto_refresh=False)
        live.start(refresh=True)
    else:
        console.print(graph_view(state))
    # Off a terminal the tree is printed again at the end, unless it has not changed.
    print_at_end = not (json_output or live is not None or state.status.is_terminal)
    failures = 0
    try:
        while not state.status.is_terminal:
            time.sleep(POLL_SECONDS)
            polled = _poll(api, graph_id, failures)
            if polled is None:
                failures += 1
                continue
            failures = 0
            if not json_output:
                for line in changes(state, polled):
                    console.print(line)
            state = polled
            if live is not None:
                live.update(graph_view(state), refresh=True)
    finally:
        if live is not None:
            live.stop()  # not transient: the final tree stays on the screen
    if json_output:
        ctx.print(state.model_dump_json(indent=2))
    elif print_at_end:
        console.print(graph_view(state))
    return 0 if state.status == GraphStatus.COMPLETED else 1


def _print_state(ctx: Context, state: GraphState) -> None:
    ctx.print(graph_line(state))
    for note in graph_notes(state):
        ctx.print(note)


# --- commands -------------------------------------------------------------------------


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"goal": args.goal}
    if notify := notify_for_api(args.notify, args.notify_events):
        body["notify"] = notify
    if budget := budget_for_api(args.budget_tokens, args.budget_usd):
        body["budget"] = budget
    if total := budget_for_api(args.total_budget_tokens, args.total_budget_usd):
        body["total_budget"] = total
    if args.tasks_file:
        body["tasks"] = load_tasks(args.tasks_file)
    if args.repo:
        body["repo"] = repo_for_api(args.repo)
    for field in ("base_branch", "max_parallel", "max_iterations", "audit_probability"):
        value = getattr(args, field)
        if value is not None:
            body[field] = value
    interactive = confirm.wanted(args.auto, args.interactive, ctx.stdin)
    if interactive:
        body["mode"] = "interactive"
    api = GraphApi(ctx.client)
    graph_id = api.create(body).graph_id
    ctx.print(graph_id)
    asked = interactive and confirm.at_terminal(ctx.stdin)
    if asked and not confirm_graph(ctx, api, graph_id):
        return 1
    if args.follow:
        return follow(ctx, api, graph_id)
    return 0


def show_tasks(graph_id: str, tasks: list[Task], ctx: Context) -> None:
    console = ctx.err_console
    console.print(f"graph {graph_id} drafted {len(tasks)} task(s):")
    for task in tasks:
        requires = f" (requires {', '.join(task.requires)})" if task.requires else ""
        console.print(f"  {task.id}  {task.title}{requires}")
        console.print(f"      verify: {task.verification_command}")


def confirm_graph(ctx: Context, api: GraphApi, graph_id: str) -> bool:
    """Confirm first for a graph (docs/cli.md#confirm-first): its task list is shown and
    approved (True), edited, or cancelled (False: the graph is stopped)."""
    console = ctx.err_console
    console.print(f"graph {graph_id}: waiting for its task list")
    draft = confirm.wait_for_draft(
        lambda: api.state(graph_id),
        lambda state: state.status == GraphStatus.AWAITING_APPROVAL,
        lambda state: state.status.is_terminal,
        lambda state: state.status in (GraphStatus.RUNNING, GraphStatus.PAUSED),
        f"graph {graph_id}",
    )
    if draft is None:
        console.print(f"graph {graph_id} is past its confirmation already: nothing to ask")
        return True
    original = [task.task for task in draft.tasks]
    tasks = original
    while True:
        show_tasks(graph_id, tasks, ctx)
        choice = confirm.ask(ctx.stdin, console)
        if choice == "cancel":
            api.message(graph_id, "stop", {"reason": confirm.CANCEL_REASON})
            console.print(f"cancelled: graph {graph_id} stops before any task starts")
            return False
        if choice == "approve":
            edited = confirm.as_data(tasks) != confirm.as_data(original)
            api.message(graph_id, "approve", {"tasks": confirm.as_data(tasks)} if edited else {})
            console.print(f"approved: graph {graph_id} starts its tasks")
            return True
        data = confirm.edit(confirm.as_data(tasks), console)
        if data is not None and (checked := confirm.checked(TASKS, data, console)) is not None:
            if checked:
                tasks = checked
            else:
                console.print("a graph needs at least one task; nothing changed")


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    api = GraphApi(ctx.client)
    if args.follow:
        return follow(ctx, api, args.graph, json_output=args.json)
    state = api.state(args.graph)
    if args.json:
        ctx.print(state.model_dump_json(indent=2))
    else:
        ctx.console.print(graph_view(state))
    return 0


def cmd_ledger(ctx: Context, args: argparse.Namespace) -> int:
    text = GraphApi(ctx.client).ledger(args.graph)
    if args.json:
        # The lines as the graph wrote them (their keys and order), blank ones dropped.
        for line in text.splitlines():
            if line.strip():
                ctx.out.write(line + "\n")
        ctx.out.flush()
        return 0
    try:
        lines = ledger_lines(text)
    except ValidationError as err:
        raise CliError(
            f"unexpected ledger line for graph {args.graph} (is the API another version?)"
        ) from err
    if lines:
        ctx.console.print(ledger_table(lines))
    else:
        ctx.print(f"no ledger lines yet for {args.graph}")
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    graphs = GraphApi(ctx.client).listed(args.limit)
    return print_listing(ctx, graphs, args.json, GRAPHS, graphs_table, "no graphs")


def cmd_stop(ctx: Context, args: argparse.Namespace) -> int:
    body = {"reason": args.reason} if args.reason else {}
    state = GraphApi(ctx.client).message(args.graph, "stop", body)
    ctx.print(
        f"stop requested for {args.graph}; its running task loops push what they have, "
        "and no task starts after them"
    )
    ctx.print(graph_line(state))
    return 0


def cmd_pause(ctx: Context, args: argparse.Namespace) -> int:
    _print_state(ctx, GraphApi(ctx.client).message(args.graph, "pause"))
    return 0


def cmd_resume(ctx: Context, args: argparse.Namespace) -> int:
    _print_state(ctx, GraphApi(ctx.client).message(args.graph, "resume"))
    return 0


def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.tasks_file:
        body["tasks"] = load_tasks(args.tasks_file)
    if args.note:
        body["note"] = args.note
    _print_state(ctx, GraphApi(ctx.client).message(args.graph, "approve", body))
    return 0


def cmd_clear_block(ctx: Context, args: argparse.Namespace) -> int:
    run = GraphApi(ctx.client).clear_block(args.graph, args.task, args.note)
    ctx.print(status_line(run))
    return 0
