"""`GET /runs/{id}/events?follow=1`: a run's events as Server-Sent Events.

The stream polls the workflow's `events(after)` query. Queries are answered by a worker
from the run's state and write nothing to its history, so a watcher costs the run
nothing however long it watches. Each event goes out as

    event: <event name>
    data: <Event JSON>
    id: <seq>

so a client that reconnects with `Last-Event-ID: <seq>` (browsers do it by themselves)
continues after the last event it saw: none missed, none twice. When the run has closed
and everything is flushed, a last `event: end` (no id, so it never moves the client's
cursor) says so and the stream ends; reconnecting after that is answered 204, which
tells an EventSource to stop reconnecting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from fastapi.sse import format_sse_event
from temporalio.client import Client, RPCTimeoutOrCancelledError, WorkflowExecutionDescription
from temporalio.service import RPCError

from loopworks.api import run_handles
from loopworks.api.deps import LoopHandle
from loopworks.api.errors import RunNotFound, StateUnavailable, TemporalUnavailable
from loopworks.schemas.events import Event
from loopworks.workspace.git import GitWorkspaces

log = logging.getLogger("loopworks.api")

POLL_INTERVAL_S = 0.5
HEARTBEAT_INTERVAL_S = 15.0
# How long the stream rides out a worker or Temporal being unreachable before it tells
# the client and ends (the client may reconnect from its last id).
GIVE_UP_AFTER_S = 120.0
# Sent first: how long an EventSource waits before reconnecting.
RECONNECT_MS = 2_000
END_EVENT = "end"
ERROR_EVENT = "error"
HEARTBEAT = b": keep-alive\n\n"

_TRANSIENT = (StateUnavailable, TemporalUnavailable, RPCError, RPCTimeoutOrCancelledError)


class Numbered(Protocol):
    """What the stream sends: anything numbered from 1, in order (a run's events, a
    graph's ledger lines)."""

    @property
    def seq(self) -> int: ...


class EventSource(Protocol):
    async def events(self, after: int) -> Sequence[Numbered]: ...

    async def closed(self) -> bool: ...


class RunEvents:
    """One run's events and whether it has closed, through its workflow handle."""

    def __init__(
        self, handle: LoopHandle, workspaces: GitWorkspaces, client: Client | None = None
    ) -> None:
        self._handle = handle
        self._workspaces = workspaces
        self._client = client
        # The callers ask closed() and then events(): one describe serves both.
        self._description: WorkflowExecutionDescription | None = None

    async def events(self, after: int) -> list[Event]:
        description, self._description = self._description, None
        return await run_handles.read_events(
            self._handle, after, self._workspaces, description, self._client
        )

    async def closed(self) -> bool:
        # Temporal's execution status, not the run's own: a run terminated from outside
        # never writes a terminal status, but it does close.
        self._description = await run_handles.describe(self._handle)
        return run_handles.is_closed(self._description)


def encode(event: Event) -> bytes:
    # Compact JSON has no raw newlines, so the data is one `data:` line.
    return format_sse_event(
        data_str=event.model_dump_json(), event=event.event.value, id=str(event.seq)
    )


def _notice(name: str, **data: object) -> bytes:
    return format_sse_event(data_str=json.dumps(data), event=name)


async def follow(
    source: EventSource,
    run_id: str,
    after: int,
    first: Sequence[Numbered] = (),
    closed: bool = False,
    *,
    encoder: Callable[[Any], bytes] | None = None,
    poll_s: float = POLL_INTERVAL_S,
    heartbeat_s: float = HEARTBEAT_INTERVAL_S,
    give_up_s: float = GIVE_UP_AFTER_S,
) -> AsyncIterator[bytes]:
    """Events after `after`, in order, until the run has closed and all are sent.

    `first` and `closed` are what the route read before answering (so an unknown run is
    a 404 and an unreachable worker a 503, not a broken stream).
    """
    send: Callable[[Any], bytes] = encoder or encode
    yield format_sse_event(retry=RECONNECT_MS)
    last_write = time.monotonic()
    failing_since: float | None = None
    batch: Sequence[Numbered] = first
    while True:
        for event in batch:
            # Only ever forward: a repeated or older event is never sent twice.
            if event.seq > after:
                yield send(event)
                after = event.seq
                last_write = time.monotonic()
        if closed:
            yield _notice(END_EVENT, run_id=run_id, last_event_id=after)
            return
        await asyncio.sleep(poll_s)
        try:
            # Closed is read first: a run that had closed by then has no events after
            # the read that follows, so that read flushes everything.
            closed = await source.closed()
            batch = await source.events(after)
            failing_since = None
        except RunNotFound as err:
            yield _notice(ERROR_EVENT, detail=err.message)
            return
        except _TRANSIENT as err:
            batch, closed = (), False
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            detail = getattr(err, "message", None) or str(err)
            if now - failing_since >= give_up_s:
                yield _notice(ERROR_EVENT, detail=f"gave up following run {run_id}: {detail}")
                return
            log.warning("following run %s: %s; retrying", run_id, detail)
        if time.monotonic() - last_write >= heartbeat_s:
            yield HEARTBEAT
            last_write = time.monotonic()
