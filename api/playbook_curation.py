"""Reading playbooks from git and curating them through their one writer.

A playbook's origin is what its `PlaybookWorkflow` says (the `describe` query); its
versions are read from that origin's playbook branch, never from the workflow, so what the
API shows is what is committed. Every change goes through `loopworks.playbook.writer`: the
workflow applies it, once, and commits the new version.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, Field
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TemporalError
from temporalio.service import RPCError

from loopworks.api import launch, redaction
from loopworks.api.errors import ApiError, NotApplicable, UpstreamError, invalid
from loopworks.playbook import writer
from loopworks.playbook.store import PlaybookStore
from loopworks.playbook.workflow import PLAYBOOK_WORKFLOW
from loopworks.schemas.playbook import (
    NAME_PATTERN,
    AppliedBatch,
    DeltaBatch,
    Playbook,
    PlaybookState,
    PlaybookVersion,
    playbook_name,
)
from loopworks.schemas.settings import Settings
from loopworks.workspace.default_origin import default_origin, ensure_default_origin
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.runner import GitError

log = logging.getLogger("loopworks.api")
T = TypeVar("T")


# How long the list waits for each playbook's answer: one that does not answer (no worker
# polls its queue, or its workflow task keeps failing) is left out, and the list must
# come back well within a client's patience (the API fuzz test's is 10 s, as the
# run routes' QUERY_TIMEOUT: waiting that long made the whole list time out).
LIST_QUERY_TIMEOUT_SECONDS = 3.0


class PlaybookNotFound(ApiError):
    status_code = 404


class PlaybookRollback(BaseModel):
    version: int = Field(ge=1, description="The version whose items become current again.")


async def list_states(client: Client, limit: int) -> list[PlaybookState]:
    """Every running playbook's state. One whose workflow does not answer in time (no
    worker polls its queue) is left out rather than holding up the list."""
    query = f'WorkflowType = "{PLAYBOOK_WORKFLOW}" AND ExecutionStatus = "Running"'
    names: list[str] = []
    async for execution in client.list_workflows(query, limit=limit):
        name = execution.id.removeprefix("playbook/")
        if name not in names:
            names.append(name)
    answers = await asyncio.gather(*(_answer_in_time(client, name) for name in names))
    return sorted((state for state in answers if state is not None), key=lambda s: s.name)


async def _answer_in_time(client: Client, name: str) -> PlaybookState | None:
    try:
        return await asyncio.wait_for(writer.describe(client, name), LIST_QUERY_TIMEOUT_SECONDS)
    except (TimeoutError, RPCError, WorkflowQueryFailedError, RPCTimeoutOrCancelledError) as err:
        log.warning("playbook %s did not answer describe: %s", name, err)
        return None


async def state_of(client: Client, name: str) -> PlaybookState:
    """The playbook's state, or a 404 naming it."""
    if not _valid_name(name):
        raise PlaybookNotFound(f"playbook {name[:100]!r} not found: not a playbook name")
    state = await writer.describe(client, name)
    if state is None:
        raise PlaybookNotFound(f"playbook {name} not found: no runs have sent it deltas yet")
    return state


async def current(client: Client, workspaces: GitWorkspaces, name: str) -> Playbook:
    """The version at the head of the playbook's branch (version 0 before its first)."""
    state = await state_of(client, name)
    store = PlaybookStore.of(workspaces)
    found = await _read(state, lambda: store.current(state.origin, name))
    return found or Playbook(name=name)


async def versions(client: Client, workspaces: GitWorkspaces, name: str) -> list[PlaybookVersion]:
    state = await state_of(client, name)
    store = PlaybookStore.of(workspaces)
    return await _read(state, lambda: store.versions(state.origin, name))


async def at_version(
    client: Client, workspaces: GitWorkspaces, name: str, version: int
) -> Playbook:
    state = await state_of(client, name)
    store = PlaybookStore.of(workspaces)
    found = await _read(state, lambda: store.at_version(state.origin, name, version))
    if found is None:
        raise PlaybookNotFound(
            f"playbook {name} has no version {version} (its versions are 1 to {state.version})"
        )
    return found


async def rollback(
    client: Client, settings: Settings, name: str, body: PlaybookRollback
) -> AppliedBatch:
    state = await state_of(client, name)
    if body.version > state.version:
        span = f"versions 1 to {state.version}" if state.version else "no versions yet"
        raise invalid("version", f"playbook {name} has {span}", body.version)
    return await _written(name, writer.rollback(client, settings, name, state.origin, body.version))


async def send_deltas(
    client: Client,
    settings: Settings,
    workspaces: GitWorkspaces,
    name: str,
    batch: DeltaBatch,
    repo: str | None,
) -> AppliedBatch:
    """Hand-curated deltas for the playbook `name`. A playbook nobody has written yet
    starts with them: `repo` names its origin (the service's default origin by default)."""
    origin = await _origin_for(client, settings, workspaces, name, repo)
    batch = redaction.delta_batch(batch)
    return await _written(name, writer.send_batch(client, settings, name, origin, batch))


async def _origin_for(
    client: Client, settings: Settings, workspaces: GitWorkspaces, name: str, repo: str | None
) -> str:
    rules = settings.origin_rules()
    checked = (
        None
        if repo is None
        else await asyncio.to_thread(launch.checked_repo, repo, rules, where="query")
    )
    if repo is not None and playbook_name(repo) != name:
        message = f"the playbook of {repo} is {playbook_name(repo)}, not {name}"
        raise invalid("repo", message, repo, where="query")
    if not _valid_name(name):
        raise PlaybookNotFound(f"playbook {name[:100]!r} not found: not a playbook name")
    state = await writer.describe(client, name)
    if state is not None:
        return state.origin
    if checked is not None:
        return checked
    if name == playbook_name(default_origin(settings)):
        return await asyncio.to_thread(ensure_default_origin, settings, workspaces)
    raise PlaybookNotFound(
        f"playbook {name} not found: to start it, send its first deltas with ?repo=<its origin>"
    )


async def _written(name: str, update: Awaitable[AppliedBatch]) -> AppliedBatch:
    """The writer's answer. What it refuses (its own checks, or a branch someone else
    moved: failures no retry changes) is a 409; git trouble on the origin that outlasted
    its activity's retries is a 502. Either way the answer says why, not only that an
    activity failed."""
    try:
        return await update
    except WorkflowUpdateFailedError as err:
        chain = _causes(err)
        cause = chain[-1] if chain else err
        reason = cause.message if isinstance(cause, FailureError) else str(cause)
        refused = any(isinstance(e, ApplicationError) and e.non_retryable for e in chain)
        if isinstance(err.cause, ActivityError) and not refused:
            raise UpstreamError(f"playbook {name}'s writer failed on its origin: {reason}") from err
        raise NotApplicable(f"playbook {name}'s writer refused: {reason}") from err


def _causes(err: BaseException) -> list[BaseException]:
    """Temporal's chain below `err` (update → activity → the error the activity raised →
    what that was raised from), outermost first."""
    chain: list[BaseException] = []
    while isinstance(err, TemporalError) and err.cause is not None:
        err = err.cause
        chain.append(err)
    return chain


async def _read(state: PlaybookState, read: Callable[[], T]) -> T:
    try:
        # Git is blocking I/O; keep it off the event loop.
        return await asyncio.to_thread(read)
    except (GitError, ValueError) as err:
        raise UpstreamError(f"could not read playbook {state.name} from its origin: {err}") from err


def _valid_name(name: str) -> bool:
    return re.fullmatch(NAME_PATTERN.strip("^$"), name) is not None
