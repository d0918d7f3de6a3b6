"""A client's rolling day of spending (LOOPS_CLIENT_DAY_TOKENS, LOOPS_CLIENT_DAY_USD): what its
runs and graphs started in the last 24 hours may have spent bounds a new one's budget.

Each of them counts what it spent once it has closed (the memo it writes as it closes,
SPENT_MEMO), and while it is open, or when it closed without saying (terminated), its whole
budget (RESERVED_MEMO, written at its start): what it may yet spend. A new run's budget is
the request's (the operator's when it names none), at most what is left of the day, so the
day's limit joins the run's own; a graph's total budget the same. Less than `MIN_LEFT`
left is nothing left: a 429 naming the limit, what is left, and, as Retry-After, when the
oldest of them leaves the day.

Starts of one client are decided one at a time: each holds its client's day lock
(api/admission.py) from reading the day to starting its run, and reads every run holding
one of the client's slots as it is now (describe, not visibility, which lags), so each sees
every run decided before it. Visibility adds the closed ones, which it has long known of.
A day limit therefore needs the per-client caps (api/security.py refuses to start without
them).

The decision is a plain function, `day_budget_for`; `day_budget` only reads Temporal.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import quotas
from loopworks.api.errors import QuotaExceeded
from loopworks.schemas.admission import RESERVED_MEMO, SLOT_HOLDER_MEMO, SPENT_MEMO, Spent
from loopworks.schemas.run import Budget
from loopworks.schemas.settings import Settings
from loopworks.workflows.search_attributes import LOOP_STARTED_BY

WINDOW = timedelta(hours=24)
DAY_TOKENS = "LOOPS_CLIENT_DAY_TOKENS"
DAY_USD = "LOOPS_CLIENT_DAY_USD"
# Less than this left is nothing left: a run given a few tokens or a fraction of a cent
# would stop at its first model call.
MIN_LEFT = {DAY_TOKENS: 1000.0, DAY_USD: 0.01}


def limited(settings: Settings) -> bool:
    return bool(settings.client_day_tokens or settings.client_day_usd)


@dataclass(frozen=True)
class Counted:
    """One run or graph of the client's day, and what it counts: spent or reserved."""

    id: str
    started: datetime
    tokens: int
    cost_usd: float


class DayLimitReached(QuotaExceeded):
    def __init__(self, caller: str, setting: str, limit: float, left: float, retry: int) -> None:
        shown = _amount(setting, max(left, 0))
        super().__init__(
            f"{caller!r} has {shown} of {setting} ({_amount(setting, limit)}) left in its"
            " rolling day: its runs and graphs started in the last 24 hours count what they"
            " spent, or while open their whole budget. The oldest of them leaves the day in"
            f" {retry} s",
            retry,
            limit=setting,
            left=max(left, 0),
        )


def _amount(setting: str, value: float) -> str:
    """`$10.00`, `$0.005`, `5000 tokens`: cents always, fractions of one when there are."""
    if setting != DAY_USD:
        return f"{int(value)} tokens"
    whole, _, fraction = f"{value:.4f}".partition(".")
    return f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"


def day_budget_for(
    requested: Budget | None,
    settings: Settings,
    counted: Iterable[Counted],
    caller: str,
    now: datetime,
) -> Budget:
    """`requested` (a run's budget, a graph's total) at most what `counted` leaves of each
    limit the settings set; DayLimitReached when one has less than MIN_LEFT left."""
    counted = [entry for entry in counted if entry.started > now - WINDOW]
    budget = requested or Budget()
    limits = (
        (DAY_TOKENS, settings.client_day_tokens, sum(c.tokens for c in counted), "max_tokens"),
        (DAY_USD, settings.client_day_usd, sum(c.cost_usd for c in counted), "max_cost_usd"),
    )
    for setting, limit, used, field in limits:
        if not limit:
            continue
        left = limit - used
        if left < MIN_LEFT[setting]:
            raise DayLimitReached(caller, setting, limit, left, retry_after(counted, now))
        asked = getattr(budget, field)
        given = int(left) if field == "max_tokens" else round(left, 6)
        budget = budget.model_copy(update={field: given if asked is None else min(asked, given)})
    return budget


