"""`GET /runs`: runs as Temporal visibility sees them, from the loop's search attributes."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey

from loopworks.api.models import RunSummary
from loopworks.schemas.rules import Phase
from loopworks.schemas.run import TERMINAL_STATUSES, RunStatus
from loopworks.workflows.loop import LOOP_WORKFLOW
from loopworks.workflows.search_attributes import (
    LOOP_ALIAS,
    LOOP_BLOCKED,
    LOOP_ITERATION,
    LOOP_PHASE,
    LOOP_SCORE,
    LOOP_STARTED_BY,
    LOOP_STATUS,
)

# What an alias looks like (workflows/decisions.py, `alias_for`): a lowercase hyphen slug.
ALIAS_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"

# The loop's workflow type: what the run routes and the run list look for.

E = TypeVar("E", bound=Enum)

# A run closed from outside the workflow (terminate, timeout) never wrote its final
# LoopStatus; Temporal's execution status says how it ended.
_CLOSED_AS: dict[WorkflowExecutionStatus, RunStatus] = {
    WorkflowExecutionStatus.COMPLETED: RunStatus.COMPLETED,
    WorkflowExecutionStatus.FAILED: RunStatus.FAILED,
    WorkflowExecutionStatus.TERMINATED: RunStatus.FAILED,
    WorkflowExecutionStatus.TIMED_OUT: RunStatus.FAILED,
    WorkflowExecutionStatus.CANCELED: RunStatus.STOPPED,
}
# The visibility names of those execution statuses, for the same rule inside a query.
_EXECUTION_STATUS_NAMES: dict[WorkflowExecutionStatus, str] = {
    WorkflowExecutionStatus.COMPLETED: "Completed",
    WorkflowExecutionStatus.FAILED: "Failed",
    WorkflowExecutionStatus.TERMINATED: "Terminated",
    WorkflowExecutionStatus.TIMED_OUT: "TimedOut",
    WorkflowExecutionStatus.CANCELED: "Canceled",
}


def visibility_query(
    status: RunStatus | None, alias: str | None = None, before: datetime | None = None
) -> str:
    """The runs with `status` and `alias` (either None: any), started before `before`
    (None: any time). The alias is checked at the door (`ALIAS_PATTERN`): no quote can
    reach the query."""
    query = f'WorkflowType = "{LOOP_WORKFLOW}"'
    if alias is not None:
        query += f' AND {LOOP_ALIAS.name} = "{alias}"'
    if before is not None:
        query += f' AND StartTime < "{visibility_time(before)}"'
    if status is None:
        return query
    if status not in TERMINAL_STATUSES:
        # A terminated run keeps its last live LoopStatus; only open runs are live.
        return f'{query} AND {LOOP_STATUS.name} = "{status.value}" AND ExecutionStatus = "Running"'
    closed_as = [
        f'"{_EXECUTION_STATUS_NAMES[execution]}"'
        for execution, run_status in _CLOSED_AS.items()
        if run_status == status and execution != WorkflowExecutionStatus.COMPLETED
    ]
    matches = f'{LOOP_STATUS.name} = "{status.value}"'
    if closed_as:
        matches = f"({matches} OR ExecutionStatus IN ({', '.join(closed_as)}))"
    return f"{query} AND {matches}"


def visibility_time(when: datetime) -> str:
    """A time as a visibility query compares it: RFC 3339 in UTC (naive means UTC)."""
    aware = when if when.tzinfo else when.replace(tzinfo=UTC)
    try:
        utc = aware.astimezone(UTC)
    except OverflowError:
        # An offset that takes the time past either end of what Python holds: that end.
        utc = (datetime.max if aware.year > 1 else datetime.min).replace(tzinfo=UTC)
    # The year with its four digits (strftime's %Y drops leading zeros: Temporal refuses
    # "1-01-01").
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"


def _attribute(execution: WorkflowExecution, key: SearchAttributeKey[Any]) -> Any:
    return execution.typed_search_attributes.get(key)


def _member(enum: type[E], value: Any) -> E | None:
    # Search attributes are free-form to Temporal; an unknown value is shown as missing.
    try:
        return enum(value)
    except ValueError:
        return None


def run_status(execution: WorkflowExecution) -> RunStatus:
    recorded = _attribute(execution, LOOP_STATUS)
    status = _member(RunStatus, recorded)
    execution_status = execution.status
    if execution_status in (None, WorkflowExecutionStatus.RUNNING):
        return status or RunStatus.RUNNING
    if status is not None and status.is_terminal:
        return status
    return _CLOSED_AS.get(execution_status, RunStatus.FAILED)


def summarize(execution: WorkflowExecution) -> RunSummary:
    return RunSummary(
        run_id=execution.id,
        alias=_attribute(execution, LOOP_ALIAS),
        status=run_status(execution),
        iteration=_attribute(execution, LOOP_ITERATION),
        phase=_member(Phase, _attribute(execution, LOOP_PHASE)),
        last_score=_attribute(execution, LOOP_SCORE),
        blocked=_attribute(execution, LOOP_BLOCKED),
        started_at=execution.start_time,
        closed_at=execution.close_time,
        execution_status=execution.status.name.lower() if execution.status else None,
        started_by=_attribute(execution, LOOP_STARTED_BY),
    )


# How many more closed runs than asked for are read to find the newest started among
# them (visibility hands them out by close time; see list_runs).
CLOSED_READ_FACTOR = 5


async def list_runs(
    client: Client,
    limit: int,
    status: RunStatus | None,
    alias: str | None = None,
    before: datetime | None = None,
) -> list[RunSummary]:
    """The `limit` newest runs by start time, as near as visibility allows.

    Visibility lists open runs first, then closed ones by close time, and takes no
    ORDER BY on SQL stores: the first `limit` it hands out are not the newest started
    (a run waiting for approval for a day came before every run started since). So open
    runs (handed out newest started first) and closed runs are read apart, the closed
    from a wider window, and sorted together by start time. `before` pages on: the runs
    started before the last one of the page before."""
    query = visibility_query(status, alias, before)
    closed_limit = min(limit * CLOSED_READ_FACTOR, 1000)
    runs: list[RunSummary] = []
    for part, part_limit in (
        (f'{query} AND ExecutionStatus = "Running"', limit),
        (f'{query} AND ExecutionStatus != "Running"', closed_limit),
    ):
        executions = client.list_workflows(part, limit=part_limit, page_size=min(part_limit, 1000))
        runs += [summarize(execution) async for execution in executions]
    runs.sort(key=lambda run: run.started_at, reverse=True)
    return runs[:limit]
