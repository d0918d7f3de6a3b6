"""A run's working clones on the service's disk: what they are, and removing them.

A run's clones are `<workspaces>/<run_id>` and `<run_id>.<slot>` (`GitWorkspaces.workdir`
names them). Its result is not among them: that is the pushed branch `loops/<run_id>` on
its origin, which nothing here touches. The API serves this because it runs with the
worker's LOOPS_DATA_DIR in every deployment loopworks ships (the local launcher and
docker compose share it), so the clones are on the machine that answers.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from loopworks.api import run_handles
from loopworks.api.deps import LoopHandle
from loopworks.api.errors import ApiError, NotApplicable
from loopworks.api.models import RunWorkspace, WorkspaceEntry, WorkspaceRemoved
from loopworks.workspace.git import GitWorkspaces


class RemovalFailed(ApiError):
    """The disk refused a deletion (permissions, a busy mount): the service's problem,
    not the client's, and not a bug either; the message names the path and why."""

    status_code = 500


def run_clones(workspaces: GitWorkspaces, run_id: str) -> list[Path]:
    """The run's clones that exist, main clone first. `workdir` refuses an id that could
    not name one (so nothing outside the root is ever listed); callers check it first."""
    main = workspaces.workdir(run_id)
    root = main.parent
    if not root.is_dir():
        return []
    return sorted(
        path
        for path in root.iterdir()
        if path.name == main.name or path.name.startswith(f"{main.name}.")
    )


def size_of(path: Path) -> int:
    """Bytes on disk as `du --apparent-size` counts them; a symlink is its own size."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def entries(workspaces: GitWorkspaces, run_id: str) -> list[WorkspaceEntry]:
    return [
        WorkspaceEntry(name=path.name, bytes=size_of(path))
        for path in run_clones(workspaces, run_id)
    ]


def remove(workspaces: GitWorkspaces, run_id: str) -> list[WorkspaceEntry]:
    """Delete the run's clones; answer what was deleted and its size before."""
    removed: list[WorkspaceEntry] = []
    for path in run_clones(workspaces, run_id):
        entry = WorkspaceEntry(name=path.name, bytes=size_of(path))
        try:
            # A symlink is removed, never followed: only our own directory goes.
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as err:
            raise RemovalFailed(
                f"could not remove {path.name} of run {run_id}: {err.strerror or err}"
            ) from err
        removed.append(entry)
    return removed


# --- what the routes answer --------------------------------------------------------------


async def inspect(handle: LoopHandle, workspaces: GitWorkspaces) -> RunWorkspace:
    description = await run_handles.describe(handle)  # a 404 when it is no run of ours
    # Walking a clone is blocking I/O; keep it off the event loop.
    found = await asyncio.to_thread(entries, workspaces, handle.id)
    return RunWorkspace(
        run_id=handle.id,
        finished=run_handles.is_closed(description),
        entries=found,
        bytes=sum(entry.bytes for entry in found),
    )


async def clean(handle: LoopHandle, workspaces: GitWorkspaces) -> WorkspaceRemoved:
    # Temporal's execution status, not the run's: a run whose status already reads
    # `stopped` still reflects and pushes from its clone, and only a closed workflow
    # never touches it again (a run terminated from outside closes too).
    if not run_handles.is_closed(await run_handles.describe(handle)):
        raise NotApplicable(
            f"run {handle.id} has not finished; only a finished run's workspace is removed"
            f" (stop it first: POST /runs/{handle.id}/stop)"
        )
    removed = await asyncio.to_thread(remove, workspaces, handle.id)
    return WorkspaceRemoved(
        run_id=handle.id, removed=removed, bytes=sum(entry.bytes for entry in removed)
    )
