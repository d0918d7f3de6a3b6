"""Request and response bodies that exist only at the HTTP edge.

Everything that also crosses the workflow boundary (RunRequest, RunState, Event) lives in
`schemas/`; these are the API's own envelopes around it. The `loops` CLI parses the
API's answers with them, so this module imports only pydantic and `schemas/`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loopworks.schemas.rules import Phase
from loopworks.schemas.run import RunStatus

# GET /runs/{id}/artifact's headers: the run's status (a live run's artifact is its latest
# draft) and the commit the artifact was read from.
RUN_STATUS_HEADER = "X-Loops-Run-Status"
ARTIFACT_COMMIT_HEADER = "X-Loops-Artifact-Commit"


class RunCreated(BaseModel):
    run_id: str
    alias: str
    status_url: str


class RunSummary(BaseModel):
    """One row of `GET /runs`, read from Temporal visibility (search attributes)."""

    run_id: str
    alias: str | None = None
    status: RunStatus
    iteration: int | None = None
    phase: Phase | None = None
    last_score: float | None = None
    blocked: bool | None = None
    started_at: datetime
    closed_at: datetime | None = None
    # Temporal's own view, which differs from `status` when a run was terminated from outside.
    execution_status: str | None = None
    started_by: str | None = Field(
        default=None, description="the API token's name that started it (its graph's)"
    )


class GraphCreated(BaseModel):
    """`POST /graphs`: the new graph's id and where to read it."""

    graph_id: str
    status_url: str


class GraphListed(BaseModel):
    """One row of `GET /graphs`, read from Temporal visibility."""

    graph_id: str
    status: str = Field(description="Temporal's execution status of the graph workflow")
    start_time: str | None = None
    started_by: str | None = Field(default=None, description="the API token's name that started it")


class NoArguments(BaseModel):
    """The body of an action that takes nothing (pause, resume): `{}`, sent as JSON so that
    no browser sends it cross-site without a preflight (api/same_origin.py)."""

    model_config = ConfigDict(extra="forbid")


class StopRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=2_000)


class ClearBlockRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(min_length=1, max_length=5_000)

    @field_validator("note")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("note must not be blank")
        return value


class ErrorBody(BaseModel):
    """Every error response: FastAPI's `detail`, plus a sentence a person can act on."""

    detail: str | list[dict[str, Any]]
    message: str | None = None
    # A 429: the setting of the cap or limit reached, and what is left of it.
    limit: str | None = None
    left: float | None = None


class WorkspaceEntry(BaseModel):
    """One of a run's working clones on the service's disk."""

    name: str = Field(description="directory name under the service's workspaces directory")
    bytes: int = Field(ge=0, description="its files' apparent size")


class RunWorkspace(BaseModel):
    """`GET /runs/{id}/workspace`: what `DELETE` would remove."""

    run_id: str
    finished: bool = Field(description="the run has ended, so its workspace may be removed")
    entries: list[WorkspaceEntry]
    bytes: int = Field(ge=0, description="all entries together")


class WorkspaceRemoved(BaseModel):
    """`DELETE /runs/{id}/workspace`: what was removed (nothing, when nothing was there).

    The run's branch on its origin is its result and is never touched."""

    run_id: str
    removed: list[WorkspaceEntry]
    bytes: int = Field(ge=0, description="freed, all entries together")