def retry_after(counted: Sequence[Counted], now: datetime) -> int:
    """Seconds until the oldest counted run or graph leaves the day (a day: none does)."""
    if not counted:
        return int(WINDOW.total_seconds())
    oldest = min(entry.started for entry in counted)
    return max(1, math.ceil((oldest + WINDOW - now).total_seconds()))


def counts(reserved: Budget | None, spent: Spent | None) -> tuple[int, float]:
    """What one run or graph counts: what it spent when it said, else its whole budget
    (an unlimited one, of a run started before a limit was set, counts nothing)."""
    if spent is not None:
        return spent.tokens, spent.cost_usd
    reserved = reserved or Budget()
    return reserved.max_tokens or 0, reserved.max_cost_usd or 0.0


async def day_budget(
    client: Client, settings: Settings, caller: str, holder: str, requested: Budget | None
) -> Budget:
    """`day_budget_for` over `caller`'s runs and graphs of the day but `holder` (the one
    being admitted: its slots and the day's lock are held)."""
    now = datetime.now(UTC)
    counted = {entry.id: entry async for entry in _visible(client, settings, caller, now)}
    # A run read through its slot is read as it is now: visibility may not know yet.
    counted.update((entry.id, entry) for entry in await _held(client, settings, caller))
    counted.pop(holder, None)
    return day_budget_for(requested, settings, counted.values(), caller, now)


def window_query(task_queue: str, caller: str, since: datetime) -> str:
    return (
        'WorkflowType IN ("LoopWorkflow", "TaskGraphWorkflow")'
        f' AND TaskQueue = "{quotas.quoted(task_queue)}"'
        f' AND {LOOP_STARTED_BY.name} = "{quotas.quoted(caller)}"'
        f' AND LoopGraph IS NULL AND StartTime > "{since.isoformat()}"'
    )


async def _visible(
    client: Client, settings: Settings, caller: str, now: datetime
) -> AsyncIterator[Counted]:
    """The client's runs and graphs started in the window, by workflow id: the executions
    of one that continued as new are one run."""
    by_id: dict[str, list[WorkflowExecution]] = {}
    query = window_query(settings.task_queue, caller, now - WINDOW)
    async for execution in client.list_workflows(query):
        by_id.setdefault(execution.id, []).append(execution)
    for workflow_id, executions in by_id.items():
        latest = max(executions, key=lambda e: e.start_time)
        running = any(e.status == WorkflowExecutionStatus.RUNNING for e in executions)
        reserved = await latest.memo_value(RESERVED_MEMO, None, type_hint=Budget)
        spent = None if running else await latest.memo_value(SPENT_MEMO, None, type_hint=Spent)
        tokens, cost = counts(reserved, spent)
        started = min(e.start_time for e in executions)
        yield Counted(workflow_id, started, tokens, cost)


async def _held(client: Client, settings: Settings, caller: str) -> list[Counted]:
    """The runs and graphs holding the client's slots, read as they are now."""
    slots = [
        slot
        for kind in quotas.Kind
        for slot in quotas.slot_ids(
            settings.task_queue, kind, quotas.caps(settings, kind).per_client, caller
        )
    ]
    holders = set(await asyncio.gather(*map(partial(_holder, client), slots)))
    counted = await asyncio.gather(*(_counted(client, holder) for holder in holders if holder))
    return [entry for entry in counted if entry is not None]


async def _holder(client: Client, slot: str) -> str | None:
    try:
        described = await client.get_workflow_handle(slot).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if described.status != WorkflowExecutionStatus.RUNNING:
        return None
    holder: str | None = await described.memo_value(SLOT_HOLDER_MEMO, None)
    return holder


async def _counted(client: Client, holder: str) -> Counted | None:
    """A slot's holder as it counts; None while it is not started (its start is not
    decided yet: it waits for the day lock)."""
    try:
        described = await client.get_workflow_handle(holder).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    running = described.status == WorkflowExecutionStatus.RUNNING
    reserved = await described.memo_value(RESERVED_MEMO, None, type_hint=Budget)
    spent = None if running else await described.memo_value(SPENT_MEMO, None, type_hint=Spent)
    tokens, cost = counts(reserved, spent)
    return Counted(holder, described.start_time, tokens, cost)
