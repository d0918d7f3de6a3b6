"""What `loops graph` prints: a graph's status line and its task tree, the changes seen
while following it, the ledger and the list of graphs.

Like `render`, everything reads the API's models (`GraphState`, `LedgerLine`,
`GraphListed`) and returns text or a rich renderable, so it is tested without a
terminal; off a terminal the output is plain and the same for the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from loopworks.api.models import GraphListed
from loopworks.cli.render import timestamp
from loopworks.schemas.graph import GraphState, GraphStatus, TaskState
from loopworks.schemas.tasks import LedgerLine, TaskStatus

# Styles show only on a terminal; piped output carries the words alone.
TASK_STYLES = {
    TaskStatus.PENDING: "dim",
    TaskStatus.IN_PROGRESS: "bold yellow",
    TaskStatus.COMPLETED: "green",
    TaskStatus.FAILED: "bold red",
    TaskStatus.BLOCKED: "red",
}
GRAPH_STYLES = {
    GraphStatus.COMPLETED: "bold green",
    GraphStatus.FAILED: "bold red",
    GraphStatus.STOPPED: "bold yellow",
}


def _table() -> Table:
    return Table(box=None, pad_edge=False, show_edge=False, header_style="bold")


def latest_run(task: TaskState) -> str:
    return task.run_ids[-1] if task.run_ids else "-"


# --- status ---------------------------------------------------------------------------


def task_counts(state: GraphState) -> str:
    """`1/3 completed, 1 in-progress`: the completed share, then every other status seen."""
    counts = {status: 0 for status in TaskStatus}
    for task in state.tasks:
        counts[task.status] += 1
    parts = [f"{counts[TaskStatus.COMPLETED]}/{len(state.tasks)} completed"]
    parts += [
        f"{count} {status.value}"
        for status, count in counts.items()
        if count and status != TaskStatus.COMPLETED
    ]
    return ", ".join(parts)


def graph_line(state: GraphState) -> str:
    """`graph_id | status | tasks | updated_at`, like a run's status line."""
    tasks = task_counts(state) if state.tasks else "no tasks yet"
    return " | ".join(
        [state.graph_id, state.status.value, tasks, timestamp(state.updated_at or None)]
    )


def graph_notes(state: GraphState) -> list[str]:
    """Why it ended, or what it waits for and the command that moves it on."""
    graph_id = state.graph_id
    if state.status.is_terminal:
        return [f"{state.status.value}: {state.message}" if state.message else state.status.value]
    if state.status == GraphStatus.AWAITING_APPROVAL:
        return [f"awaiting approval (approve with: loops graph approve {graph_id})"]
    if state.status == GraphStatus.PAUSED:
        return [f"paused (continue with: loops graph resume {graph_id})"]
    return []


def prep_lines(state: GraphState) -> list[str]:
    """Where the tasks came from, each task loop's iteration limit when the graph set one,
    and what of a prep package was not used: its lines skipped, or why it was rejected
    (docs/graphs.md#prep-packages)."""
    lines = [f"tasks from: {state.source}"] if state.source else []
    if state.max_iterations:
        lines.append(f"each task loop: at most {state.max_iterations} iterations")
    lines += [f"prep package line skipped: {_flat(line)}" for line in state.prep_skipped]
    lines += [f"prep package not used: {_flat(reason)}" for reason in state.prep_rejected]
    return lines


def budget_line(state: GraphState) -> str | None:
    """`spent: 12,345 tokens of 50,000,000, $0.1234 of $250.00`: what the graph's loops
    spent against its total budget (docs/graphs.md#budget); None before it spent
    anything with no total to show."""
    total, usage = state.total_budget, state.usage
    if total is None and not usage.calls:
        return None
    tokens = f"{usage.total_tokens:,} tokens"
    if total is not None and total.max_tokens is not None:
        tokens += f" of {total.max_tokens:,}"
    usd = f"${usage.cost_usd:.4f}"
    if total is not None and total.max_cost_usd is not None:
        usd += f" of ${total.max_cost_usd:.2f}"
    return f"spent: {tokens}, {usd}"


def _task_label(task: TaskState, id_width: int, status_width: int) -> Text:
    label = Text(f"{task.task.id:<{id_width}}  ")
    label.append(f"{task.status.value:<{status_width}}", style=TASK_STYLES[task.status])
    label.append(f"  {task.task.title}")
    if task.attempts:
        noun = "attempt" if task.attempts == 1 else "attempts"
        label.append(f" · {task.attempts} {noun} · run {latest_run(task)}", style="dim")
    return label


