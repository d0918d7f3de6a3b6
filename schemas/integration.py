"""Inputs and outputs of a task graph's integration activities (activities/integration.py):
the integration branch, the merge queue that merges one task branch at a time into it, and
the status ledger kept on it (docs/graphs.md#the-ledger)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from loopworks.schemas.tasks import LedgerLine, Task

# How much of the verification command's output (or of git's conflict report) a merge
# answers with: enough for a fix task's brief, small enough for workflow history.
OUTPUT_TAIL_CHARS = 4000


class IntegrationRequest(BaseModel):
    graph_id: str
    repo: str | None = Field(
        default=None, description="Origin (local path or URL); None: the service's default"
    )
    base_branch: str | None = Field(
        default=None, description="Branch the integration branch starts from; None: origin's"
    )


class IntegrationInfo(BaseModel):
    origin: str
    branch: str = Field(description="`graphs/<graph id>` on origin")
    commit: str = Field(description="The integration branch's head")
    files: list[str] = Field(
        default_factory=list, description="Every path in the tree at `commit`, sorted"
    )
    prep_package: str | None = Field(
        default=None, description="`.workflow/.loop/prep-package.json` at `commit`, if any"
    )
    prep_tasks: str | None = Field(
        default=None, description="`.workflow/.loop/prep-tasks.jsonl` at `commit`, if any"
    )


class MergeRequest(BaseModel):
    graph_id: str
    origin: str
    integration_branch: str
    task: Task
    task_branch: str = Field(description="The child loop's pushed branch, `loops/<run id>`")
    attempt: int = Field(default=1, ge=1)
    committed_at: datetime = Field(description="Date of the commits the merge makes")


class MergeOutcome(BaseModel):
    merged: bool
    # `orchestrator_files`: the task branch changed the graph's ledger or task files,
    # which only the orchestrator writes (docs/graphs.md#the-merge-queue).
    reason: Literal["merged", "conflict", "verification_failed", "orchestrator_files"]
    commit: str = Field(
        description="The integration head after: the new merge when merged, else unchanged"
    )
    exit_code: int | None = Field(
        default=None, description="The verification command's exit code (None: timed out)"
    )
    output_sha256: str | None = Field(
        default=None, description="SHA-256 of the verification command's captured output"
    )
    output_tail: str = Field(
        default="",
        description="The end of the verification output, or git's description of a conflict",
    )
    conflicts: list[str] = Field(default_factory=list, description="Paths that conflicted")
    files_added: list[str] = Field(default_factory=list)
    files_modified: list[str] = Field(default_factory=list)
    files_deleted: list[str] = Field(default_factory=list)


class LedgerRequest(BaseModel):
    origin: str
    integration_branch: str
    lines: list[LedgerLine] = Field(default_factory=list)
    start: int = Field(
        default=0,
        ge=0,
        description="How many of the graph's lines come before `lines`: when the ledger "
        "starts with them (`start_sha256`), it is made exactly those and `lines`. Else "
        "`lines` missing from it are appended",
    )
    start_sha256: str | None = Field(
        default=None, description="`ledger_sha256` of the graph's first `start` lines"
    )
    tasks: list[Task] = Field(
        default_factory=list, description="Tasks whose docs/tasks/<id>.json must exist"
    )
    committed_at: datetime


class LedgerOutput(BaseModel):
    commit: str = Field(description="The integration head after (unchanged when nothing was)")
    appended: int = Field(default=0, description="Lines appended (those not already there)")
    archived: list[str] = Field(
        default_factory=list, description="Ids whose task files moved into ARCHIVE.jsonl"
    )
