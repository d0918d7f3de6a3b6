"""Inputs and outputs of every activity: one model each, so histories stay readable and
activities can change their fields without breaking replay of old runs."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from schemas.evaluation import CheckResult, Evaluation
from schemas.insights import FrameworkReflection, SessionInsights
from schemas.roles import (
    Audit,
    CriticReview,
    Critique,
    Hydration,
    IterationPlan,
    QAReport,
)
from schemas.rules import CheckGroup, Phase, PreparedCheck, Rule
from schemas.run import RunState, TokenUsage

# Where a run's artifact lives in its workspace (seed 001's artifact.md).
ARTIFACT_PATH = "artifact.md"

# The ApplicationError type of an answer that does not fit its role's schema: never
# retried by Temporal, because the workflow owns seed 001's "retry the phase once".
INVALID_OUTPUT = "InvalidOutput"
# Each PRODUCE and REFINE commits its agent's trajectory here, one JSON-lines file a step.
TRAJECTORY_DIR = ".loops/trajectory"


def trajectory_path(iteration: int, step: str) -> str:
    """`.loops/trajectory/01-produce.jsonl`: a retried step rewrites its own file, and the
    names sort in the order the steps ran."""
    return f"{TRAJECTORY_DIR}/{iteration:02d}-{step}.jsonl"


class Timing(BaseModel):
    """Wall-clock bounds of an activity, measured inside it (activities may read the clock)."""

    started_at: float = 0.0
    finished_at: float = 0.0


class ModelStep(BaseModel):
    """Fields every model-backed step carries.

    `call_index` counts this role's calls in the run; the workflow keeps the count, so an
    activity retry repeats the same call and a phase retry makes a new one.
    """

    run_id: str
    iteration: int = 0
    phase: Phase = Phase.A
    call_index: int = Field(default=1, ge=1)
    operator_note: str | None = None


class GitLocation(BaseModel):
    origin: str
    commit: str


# --- workspace and close -------------------------------------------------------------


class WorkspaceRequest(BaseModel):
    run_id: str
    repo: str | None = None
    base_branch: str | None = None


class WorkspaceInfo(BaseModel):
    origin: str
    base_branch: str
    base_commit: str
    branch: str


class CloseInput(BaseModel):
    run_id: str
    origin: str
    branch: str
    commit: str


class CloseOutput(BaseModel):
    branch: str
    commit: str
    remote_commit: str
    verified: bool


# --- hydration and critic ------------------------------------------------------------


class HydrateInput(ModelStep):
    task: str
    template: str | None = None
    user_rules: list[Rule] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)


class HydrateOutput(BaseModel):
    hydration: Hydration
    usage: TokenUsage = Field(default_factory=TokenUsage)


class ReviewInput(ModelStep):
    task: str
    hydration: Hydration


class ReviewOutput(BaseModel):
    review: CriticReview
    usage: TokenUsage = Field(default_factory=TokenUsage)


# --- iteration -------------------------------------------------------------------------


class PlanInput(ModelStep):
    task: str
    intent: str
    acceptance_criteria: list[str]
    last_evaluation: Evaluation | None = None


class PlanOutput(BaseModel):
    plan: IterationPlan
    usage: TokenUsage = Field(default_factory=TokenUsage)


class ProduceInput(ModelStep):
    task: str
    intent: str
    acceptance_criteria: list[str]
    rules: list[Rule]
    plan: IterationPlan
    workspace: GitLocation
    committed_at: datetime


class RefineInput(ModelStep):
    task: str
    critique: Critique
    workspace: GitLocation
    committed_at: datetime


class ArtifactOutput(BaseModel):
    commit: str
    artifact_hash: str
    previous_artifact_hash: str | None = None
    changed: list[str] = Field(default_factory=list)
    summary: str = ""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    timing: Timing = Field(default_factory=Timing)
    # The agent's side of the step; its whole trajectory is in the commit, at this path.
    turns: int = 0
    turn_limit_reached: bool = False
    trajectory_path: str | None = None


class PrepareInput(ModelStep):
    task: str
    rules: list[Rule]


class PrepareOutput(BaseModel):
    checks: list[PreparedCheck]
    usage: TokenUsage = Field(default_factory=TokenUsage)
    timing: Timing = Field(default_factory=Timing)


class EvaluateGroupInput(ModelStep):
    task: str
    group: CheckGroup
    checks: list[PreparedCheck]
    workspace: GitLocation


class EvaluateGroupOutput(BaseModel):
    group: CheckGroup
    results: list[CheckResult]
    usage: TokenUsage = Field(default_factory=TokenUsage)
    timing: Timing = Field(default_factory=Timing)


class AuditInput(ModelStep):
    task: str
    intent: str
    plan_focus: str
    evaluation: Evaluation | None = None


class AuditOutput(BaseModel):
    audit: Audit
    usage: TokenUsage = Field(default_factory=TokenUsage)


class CritiqueInput(ModelStep):
    task: str
    evaluation: Evaluation
    rules: list[Rule]
    workspace: GitLocation


class CritiqueOutput(BaseModel):
    critique: Critique
    usage: TokenUsage = Field(default_factory=TokenUsage)


class QAInput(ModelStep):
    task: str
    intent: str
    acceptance_criteria: list[str]
    evaluation: Evaluation | None
    workspace: GitLocation


class QAOutput(BaseModel):
    report: QAReport
    usage: TokenUsage = Field(default_factory=TokenUsage)


# --- reflection ------------------------------------------------------------------------


class ReflectInput(ModelStep):
    state: RunState
    critic_verdict: str | None = None
    subagents_invoked: list[str] = Field(default_factory=list)
    guidance: list[str] = Field(default_factory=list)
    workspace: GitLocation
    committed_at: datetime


class ReflectOutput(BaseModel):
    reflection: FrameworkReflection
    insights: SessionInsights
    commit: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
