"""`loops clean`: remove a finished run's workspace clones, after confirmation.

The clones live on the service's disk (`$LOOPS_DATA_DIR/workspaces/` of the API and the
worker), not necessarily on the machine the CLI runs on, so the API lists them
(`GET /runs/{id}/workspace`) and removes them (`DELETE`). The run's result is not among
them: that is the pushed branch `loops/<run_id>` on its origin, which stays.
"""

from __future__ import annotations

from typing import TextIO, cast

from rich.console import Console
from rich.filesize import decimal
from rich.prompt import Confirm
from rich.text import Text

from loopworks.api.models import RunWorkspace, WorkspaceEntry
from loopworks.cli.client import ApiClient, CliError
from loopworks.cli.confirm import Lines
from loopworks.schemas.run import TERMINAL_STATUSES

# `--all` looks at the newest this many runs of each finished status (the API's cap).
ALL_LIMIT = 500


def confirm(question: str, stdin: TextIO, console: Console) -> bool:
    """A y/N question; with nobody at a terminal to answer it, refuse rather than guess.

    (rich's Confirm reads whatever stream it is given, piped or not; the TTY check is
    ours. An empty answer, or the end of input, is its default: no.)
    """
    if not stdin.isatty():
        raise CliError(
            "refusing to delete without confirmation: stdin is not a terminal (pass --yes)"
        )
    try:
        return Confirm.ask(
            Text(question), console=console, default=False, stream=cast(TextIO, Lines(stdin))
        )
    except EOFError:
        console.print()
        return False


def entry_line(entry: WorkspaceEntry) -> str:
    return f"  {entry.name} ({decimal(entry.bytes)})"


def clean(client: ApiClient, run_id: str, yes: bool, stdin: TextIO, console: Console) -> int:
    """List the run's clones, ask (unless `yes`), remove them; the exit code."""
    workspace = client.workspace(run_id)
    if not workspace.finished:
        raise CliError(
            f"run {run_id} has not finished; only a finished run's workspace is cleaned"
            f" (stop it first: loops stop {run_id})"
        )
    if not workspace.entries:
        console.print(f"nothing to clean for {run_id}")
        return 0
    console.print(
        f"run {run_id} has finished; this deletes its workspaces on the service"
        f" ({decimal(workspace.bytes)}):"
    )
    for entry in workspace.entries:
        console.print(entry_line(entry))
    console.print("its pushed branch stays on its origin")
    question = f"Delete {len(workspace.entries)} workspace(s)?"
    if not yes and not confirm(question, stdin, console):
        console.print("nothing deleted")
        return 1
    removed = client.remove_workspace(run_id)
    console.print(f"deleted {len(removed.removed)} workspace(s), {decimal(removed.bytes)}")
    return 0


def finished_workspaces(client: ApiClient) -> list[RunWorkspace]:
    """Every finished run's workspace that holds something, newest run first. A run whose
    status reads finished but whose workflow is still closing is left for later."""
    runs = [
        run
        for status in sorted(TERMINAL_STATUSES)
        for run in client.list_runs(limit=ALL_LIMIT, status=status.value)
    ]
    runs.sort(key=lambda run: run.started_at, reverse=True)
    found: list[RunWorkspace] = []
    seen: set[str] = set()
    for run in runs:
        if run.run_id in seen:
            continue
        seen.add(run.run_id)
        workspace = client.workspace(run.run_id)
        if workspace.finished and workspace.entries:
            found.append(workspace)
    return found


def clean_all(client: ApiClient, yes: bool, stdin: TextIO, console: Console) -> int:
    """`loops clean --all`: every finished run's clones, after one confirmation."""
    found = finished_workspaces(client)
    if not found:
        console.print("nothing to clean: no finished run has a workspace on the service")
        return 0
    total = sum(workspace.bytes for workspace in found)
    console.print(
        f"{len(found)} finished run(s) have workspaces on the service ({decimal(total)}):"
    )
    for workspace in found:
        console.print(
            f"  {workspace.run_id}: {len(workspace.entries)} workspace(s)"
            f" ({decimal(workspace.bytes)})"
        )
    console.print("their pushed branches stay on their origins")
    question = f"Delete the workspaces of {len(found)} run(s)?"
    if not yes and not confirm(question, stdin, console):
        console.print("nothing deleted")
        return 1
    count = freed = 0
    for workspace in found:
        removed = client.remove_workspace(workspace.run_id)
        count += len(removed.removed)
        freed += removed.bytes
    console.print(f"deleted {count} workspace(s) of {len(found)} run(s), {decimal(freed)}")
    return 0
