"""The gc on demand and pins (docs/operations.md#retention), for `POST /gc` and
`POST /runs/{id}/pin|unpin`.

The gc itself runs in a worker, as `RetentionWorkflow`: its clones are on the workers'
disks and its policy is the workers' setting. The API starts one and waits for its report.
A pin is a ref on the run's origin (workspace/pruning.py), written here: a finished run's
workflow takes no update, and the gc reads its origin anyway.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api.errors import ApiError, UpstreamError
from loopworks.api.launch import checked_repo
from loopworks.schemas.git_names import is_url
from loopworks.schemas.retention import GcReport, GcRequest, PinRequest, PinState, RetentionInput
from loopworks.schemas.settings import Settings
from loopworks.service.started import started_on
from loopworks.workflows.retention import RetentionWorkflow
from loopworks.workspace.default_origin import default_origin
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.pruning import RunRecords
from loopworks.workspace.refs import pin_ref, redact
from loopworks.workspace.runner import GitError

# How long `POST /gc` waits for the gc's report, within the CLI's minute; past it the gc goes
# on in its workflow, and the answer names it.
GC_WAIT = timedelta(seconds=50)


class GcStillRunning(ApiError):
    """The gc outlasted the request: it goes on, in the workflow the message names."""

    status_code = 504


async def collect(client: Client, settings: Settings, request: GcRequest, caller: str) -> GcReport:
    """Run the gc (or its dry run) now, in a worker, and answer its report."""
    repo = None if request.repo is None else await _checked(request.repo, settings)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    workflow_id = f"retention/{settings.task_queue}/{stamp}-{secrets.token_hex(3)}"
    kind = "dry run" if request.dry_run else "gc"
    handle = await client.start_workflow(
        RetentionWorkflow.run,
        RetentionInput(dry_run=request.dry_run, branches=request.branches, repo=repo),
        id=workflow_id,
        task_queue=settings.task_queue,
        static_summary=f"{kind} of finished runs' records, asked by {caller}",
    )
    try:
        return await asyncio.wait_for(handle.result(), GC_WAIT.total_seconds())
    except TimeoutError as err:
        raise GcStillRunning(
            f"the {kind} is still running after {GC_WAIT.total_seconds():.0f} s; it goes on"
            f" as workflow {workflow_id} (its result is its report, in the Temporal UI)"
        ) from err


async def pin(
    client: Client,
    settings: Settings,
    workspaces: GitWorkspaces,
    run_id: str,
    request: PinRequest,
    by: str,
    pinned: bool,
) -> PinState:
    """Pin (or unpin) `run_id` on its origin; answers the pin's state."""
    origin = await origin_of(client, settings, workspaces, run_id, request.repo)
    records = RunRecords.of(workspaces)
    try:
        if pinned:
            await asyncio.to_thread(records.pin, origin, run_id, by, datetime.now(UTC))
        else:
            await asyncio.to_thread(records.unpin, origin, run_id)
    except GitError as err:
        raise UpstreamError(
            f"could not {'pin' if pinned else 'unpin'} run {run_id}: {err}"
        ) from err
    return PinState(run_id=run_id, pinned=pinned, origin=redact(origin), ref=pin_ref(run_id))


async def origin_of(
    client: Client, settings: Settings, workspaces: GitWorkspaces, run_id: str, repo: str | None
) -> str:
    """The origin a run (or a graph) works on: the one asked (which must hold it), else
    the one its workflow was started on, else, for a run Temporal forgot, the service's
    default origin if that holds it; a 404 otherwise."""
    if repo is not None:
        return await _holding(workspaces, run_id, await _checked(repo, settings))
    try:
        started = await started_on(client, run_id)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        started = None
    if started is not None:
        return started.repo or default_origin(settings)
    return await _holding(workspaces, run_id, default_origin(settings))


async def _checked(repo: str, settings: Settings) -> str:
    """`repo` as the deployment admits it, or a 422 (it may look a host up: off the loop)."""
    return await asyncio.to_thread(checked_repo, repo, settings.origin_rules())


class PinnedRunNotFound(ApiError):
    status_code = 404

    def __init__(self, run_id: str, origin: str) -> None:
        super().__init__(
            f"run {run_id} not found: Temporal does not know it and {redact(origin)} holds"
            " nothing of it (for a run whose history expired, name its repository: `repo`)"
        )


async def _holding(workspaces: GitWorkspaces, run_id: str, origin: str) -> str:
    if not is_url(origin) and not Path(origin).exists():
        raise PinnedRunNotFound(run_id, origin)  # the default origin, never created
    records = RunRecords.of(workspaces)
    try:
        held = await asyncio.to_thread(records.holds_run, origin, run_id)
    except GitError as err:
        raise UpstreamError(f"could not read {redact(origin)}: {err}") from err
    if not held:
        raise PinnedRunNotFound(run_id, origin)
    return origin
