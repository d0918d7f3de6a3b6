"""Retention: when a finished run's records on its origin and its clones on a worker's disk
go, what the gc is asked, and what it answers (docs/operations.md#retention).

The gc runs as `RetentionWorkflow` (a Temporal Schedule starts it; `POST /gc` too), so
these models cross the API, the workflow and its activities; the `loops` CLI reads the
report with them.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# Runs named one by one in a report, per origin; its counts cover every run. A report is
# an activity's result, so it stays far below Temporal's payload limit however many runs
# a busy origin has.
REPORT_RUNS_CAP = 200


class RetentionPolicy(BaseModel):
    """The operator's setting, as the workers hold it (LOOPS_RETENTION_*): a finished run's
    records expire `days` after it finished, or once `keep_per_repo` runs on its repository
    finished after it, whichever comes first; neither set, nothing expires."""

    model_config = ConfigDict(frozen=True)

    days: float | None = Field(default=None, ge=0, description="LOOPS_RETENTION_DAYS")
    keep_per_repo: int | None = Field(
        default=None, ge=0, description="LOOPS_RETENTION_KEEP_PER_REPO"
    )
    branches: bool = Field(
        default=False,
        description="an expired run's result branch `loops/<run>` goes too "
        "(LOOPS_RETENTION_BRANCHES, or the request's `branches`)",
    )

    @property
    def expires(self) -> bool:
        return self.days is not None or self.keep_per_repo is not None


class GcRequest(BaseModel):
    """`POST /gc`: collect what has expired now, or (`dry_run`) say what that would be."""

    model_config = ConfigDict(extra="forbid")

    dry_run: bool = Field(default=False, description="only say what would be removed")
    branches: bool | None = Field(
        default=None,
        description="remove expired runs' result branches too; unset: LOOPS_RETENTION_BRANCHES",
    )
    repo: str | None = Field(
        default=None,
        max_length=2_000,
        description="only this repository (URL or path); unset: every repository the gc "
        "knows of (docs/operations.md#retention)",
    )


class RetentionInput(BaseModel):
    """`RetentionWorkflow`'s input: what the Schedule starts it with, or a `POST /gc`."""

    dry_run: bool = False
    branches: bool | None = None
    repo: str | None = None


class RetentionPlan(BaseModel):
    """What one gc applies: the workers' policy (the request's `branches` over it) and the
    origins it visits."""

    policy: RetentionPolicy
    origins: list[str] = Field(default_factory=list)


class OriginSweep(BaseModel):
    """One origin's share of a gc: the activity that surveys and prunes it."""

    origin: str
    policy: RetentionPolicy
    dry_run: bool = False
    # The gc's time, as its workflow has it (the server's clock, which close times are
    # in); None: the worker's.
    now: datetime | None = None


class KeptBecause(StrEnum):
    """Why a run holding removable records was left alone."""

    OPEN = "open"  # its workflow (or its graph's) has not closed: running, blocked, waiting
    PINNED = "pinned"  # `loops pin`
    WITHIN = "within retention"  # finished, not long enough ago
    UNKNOWN = "unknown"  # Temporal does not know it, and it has no result branch


class ExpiredRun(BaseModel):
    """One run whose records expired, and which of them go."""

    run_id: str
    reason: str
    work_ref: bool = Field(description="`refs/loopworks/<run>`")
    call_refs: int = Field(ge=0, description="its single-shot calls' trajectory refs")
    branch: bool = Field(description="its result branch `loops/<run>`")
    clones: list[str] = Field(default_factory=list, description="on the worker that ran the gc")
    clone_bytes: int = Field(default=0, ge=0)


class Totals(BaseModel):
    runs: int = Field(default=0, ge=0, description="runs whose records expired")
    work_refs: int = Field(default=0, ge=0)
    call_refs: int = Field(default=0, ge=0)
    branches: int = Field(default=0, ge=0)
    clones: int = Field(default=0, ge=0)
    clone_bytes: int = Field(default=0, ge=0)

    def add(self, other: Totals) -> Totals:
        return Totals(
            **{name: getattr(self, name) + getattr(other, name) for name in Totals.model_fields}
        )


class OriginReport(BaseModel):
    """What the gc removed (or, dry, would remove) on one origin and its runs' clones."""

    origin: str = Field(description="redacted of any credential")
    totals: Totals = Field(default_factory=Totals)
    expired: list[ExpiredRun] = Field(
        default_factory=list, description=f"the first {REPORT_RUNS_CAP}; `totals` counts all"
    )
    kept: dict[KeptBecause, int] = Field(
        default_factory=dict, description="runs with removable records left alone, by why"
    )
    pinned: list[str] = Field(default_factory=list, description="pinned runs on this origin")
    error: str | None = Field(default=None, description="why this origin could not be swept")


class GcReport(BaseModel):
    """`POST /gc`'s answer and `RetentionWorkflow`'s result."""

    dry_run: bool
    policy: RetentionPolicy
    origins: list[OriginReport] = Field(default_factory=list)
    totals: Totals = Field(default_factory=Totals)
    workflow_id: str = ""


class PinRequest(BaseModel):
    """`POST /runs/{id}/pin` and `/unpin`: `repo` for a run Temporal no longer knows (its
    history expired); unset, the run's own repository, else the service's."""

    model_config = ConfigDict(extra="forbid")

    repo: str | None = Field(default=None, max_length=2_000)


class PinState(BaseModel):
    run_id: str
    pinned: bool
    origin: str = Field(description="redacted of any credential")
    ref: str = Field(description="the ref on the origin that holds the pin")
