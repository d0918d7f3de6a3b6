"""The run's history.jsonl line (seed 001 Step 6) and its event names."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from loopworks.schemas.rules import Phase


class EventName(StrEnum):
    # Seed 001.
    RUN_STARTED = "run_started"
    PLAN_CREATED = "plan_created"
    ARTIFACT_CREATED = "artifact_created"
    CHECKS_PREPARED = "checks_prepared"
    EVALUATION_DONE = "evaluation_done"
    CRITIQUE_DONE = "critique_done"
    REFINEMENT_DONE = "refinement_done"
    PHASE_SWITCHED = "phase_switched"
    ITERATION_ADVANCED = "iteration_advanced"
    PHASE_ERROR = "phase_error"
    STOPPED = "stopped"
    FAILED = "failed"
    # Seed 000.
    HYDRATION_DONE = "hydration_done"
    CRITIC_VERDICT = "critic_verdict"
    AUDIT_VERDICT = "audit_verdict"
    BLOCK_CLEARED = "block_cleared"
    QA_VERDICT = "qa_verdict"
    REFLECTION_DONE = "reflection_done"
    PUSHED = "pushed"
    # Control (seed 002, seed 001's confirmation).
    APPROVED = "approved"
    PAUSED = "paused"
    RESUMED = "resumed"
    # A fresh Temporal history for a long run (the run and its events go on).
    CONTINUED_AS_NEW = "continued_as_new"
    # A model's answer was invalid and it repaired it when shown the errors (seed 001's
    # "retry once" that succeeded); payload `repairs` holds the feedback it was sent.
    OUTPUT_REPAIRED = "output_repaired"
    COMPLETED = "completed"


class Event(BaseModel):
    seq: int = Field(ge=1, description="1-based position in the run's history")
    ts: str
    run_id: str
    iteration: int
    phase: Phase
    step: str
    event: EventName
    status: str = "ok"
    payload: dict[str, Any] = Field(default_factory=dict)
