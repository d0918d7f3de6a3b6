"""The workflow's own input and result, and what a run carries across continue-as-new."""

from __future__ import annotations

from pydantic import BaseModel, Field

from loopworks.schemas.evaluation import Evaluation
from loopworks.schemas.events import Event
from loopworks.schemas.roles import IterationPlan, Role
from loopworks.schemas.run import RunRequest, RunState
from loopworks.schemas.steps import ArtifactOutput


class LoopCarry(BaseModel):
    """A run's whole memory at an iteration boundary, so a fresh history can go on."""

    state: RunState
    events: list[Event]
    calls: dict[Role, int]
    commit: str
    intent: str
    critic_verdict: str | None = None
    guidance: list[str] = Field(default_factory=list)
    last_evaluation: Evaluation | None = None
    previous_evaluation: Evaluation | None = None
    last_plan: IterationPlan | None = None
    last_artifact: ArtifactOutput | None = None
    next_iteration: int
    paused: bool = False
    operator_note: str | None = None
    generation: int = Field(default=1, ge=1)


class LoopInput(BaseModel):
    run_id: str
    alias: str
    request: RunRequest
    created_at: str
    carry: LoopCarry | None = None
    # Continue-as-new once the history has this many events (at an iteration
    # boundary); unset, the server's own suggestion decides.
    continue_as_new_after_events: int | None = Field(default=None, ge=10)


class LoopResult(BaseModel):
    state: RunState
    events: int
    # The whole history.jsonl, so a finished run's events read without a worker.
    log: list[Event] = Field(default_factory=list)
