"""Quotas: how much one client, and everyone together, may have going at once.

- Runs and graphs in progress, per client (a token's name) and in all, counted by
  Temporal visibility from the `LoopStartedBy` search attribute the API sets when it
  starts them; over a cap is a 429 with Retry-After naming the cap and its setting. The
  count and the start are two calls, and visibility lags a start by up to a second or so
  on some backends: requests racing each other can overshoot a cap by a few.
- A run's budget (tokens, dollars), and a graph's total budget: the operator's applies
  when a request names none, and a request may ask for less, never more (a 422 naming
  the setting).
- Rules per request (422) and open event streams per client in this API process (429).

The decisions are plain functions; `check_in_progress` only asks Temporal the counts.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api.errors import QuotaExceeded, UpstreamError, invalid
from loopworks.schemas.run import Budget
from loopworks.schemas.settings import Settings
from loopworks.workflows.graph.workflow import GRAPH_WORKFLOW
from loopworks.workflows.loop import LOOP_WORKFLOW
from loopworks.workflows.search_attributes import LOOP_STARTED_BY

# Runs take minutes: a client told to come back sooner would only be told again.
IN_PROGRESS_RETRY_AFTER_S = 30
STREAMS_RETRY_AFTER_S = 5


class Kind(StrEnum):
    RUNS = "runs"
    GRAPHS = "graphs"


WORKFLOW_TYPES = {Kind.RUNS: LOOP_WORKFLOW, Kind.GRAPHS: GRAPH_WORKFLOW}


@dataclass(frozen=True)
class Cap:
    setting: str
    limit: int  # 0: no cap
    per_client: bool


@dataclass(frozen=True)
class Caps:
    kind: Kind
    per_client: Cap
    overall: Cap


def caps(settings: Settings, kind: Kind) -> Caps:
    if kind is Kind.RUNS:
        mine = Cap("LOOPS_MAX_RUNS_PER_CLIENT", settings.max_runs_per_client, per_client=True)
        every = Cap("LOOPS_MAX_RUNS", settings.max_runs, per_client=False)
    else:
        mine = Cap("LOOPS_MAX_GRAPHS_PER_CLIENT", settings.max_graphs_per_client, True)
        every = Cap("LOOPS_MAX_GRAPHS", settings.max_graphs, per_client=False)
    return Caps(kind, mine, every)


def reached(cap: Cap, count: int) -> bool:
    return cap.limit > 0 and count >= cap.limit


def refusal(kind: Kind, cap: Cap, count: int, client: str) -> str:
    """The 429's sentence: which cap, its setting, and what to do."""
    what = "runs" if kind is Kind.RUNS else "task graphs"
    if cap.per_client:
        return (
            f"{client!r} has {count} {what} in progress, the most {cap.setting} allows per"
            f" client ({cap.limit}): wait for one to finish, or stop one, and try again"
        )
    return (
        f"the service has {count} {what} in progress, the most {cap.setting} allows in all"
        f" ({cap.limit}): try again when one has finished"
    )


def slot_ids(task_queue: str, kind: Kind, cap: Cap, caller: str) -> list[str]:
    """The workflow ids of a cap's slots (api/admission.py): for a client's cap, that
    client's."""
    scope = f"client/{caller}" if cap.per_client else "all"
    return [f"slot/{task_queue}/{kind.value}/{scope}/{n}" for n in range(cap.limit)]


def over(kind: Kind, cap: Cap, count: int, client: str) -> QuotaExceeded:
    """The 429 for `cap` reached: its sentence, its setting, and nothing left of it."""
    return QuotaExceeded(
        refusal(kind, cap, count, client), IN_PROGRESS_RETRY_AFTER_S, limit=cap.setting
    )


def in_progress_query(kind: Kind, task_queue: str, client: str | None) -> str:
    """What visibility counts: open workflows of `kind` on this deployment's queue (by
    `client`); a graph's task loops are the graph's, not runs of their own."""
    query = (
        f'WorkflowType = "{WORKFLOW_TYPES[kind]}" AND ExecutionStatus = "Running"'
        f' AND TaskQueue = "{quoted(task_queue)}"'
    )
    if kind is Kind.RUNS:
        query += " AND LoopGraph IS NULL"
    if client is not None:
        query += f' AND {LOOP_STARTED_BY.name} = "{quoted(client)}"'
    return query


