"""Admission: a run or a graph starts only in a free slot of each cap, and no race beats it.

The design, and why: the API keeps no database and several API processes may answer at
once. Counting open runs in Temporal visibility and then starting one is two calls, and
visibility lags a start: 50 concurrent starts against caps of 5 per client and 8 in all
were admitted 13 times. The one atomic "at most one" the service has is Temporal's own, as
`loopworks.api.idempotency` uses it: a workflow id has at most one open execution. So a cap
of N is N slot ids, `slot/<task queue>/<runs|graphs>/<scope>/<n>` for n < N, the scope
`all` (LOOPS_MAX_RUNS, LOOPS_MAX_GRAPHS) or `client/<token name>` (the per-client caps):

1. Claim: start a `SlotWorkflow` (workflows/slot.py) under one of the ids, in random
   order, with `id_conflict_policy=FAIL`. Temporal refuses the start while another run
   holds that slot, whichever API process asked. The client's slot first, then one of the
   service's; when either cap has none free, what was taken is given back and the answer is
   a 429 naming the cap. The slot's memo names its holder, the run or graph id, chosen
   before the claim.
2. Start the run or graph with its slots' ids in its input, under an id Temporal never
   lets start twice (`REJECT_DUPLICATE`).
3. Give back: the run signals each slot as it closes (`workflows.slot.give_back`), the
   slot workflow ends, and its id is free for the next claim.

A crash loses no slot for ever. A claim that finds every slot of a cap taken looks at each
one's holder: a holder that closed without giving it back (terminated, timed out) frees
it; a holder that does not exist `START_GRACE` after the claim means the API process that
claimed it died before step 2: its id is burned first (a workflow that times out at once
is started under it, so a step 2 still on its way is refused by REJECT_DUPLICATE), then the
slot freed. Freeing terminates that one execution of the slot workflow, by its run id, so
two processes freeing the same slot cannot free the claim a third made since.

With a client's day limited (api/spend.py), one more slot, `slot/<task queue>/day/client/
<token name>`, is a lock held from reading the client's day to starting the run: a
client's budgets are decided one at a time, each seeing every run decided before it. It
is given back as soon as the run has started; held longer than `LOCK_GRACE`, its holder
is burned (if it never started) and the lock taken over.

Rejected: one semaphore workflow per cap taking admissions as updates would need a worker
to answer every POST, and puts every start through one history; the run under a
slot-derived id cannot be, as run ids are public, unique for ever and name branches; the
run as the child of its slot would exist only once a worker ran the slot, and a run needs
two slots but has one parent. Visibility is still asked first: it refuses cheaply while a
cap is full, and it counts runs started before slots existed.

Limits: lowering a cap leaves the runs holding the slots above it running until they
close; an operator who terminates a slot workflow by hand frees its slot while its run
goes on.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import quotas, spend
from loopworks.api.errors import QuotaExceeded
from loopworks.schemas.admission import RESERVED_MEMO, SLOT_HOLDER_MEMO, SlotInput
from loopworks.schemas.run import Budget
from loopworks.schemas.settings import Settings
from loopworks.workflows.slot import SlotWorkflow

log = logging.getLogger("loopworks.api")

# How long a claimed slot's holder may not exist yet: the claim and the start are two calls
# of one request, seconds apart at most; past this, the process that claimed it is gone.
START_GRACE = timedelta(seconds=60)
# How long a client's day lock may be held: reading a day and starting a run take a few
# calls. How long a start waits for it, and how often it looks whether it is stale.
LOCK_GRACE = timedelta(seconds=30)
LOCK_WAIT_S = 20.0
LOCK_LOOK_S = 1.0
# A burned id: a workflow of this type, on a queue no worker polls, timing out at once.
BURNED_TYPE = "NeverStarted"
BURNED_TIMEOUT = timedelta(seconds=1)
# Temporal refused these outright: nothing started, so what was claimed for it goes back
# now. After any other failure (a timeout, a lost connection) the start may have happened.
REFUSED = frozenset(
    {
        RPCStatusCode.INVALID_ARGUMENT,
        RPCStatusCode.FAILED_PRECONDITION,
        RPCStatusCode.PERMISSION_DENIED,
        RPCStatusCode.NOT_FOUND,
        RPCStatusCode.ALREADY_EXISTS,
    }
)


class Holder(StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    MISSING = "missing"


class Verdict(StrEnum):
    HELD = "held"
    FREE = "free"
    # Claimed by a process that died before starting its run: free once the run's id is
    # burned.
    ORPHANED = "orphaned"


def verdict(slot_open: bool, holder: Holder, claimed_for: timedelta) -> Verdict:
    """Whether a taken slot is still held: by an open holder, or by one whose start may
    still be on its way (claimed less than START_GRACE ago)."""
    if not slot_open or holder == Holder.CLOSED:
        return Verdict.FREE
    if holder == Holder.OPEN or claimed_for < START_GRACE:
        return Verdict.HELD
    return Verdict.ORPHANED


def lock_verdict(lock_open: bool, holder: Holder, held_for: timedelta) -> Verdict:
    """Whether a client's day lock is still held: for LOCK_GRACE at most, whatever its
    holder; past that, its holder started (free) or never will (orphaned)."""
    if not lock_open:
        return Verdict.FREE
    if held_for < LOCK_GRACE:
        return Verdict.HELD
    return Verdict.ORPHANED if holder == Holder.MISSING else Verdict.FREE


def day_lock_id(task_queue: str, caller: str) -> str:
    return f"slot/{task_queue}/day/client/{caller}"


@dataclass(frozen=True)
class Held:
    """A claimed slot: its workflow id and the run id of the execution that holds it."""

    id: str
    run_id: str


@dataclass(frozen=True)
class Admitted:
    slots: tuple[Held, ...]
    # The run's or graph's budget: the request's, at most what its client has left today.
    budget: Budget | None

    @property
    def slot_ids(self) -> list[str]:
        return [slot.id for slot in self.slots]

    def memo(self) -> dict[str, object]:
        """What the run or graph carries for its client's day (api/spend.py): the budget
        it was given."""
        return {RESERVED_MEMO: (self.budget or Budget()).model_dump(mode="json")}


@asynccontextmanager
async def admitted(
    client: Client,
    settings: Settings,
    kind: quotas.Kind,
    caller: str,
    holder: str,
    budget: Budget | None,
) -> AsyncIterator[Admitted]:
    """Claim a slot of each cap for `holder`, the run or graph `caller` is about to start
    in the block, and the budget its client's day leaves it; a QuotaExceeded (429) naming
    the cap or limit when there is none, nothing left claimed. When the start in the block
    is refused outright, its slots go back; the day's lock goes back when the block ends."""
    await quotas.check_in_progress(client, settings, kind, caller)
    limits = quotas.caps(settings, kind)
    held: list[Held] = []
    lock: Held | None = None
    try:
        for cap in (limits.per_client, limits.overall):
            if cap.limit > 0:
                held.append(await _claim(client, settings, kind, cap, caller, holder))
        if spend.limited(settings):
            lock = await _day_lock(client, settings, caller, holder)
            budget = await spend.day_budget(client, settings, caller, holder, budget)
    except BaseException:
        await release(client, [*held, *([lock] if lock else [])], "its run was not started")
        raise
    try:
        yield Admitted(tuple(held), budget)
    except BaseException as err:
        if refused_outright(err):
            await release(client, held, "its run was not started")
        raise
    finally:
        if lock is not None:
            await release(client, [lock], "its run's budget is decided")


