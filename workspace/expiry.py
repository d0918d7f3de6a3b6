"""Which finished runs' records expire: a pure decision over what one origin holds, what
Temporal says of each run, the pins and the operator's policy (docs/operations.md#retention).

A run leaves on its origin a work ref (`refs/loopworks/<run>`), its single-shot calls'
refs (`refs/loopworks/_trajectory/<run>/_/*`) and its result branch (`loops/<run>`), and
clones on the workers' disks. A task graph leaves its own calls' refs and its integration
branch (`graphs/<graph>`, its result), and each of its task loops (`<graph>/<task>/<n>`)
leaves what a run does. The rules:

- The unit of retention is a run, or a graph with all its task loops: a task loop expires
  with its graph, never before it.
- A unit whose workflow is open (running, paused, blocked, awaiting approval) is never
  touched; nor is a task loop whose own workflow is still open.
- A unit Temporal does not know (its history expired, or another deployment's) has
  finished only if its result branch exists: then it finished when that branch's tip was
  committed. Without one it is kept: a run in flight has no branch yet.
- A pinned run or graph never expires; pinning a task loop keeps that loop alone.
- A finished unit expires `days` after it finished, or once `keep_per_repo` finished
  units of the origin are newer (pinned ones not counted), whichever comes first.
- What goes: the work ref, the call refs, the clones; the result branch `loops/<run>`
  only when the policy says so. A graph's integration branch always stays.

workspace/pruning.py surveys an origin and removes what this decides;
activities/retention.py asks Temporal and runs both.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from loopworks.schemas.retention import KeptBecause, RetentionPolicy
from loopworks.workspace.refs import RUN_ID_SEGMENTS

# What a unit's result branch is named: a run's `loops/<run>`, a graph's `graphs/<graph>`.
RUN_BRANCH_PREFIX = "refs/heads/loops/"
GRAPH_BRANCH_PREFIX = "refs/heads/graphs/"


class Status(Enum):
    OPEN = "open"
    CLOSED = "closed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Known:
    """What Temporal says of one workflow id."""

    status: Status
    closed_at: datetime | None = None  # CLOSED: its latest execution's close time

    @classmethod
    def closed(cls, when: datetime) -> Known:
        return cls(Status.CLOSED, when)


OPEN = Known(Status.OPEN)
UNKNOWN = Known(Status.UNKNOWN)


@dataclass(frozen=True)
class Records:
    """What one run (or graph) id holds on the origin, and on this worker's disk."""

    work_ref: bool = False
    call_refs: int = 0
    # Its result branch (full ref name) when the origin has it, and when its tip was made.
    branch: str | None = None
    branch_time: datetime | None = None
    clones: tuple[str, ...] = ()
    clone_bytes: int = 0

    @property
    def removable_branch(self) -> bool:
        """A run's result branch may go when asked; a graph's integration branch never."""
        return self.branch is not None and self.branch.startswith(RUN_BRANCH_PREFIX)

    def removable(self, policy: RetentionPolicy) -> bool:
        """Whether it holds anything the gc could remove."""
        branch = policy.branches and self.removable_branch
        return self.work_ref or self.call_refs > 0 or bool(self.clones) or branch


@dataclass(frozen=True)
class Removal:
    """One run id's records that go, and why."""

    run_id: str
    reason: str
    work_ref: bool
    call_refs: int
    branch: bool
    clones: tuple[str, ...]
    clone_bytes: int


@dataclass(frozen=True)
class Plan:
    remove: list[Removal] = field(default_factory=list)  # newest finished unit first
    kept: dict[str, KeptBecause] = field(default_factory=dict)  # removable ids left alone


def unit_of(run_id: str) -> str | None:
    """The run or graph whose retention `run_id` follows: itself, or for a task loop
    (`<graph>/<task>/<n>`) its graph; None for an id of another shape (not a run's)."""
    segments = run_id.split("/")
    if len(segments) == 1:
        return run_id
    if len(segments) == RUN_ID_SEGMENTS:
        return segments[0]
    return None