def quoted(value: str) -> str:
    """`value` inside a visibility query's double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


async def check_in_progress(client: Client, settings: Settings, kind: Kind, caller: str) -> None:
    """A QuotaExceeded (429) when `caller`, or everyone, has as many in progress as allowed."""
    limits = caps(settings, kind)
    for cap in (limits.per_client, limits.overall):
        if cap.limit <= 0:
            continue
        query = in_progress_query(kind, settings.task_queue, caller if cap.per_client else None)
        try:
            count = (await client.count_workflows(query)).count
        except RPCError as err:
            if err.status != RPCStatusCode.UNIMPLEMENTED:
                raise
            # Temporal's time-skipping test server keeps no visibility to count.
            raise UpstreamError(
                f"this Temporal server cannot count workflows, so {cap.setting} cannot hold:"
                f" set {limits.per_client.setting} and {limits.overall.setting} to 0 to go"
                " without these caps"
            ) from err
        if reached(cap, count):
            raise over(kind, cap, count, caller)


class BudgetRefused(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def budget_for(
    requested: Budget | None, settings: Settings, field: str = "budget"
) -> Budget | None:
    """The budget a run gets (`field` "budget"), or a graph in all ("total_budget"): each
    limit the request names, at most the operator's; the operator's where it names none.
    None when neither limits anything."""
    if field == "total_budget":
        ceilings = (settings.graph_budget_tokens, settings.graph_budget_usd)
        names = ("LOOPS_GRAPH_BUDGET_TOKENS", "LOOPS_GRAPH_BUDGET_USD")
    else:
        ceilings = (settings.run_budget_tokens, settings.run_budget_usd)
        names = ("LOOPS_RUN_BUDGET_TOKENS", "LOOPS_RUN_BUDGET_USD")
    ceiling_tokens = ceilings[0] or None
    ceiling_usd = ceilings[1] or None
    asked = requested or Budget()
    if ceiling_tokens and asked.max_tokens and asked.max_tokens > ceiling_tokens:
        raise BudgetRefused(
            f"{field}.max_tokens",
            f"a budget of {asked.max_tokens} tokens is more than {names[0]}"
            f" allows ({ceiling_tokens})",
        )
    if ceiling_usd and asked.max_cost_usd and asked.max_cost_usd > ceiling_usd:
        raise BudgetRefused(
            f"{field}.max_cost_usd",
            f"a budget of ${asked.max_cost_usd} is more than {names[1]} allows (${ceiling_usd})",
        )
    budget = Budget(
        max_tokens=asked.max_tokens or ceiling_tokens,
        max_cost_usd=asked.max_cost_usd or ceiling_usd,
    )
    return None if budget.max_tokens is None and budget.max_cost_usd is None else budget


def checked_budget(
    requested: Budget | None, settings: Settings, field: str = "budget"
) -> Budget | None:
    """`budget_for`, its refusal as a 422 naming the field and the setting."""
    try:
        return budget_for(requested, settings, field)
    except BudgetRefused as err:
        raise invalid(err.field, str(err), None) from err


def rules_refusal(count: int, limit: int) -> str | None:
    if limit > 0 and count > limit:
        return f"{count} rules is more than LOOPS_MAX_RULES allows in one request ({limit})"
    return None


def check_rules(count: int, settings: Settings, field: str = "rules") -> None:
    """A 422 naming LOOPS_MAX_RULES for a request with more rules than it allows."""
    message = rules_refusal(count, settings.max_rules_per_request)
    if message is not None:
        raise invalid(field, message, None)


class StreamSlots:
    """Open event streams per client in this process: one slot per stream, given back
    when the stream ends (its generator finishes, is closed, or is dropped unstarted)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def take(self, client: str) -> Slot:
        held = self.open.get(client, 0)
        if self.limit > 0 and held >= self.limit:
            raise QuotaExceeded(
                f"{client!r} has {held} event streams open, the most"
                f" LOOPS_MAX_STREAMS_PER_CLIENT allows ({self.limit}): close one and try again",
                STREAMS_RETRY_AFTER_S,
                limit="LOOPS_MAX_STREAMS_PER_CLIENT",
            )
        self.open[client] = held + 1
        return Slot(self, client)

    def give_back(self, client: str) -> None:
        left = self.open.get(client, 0) - 1
        if left > 0:
            self.open[client] = left
        else:
            self.open.pop(client, None)


class Slot:
    def __init__(self, slots: StreamSlots, client: str) -> None:
        self._slots = slots
        self._client = client
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots.give_back(self._client)

    def hold(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`stream`, releasing this slot when it ends however it ends."""

        async def held() -> AsyncIterator[bytes]:
            try:
                async for chunk in stream:
                    yield chunk
            finally:
                self.release()

        wrapped = held()
        # A response dropped before it iterates never runs the generator's `finally`.
        weakref.finalize(wrapped, self.release)
        return wrapped