async def release(client: Client, held: Sequence[Held], why: str) -> None:
    """Give slots back that no run holds after all; one that cannot be given back now is
    freed by a later claim once its grace has passed."""
    for slot in held:
        try:
            await client.get_workflow_handle(slot.id, run_id=slot.run_id).terminate(reason=why)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("could not give back slot %s now: %s", slot.id, err.message)


def refused_outright(err: BaseException) -> bool:
    """Whether a failed start surely started nothing, so its slots go back at once."""
    if isinstance(err, WorkflowAlreadyStartedError):
        return True
    return isinstance(err, RPCError) and err.status in REFUSED


async def _claim(
    client: Client,
    settings: Settings,
    kind: quotas.Kind,
    cap: quotas.Cap,
    caller: str,
    holder: str,
) -> Held:
    ids = quotas.slot_ids(settings.task_queue, kind, cap, caller)
    order = secrets.SystemRandom().sample(ids, len(ids))
    what = f"a slot of {cap.setting} ({cap.limit})"
    for slot in order:
        if claimed := await _take(client, settings, slot, what, holder):
            return claimed
    # Every slot is taken: free those whose holder is gone, and take one of them.
    for slot in order:
        if await _freed(client, settings, slot, verdict) and (
            claimed := await _take(client, settings, slot, what, holder)
        ):
            return claimed
    raise quotas.over(kind, cap, cap.limit, caller)


