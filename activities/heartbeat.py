"""Heartbeats from a running step: cancellation (a stop) reaches an activity only in a
heartbeat's reply."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

# How often a running step tells Temporal it is alive. Cancellation (a stop) reaches a step
# only in a heartbeat's reply, so this is how long a stop waits on a model call; and each
# beat is a call the server records, so a beat every 3 s costs a third of a beat a second's
# calls while a stop still lands within seconds (docs/benchmarks.md#model-calls-per-run).
# Three beats fit in the steps' 10-second heartbeat timeout (workflows/policies.py).
HEARTBEAT_EVERY_SECONDS = 3.0


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background: cancellation reaches an activity only through one.
    A local activity has nothing to beat to: the worker running it holds its workflow's
    task, and a cancel reaches it from there."""
    if not activity.in_activity() or activity.info().is_local:
        yield
        return

    async def beat() -> None:
        # Not at once: a step done within the interval needs none (each heartbeat is a
        # call to the server), and a longer one is still reached by a stop within it.
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
