"""Timeouts and retry policies, named for what they govern, in one place.

Temporal owns retries (the model client's own retries are off), so every attempt is
visible in the run's event history.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType, ActivityHandle

from loopworks.schemas.steps import INVALID_OUTPUT


@dataclass(frozen=True)
class StepPolicy:
    start_to_close: timedelta
    heartbeat: timedelta | None
    retry: RetryPolicy


# A model call: long, heartbeating (so a dead worker or a stop is noticed in seconds),
# retried with backoff; invalid output is the workflow's to retry, once
# (docs/loop.md#invalid-answers).
MODEL_CALL = StepPolicy(
    start_to_close=timedelta(minutes=10),
    heartbeat=timedelta(seconds=10),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(minutes=1),
        maximum_attempts=6,
        non_retryable_error_types=[INVALID_OUTPUT],
    ),
)

# PRODUCE and REFINE: an agent loop of many model turns and tool calls in one step.
AGENT_STEP = StepPolicy(
    start_to_close=timedelta(hours=1),
    heartbeat=MODEL_CALL.heartbeat,
    retry=MODEL_CALL.retry,
)

# Running prepared checks: commands carry their own timeouts, the group a longer one.
CHECK_GROUP = StepPolicy(
    start_to_close=timedelta(minutes=30),
    heartbeat=timedelta(seconds=10),
    retry=MODEL_CALL.retry,
)

# Git against the origin: quick, and worth a few tries on a flaky remote.
GIT = StepPolicy(
    start_to_close=timedelta(minutes=3),
    # The git activities heartbeat while they work: a dead worker's attempt is retried
    # within seconds, not at the timeout.
    heartbeat=timedelta(seconds=10),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=5,
    ),
)


# A task graph's merge queue: its activities heartbeat throughout (a verification command
# may run for minutes), so a dead worker's attempt is retried within seconds.
INTEGRATION = StepPolicy(
    start_to_close=timedelta(minutes=30), heartbeat=timedelta(seconds=10), retry=GIT.retry
)


# The gc: one origin's survey and removals, heartbeating while it lists, asks Temporal
# about many runs and deletes refs in batches (docs/operations.md#retention).
RETENTION = StepPolicy(
    start_to_close=timedelta(minutes=30), heartbeat=timedelta(seconds=10), retry=GIT.retry
)

T = TypeVar("T")


def start(
    method: Callable[..., Awaitable[T]],
    arg: Any,
    policy: StepPolicy,
    summary: str | None = None,
    *,
    cancellation: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
    local: bool = False,
) -> ActivityHandle[T]:
    """Start one activity method under `policy` (its timeouts and retries).

    `local`: as a local activity, for short plumbing that commits nothing (preparing a
    run's workspace): an activity costs the server a task queue round trip and the
    workflow task its completion wakes, about as much CPU as that git. A step that
    commits stays an activity: a local activity's input is not in history until its
    workflow task completes, so a worker lost mid-step would commit again at another
    time. It has no heartbeat timeout: the worker running it holds the workflow task
    open, so a dead worker's attempt is retried elsewhere when that task times out."""
    if local:
        return workflow.start_local_activity_method(
            method,
            arg,
            start_to_close_timeout=policy.start_to_close,
            retry_policy=policy.retry,
            cancellation_type=cancellation,
            summary=summary,
        )
    return workflow.start_activity_method(
        method,
        arg,
        start_to_close_timeout=policy.start_to_close,
        heartbeat_timeout=policy.heartbeat,
        retry_policy=policy.retry,
        cancellation_type=cancellation,
        summary=summary,
    )


async def execute(
    method: Callable[[Any, Any], Awaitable[T]],
    arg: Any,
    policy: StepPolicy,
    summary: str | None = None,
) -> T:
    """Run one activity method under `policy` and wait for it; for workflows without a
    run's gate (the loop's steps go through `StepRunner`)."""
    return await start(method, arg, policy, summary)


def history_is_long(limit: int | None) -> bool:
    """Whether a workflow should continue as new now: at `limit` history events when one
    is set (tests), else when the server suggests it. Call from inside a workflow."""
    info = workflow.info()
    if limit is not None:
        return info.get_current_history_length() >= limit
    return info.is_continue_as_new_suggested()