async def _day_lock(client: Client, settings: Settings, caller: str, holder: str) -> Held:
    """The client's day lock, waited for while another start of the client's holds it."""
    lock = day_lock_id(settings.task_queue, caller)
    what = f"the lock on {caller!r}'s day ({spend.DAY_TOKENS}, {spend.DAY_USD})"
    waited_until = time.monotonic() + LOCK_WAIT_S
    looked = time.monotonic()
    while not (taken := await _take(client, settings, lock, what, holder)):
        now = time.monotonic()
        if now - looked >= LOCK_LOOK_S:
            looked = now
            if await _freed(client, settings, lock, lock_verdict):
                continue
        if now > waited_until:
            raise QuotaExceeded(
                f"{caller!r} is starting other runs or graphs: each one's budget is decided"
                " in turn, and this one's turn did not come: try again",
                1,
            )
        await asyncio.sleep(0.02 + secrets.randbelow(60) / 1000)
    return taken


async def _take(
    client: Client, settings: Settings, slot: str, what: str, holder: str
) -> Held | None:
    try:
        handle = await client.start_workflow(
            SlotWorkflow.run,
            SlotInput(holder=holder),
            id=slot,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            memo={SLOT_HOLDER_MEMO: holder},
            static_summary=f"{what}, held by {holder}",
        )
    except WorkflowAlreadyStartedError:
        return None
    return Held(slot, handle.result_run_id or "")


async def _freed(
    client: Client,
    settings: Settings,
    slot: str,
    judge: Callable[[bool, Holder, timedelta], Verdict],
) -> bool:
    """Whether `slot` is free now, as `judge` sees it: its workflow closed, or let go here
    (its execution terminated, the id of a holder that never started burned first)."""
    try:
        described = await client.get_workflow_handle(slot).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return True
        raise
    slot_open = described.status == WorkflowExecutionStatus.RUNNING
    holder = await described.memo_value(SLOT_HOLDER_MEMO, "")
    state = await _holder(client, holder) if slot_open else Holder.CLOSED
    found = judge(slot_open, state, datetime.now(UTC) - described.start_time)
    if found == Verdict.HELD:
        return False
    if found == Verdict.ORPHANED and not await _burned(client, settings, holder):
        return False  # it started after all, just now
    if slot_open:
        why = f"its holder {holder} is {state.value}: the slot is free again"
        await release(client, [Held(slot, described.run_id)], why)
    return True


async def _holder(client: Client, holder: str) -> Holder:
    try:
        described = await client.get_workflow_handle(holder).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return Holder.MISSING
        raise
    running = described.status == WorkflowExecutionStatus.RUNNING
    return Holder.OPEN if running else Holder.CLOSED


async def _burned(client: Client, settings: Settings, holder: str) -> bool:
    """Make `holder` an id no run or graph can start under (it starts with REJECT_DUPLICATE);
    False when it started meanwhile."""
    try:
        await client.start_workflow(
            BURNED_TYPE,
            id=holder,
            task_queue=f"{settings.task_queue}/never-polled",
            execution_timeout=BURNED_TIMEOUT,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            # Refused too when the run started and closed meanwhile: never hide it.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary="a run whose API process stopped before starting it",
        )
    except WorkflowAlreadyStartedError:
        return False
    log.warning("run %s was admitted but never started: its slot is free again", holder)
    return True