def task_tree(state: GraphState) -> Tree:
    """The graph, then each task in the graph's order: id, status, title, attempts and
    its latest run; under it what it requires and why its latest attempt failed."""
    header = Text(state.graph_id, style="bold")
    header.append(f"  {state.status.value}", style=GRAPH_STYLES.get(state.status, "bold"))
    header.append(f"  {task_counts(state) if state.tasks else 'no tasks yet'}")
    tree = Tree(header, guide_style="dim")
    id_width = max((len(task.task.id) for task in state.tasks), default=0)
    status_width = max((len(task.status.value) for task in state.tasks), default=0)
    for task in state.tasks:
        node = tree.add(_task_label(task, id_width, status_width))
        if task.task.requires:
            node.add(Text(f"requires: {', '.join(task.task.requires)}", style="dim"))
        if task.last_failure and task.status != TaskStatus.COMPLETED:
            node.add(Text(f"last failure: {_flat(task.last_failure)}", style="red"))
    return tree


def graph_view(state: GraphState) -> RenderableType:
    """`loops graph status`: the goal, the integration branch, the tree, the notes."""
    lines = [Text(f"goal: {_flat(state.goal)}")]
    if state.integration_branch:
        where = state.integration_branch
        if state.integration_commit:
            where += f" @ {state.integration_commit[:8]}"
        if state.origin:
            where += f" on {state.origin}"
        lines.append(Text(f"integration: {where}"))
    lines += [Text(line) for line in prep_lines(state)]
    if spent := budget_line(state):
        lines.append(Text(spent))
    notes = [Text(note) for note in graph_notes(state)]
    return Group(*lines, task_tree(state), *notes)


def _flat(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- following ------------------------------------------------------------------------


def changes(before: GraphState, after: GraphState) -> list[str]:
    """One line per change between two polls: tasks planned or added (fix tasks), a
    task's status or attempt, in the graph's order, then the graph's own status."""
    lines: list[str] = []
    if after.tasks and not before.tasks:
        noun = "task" if len(after.tasks) == 1 else "tasks"
        source = f" from the {after.source}" if after.source else ""
        lines.append(f"· {len(after.tasks)} {noun}{source}")
        previous: dict[str, TaskState] = {task.task.id: task for task in after.tasks}
    else:
        previous = {task.task.id: task for task in before.tasks}
    for task in after.tasks:
        was = previous.get(task.task.id)
        if was is None:
            lines.append(f"· {task.task.id} added ({task.status.value}): {task.task.title}")
        elif (was.status, was.attempts) != (task.status, task.attempts):
            lines.append(_task_change(was, task))
    if after.status != before.status:
        lines.append(f"· graph {before.status.value} → {after.status.value}")
        if not after.status.is_terminal:  # the end prints its own notes
            lines += [f"! {note}" for note in graph_notes(after)]
    return lines


def _task_change(was: TaskState, task: TaskState) -> str:
    if was.status == task.status:  # another attempt (a retry after a failed one)
        return f"· {task.task.id} attempt {task.attempts} (run {latest_run(task)})"
    line = f"· {task.task.id} {was.status.value} → {task.status.value}"
    if task.status == TaskStatus.IN_PROGRESS:
        line += f" (attempt {task.attempts}, run {latest_run(task)})"
    elif task.status in (TaskStatus.FAILED, TaskStatus.BLOCKED) and task.last_failure:
        line += f": {_flat(task.last_failure, 120)}"
    return line


# --- ledger and list --------------------------------------------------------------------

LEDGER_COLUMNS = ("TASK", "STATUS", "ATTEMPT", "UPDATED", "RUN", "EXIT", "SUMMARY")
GRAPH_COLUMNS = ("GRAPH_ID", "STATUS", "STARTED", "BY")


def ledger_table(lines: Sequence[LedgerLine]) -> Table:
    table = _table()
    for name in LEDGER_COLUMNS:
        table.add_column(name, no_wrap=name != "SUMMARY", overflow="fold")
    for line in lines:
        cells = (
            line.id,
            line.status.value,
            str(line.attempt),
            timestamp(line.updated_at),
            line.run_id or "-",
            "-" if line.exit_code is None else str(line.exit_code),
            _flat(line.summary, 120) or "-",
        )
        table.add_row(*(Text(cell) for cell in cells))
    return table


def graphs_table(graphs: Iterable[GraphListed]) -> Table:
    table = _table()
    for name in GRAPH_COLUMNS:
        table.add_column(name, no_wrap=True, overflow="fold")
    for graph in graphs:
        cells = (graph.graph_id, graph.status, timestamp(graph.start_time), graph.started_by or "-")
        table.add_row(*(Text(cell) for cell in cells))
    return table
