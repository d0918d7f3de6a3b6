"""The payloads of the run's events, one model per shape (`schemas/events.py` pairs each
event name with its payload)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopworks.schemas.evaluation import DistanceToSuccess
from loopworks.schemas.roles import Issue


class Payload(BaseModel):
    # Lines written by an older loopworks may carry fields this one no longer knows.
    model_config = ConfigDict(extra="ignore", validate_by_name=True, serialize_by_alias=True)


class Timed(Payload):
    """Wall-clock bounds of the step's activity, in seconds since the epoch."""

    started_at: float = 0.0
    finished_at: float = 0.0


class RunStartedPayload(Payload):
    task: str


class HydrationPayload(Payload):
    template: str
    plan: list[str] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list, description="rule ids")
    round: int = Field(default=1, ge=1, description="1, then one more per critic REVISE")
    model_source: str = Field(
        default="", description="the model answering the run (`RunState.model_source`)"
    )


class CriticVerdictPayload(Payload):
    verdict: str
    issues: list[str] = Field(default_factory=list)
    round: int = 1


class PlanPayload(Payload):
    focus: str
    steps: list[str] = Field(default_factory=list)


class ArtifactPayload(Timed):
    commit: str
    hash: str
    changed: list[str] = Field(default_factory=list)


class RefinementPayload(ArtifactPayload):
    previous_artifact_hash: str | None = None


class ChecksPreparedPayload(Timed):
    checks: int
    rules: list[str] = Field(default_factory=list)
    reused: bool = Field(
        default=False, description="the checks an earlier iteration prepared from these rules"
    )


class GroupTiming(Timed):
    checks: int


class EvaluationPayload(Payload):
    score: float
    passed: bool
    threshold: float
    failed: list[str] = Field(default_factory=list, description="failed blocker rule ids")
    warnings: list[str] = Field(default_factory=list, description="failed warning rule ids")
    groups: dict[str, GroupTiming] = Field(default_factory=dict)
    reused: int = Field(
        default=0, description="checks not run again: their results on this commit were known"
    )
    unchecked: list[str] = Field(
        default_factory=list,
        description="rule ids left unchecked (and failed): the check budget was spent",
    )


class AuditPayload(Payload):
    verdict: str
    reason: str = ""
    violations: list[str] = Field(default_factory=list)
    # On BLOCK: the state of the work written up (`.loops/blocked.md`), for the person
    # who must clear the block; `report_commit` holds it on the run's work ref.
    report: str = ""
    report_commit: str | None = None
    # An audit during PRODUCE or REFINE: the tool call it came before (empty: the audit
    # after an evaluation).
    before_call: str = ""


class BlockedPayload(Payload):
    """A custodiet BLOCK: the run waits for `clear_block` (docs/loop.md#verdicts)."""

    reason: str = ""
    violations: list[str] = Field(default_factory=list)
    # The state of the work written up, and where it is: `path` (`.loops/blocked.md`) at
    # `report_commit` on the run's work ref (none: there was no workspace to commit it in).
    report: str = ""
    path: str | None = None
    report_commit: str | None = None
    during: str = Field(
        default="audit",
        description="`audit`: the audit after an evaluation; `produce` or `refine`: an audit "
        "during that step's work, before one of its agent's tool calls",
    )
    refused: str = Field(
        default="", description="the tool call the block refused (an audit during the work)"
    )


class NotifyFailedPayload(Payload):
    """A notification given up after its retries (docs/notifications.md#retries)."""

    event: str = Field(description="the transition it was for, e.g. `completed`")
    webhook: str = Field(description="the receiver: its scheme, host and port")
    key: str = Field(default="", description="its Idempotency-Key")
    error: str = ""


class NotePayload(Payload):
    note: str = ""


class PhaseSwitchedPayload(Payload):
    from_phase: str = Field(alias="from")
    to_phase: str = Field(alias="to")


class QAPayload(Payload):
    verdict: str
    issues: list[Issue] = Field(default_factory=list)
    summary: str = ""
    # What the verdict cost: the agent's model turns and the commands it ran.
    turns: int = 0
    commands: int = 0
    # The commands QA named for its verdict, and whether the verdict stood on them
    # (docs/loop.md#qas-evidence): one that did not is why, and QA is asked once more.
    evidence: list[str] = Field(default_factory=list)
    accepted: bool = True
    rejected: str = ""


class CritiquePayload(Payload):
    issues: list[Issue] = Field(default_factory=list)


class IterationPayload(Payload):
    iteration: int


class ReflectionPayload(Payload):
    reflection: dict[str, Any] = Field(description="the Framework Reflection, as written")
    outcome: str
    commit: str = Field(
        description="the commit reflected on (the reflection itself joins close's commit)"
    )


class PushedPayload(Payload):
    branch: str
    commit: str
    remote_commit: str
    verified: bool


class PhaseErrorPayload(Payload):
    step: str
    error: str


class StoppedPayload(Payload):
    reason: str
    message: str = ""
    distance_to_success: DistanceToSuccess | None = None


class FailedPayload(Payload):
    """A phase error's stop (`reason`, `message`), a failure outside the loop's stop
    conditions (`error`), or a failed reflection (`step`, `error`)."""

    reason: str | None = None
    message: str = ""
    error: str = ""
    step: str | None = None
    distance_to_success: DistanceToSuccess | None = None


class ApprovedPayload(Payload):
    edits: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None


class Empty(Payload):
    pass


class ContinuedPayload(Payload):
    generation: int


class RepairedPayload(Payload):
    repairs: list[str]


# -- the delta playbook ----------------------------------------------------------------


class PlaybookLoadedPayload(Payload):
    """The playbook version hydration read and the items it was given
    (docs/playbook.md#how-hydration-reads-it)."""

    name: str
    version: int
    item_ids: list[str] = Field(default_factory=list)
    pinned: bool = False


class CuratedPayload(Payload):
    summary: str
    proposed_updates: int = 0
    python_helpers: list[str] = Field(default_factory=list)
    reference_requests: list[str] = Field(default_factory=list)


class SkillLoopPayload(Payload):
    """What the skill sub-loop kept: files accepted (committed on the run's branch) and
    rejected, with why; `error` when the sub-loop itself failed (the run goes on)."""

    accepted: list[str] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict)
    commit: str | None = None
    deltas: int = 0
    error: str | None = None


class PlaybookUpdatedPayload(Payload):
    name: str
    batch_id: str
    version: int
    changed: bool
    results: dict[str, int] = Field(default_factory=dict, description="deltas by result")
    pruned: list[str] = Field(default_factory=list)