def to_ask(records: Mapping[str, Records], policy: RetentionPolicy) -> set[str]:
    """The workflow ids whose status the decision needs: every id holding something
    removable, and the unit it follows."""
    if not policy.expires:
        return set()
    asked: set[str] = set()
    for run_id, held in records.items():
        unit = unit_of(run_id)
        if unit is not None and held.removable(policy):
            asked |= {run_id, unit}
    return asked


def decide(
    records: Mapping[str, Records],
    known: Mapping[str, Known],
    pins: Set[str],
    policy: RetentionPolicy,
    now: datetime,
) -> Plan:
    """What expires among `records` (one origin's, by run id): see the module's rules.
    `known` answers for the ids `to_ask` named (a missing one is UNKNOWN)."""
    plan = Plan()
    if not policy.expires:
        return plan
    members: dict[str, list[str]] = {}
    for run_id, held in sorted(records.items()):
        unit = unit_of(run_id)
        if unit is not None and held.removable(policy):
            members.setdefault(unit, []).append(run_id)
    finished: list[tuple[datetime, str]] = []
    for unit, ids in members.items():
        why = _held_back(unit, records.get(unit), known.get(unit, UNKNOWN), pins)
        if why is not None:
            plan.kept.update(dict.fromkeys(ids, why))
            continue
        finished.append((_finished_at(records.get(unit), known.get(unit, UNKNOWN)), unit))
    finished.sort(reverse=True)
    for rank, (when, unit) in enumerate(finished):
        reason = _expired(when, rank, policy, now)
        for run_id in members[unit]:
            if reason is None:
                plan.kept[run_id] = KeptBecause.WITHIN
            elif run_id != unit and run_id in pins:
                plan.kept[run_id] = KeptBecause.PINNED
            elif run_id != unit and known.get(run_id, UNKNOWN).status == Status.OPEN:
                plan.kept[run_id] = KeptBecause.OPEN
            else:
                own = reason if run_id == unit else f"its graph {unit} {reason}"
                plan.remove.append(_removal(run_id, own, records[run_id], policy))
    return plan


def _held_back(
    unit: str, held: Records | None, status: Known, pins: Set[str]
) -> KeptBecause | None:
    """Why a whole unit is kept whatever its age, or None when it has finished."""
    if unit in pins:
        return KeptBecause.PINNED
    if status.status == Status.OPEN:
        return KeptBecause.OPEN
    # A run's branch is made as it ends; a graph's integration branch at its start, moved
    # with its ledger, says nothing of whether the graph (another deployment's) has ended.
    if status.status == Status.UNKNOWN and (
        held is None or held.branch_time is None or _is_graph(held)
    ):
        return KeptBecause.UNKNOWN
    return None


def _is_graph(held: Records) -> bool:
    return held.branch is not None and held.branch.startswith(GRAPH_BRANCH_PREFIX)


def _finished_at(held: Records | None, status: Known) -> datetime:
    if status.status == Status.CLOSED and status.closed_at is not None:
        return status.closed_at
    assert held is not None and held.branch_time is not None  # `_held_back` said so
    return held.branch_time


def _expired(when: datetime, rank: int, policy: RetentionPolicy, now: datetime) -> str | None:
    """Why a unit that finished at `when`, `rank` newest on its origin, has expired."""
    if policy.days is not None and now - when >= timedelta(days=policy.days):
        age = (now - when).total_seconds() / 86400
        return f"finished {age:.1f} days ago (LOOPS_RETENTION_DAYS={policy.days:g})"
    if policy.keep_per_repo is not None and rank >= policy.keep_per_repo:
        return (
            f"finished before the newest {policy.keep_per_repo} on its repository"
            f" (LOOPS_RETENTION_KEEP_PER_REPO={policy.keep_per_repo})"
        )
    return None


def _removal(run_id: str, reason: str, held: Records, policy: RetentionPolicy) -> Removal:
    return Removal(
        run_id=run_id,
        reason=reason,
        work_ref=held.work_ref,
        call_refs=held.call_refs,
        branch=policy.branches and held.removable_branch,
        clones=held.clones,
        clone_bytes=held.clone_bytes,
    )
