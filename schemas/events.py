"""The run's history.jsonl line: one model per event, keyed on its name (docs/loop.md#events).

Every line has the same envelope (`seq`, `ts`, `run_id`, `iteration`, `phase`, `step`,
`event`, `status`) and a `payload` whose shape the event's name fixes. The workflow emits
these models, git keeps them, the API serves them and the CLI parses them with the same
`EVENT` adapter, so a payload field renamed on one side fails the other's tests.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from loopworks.schemas.payloads import (
    ApprovedPayload,
    ArtifactPayload,
    AuditPayload,
    BlockedPayload,
    ChecksPreparedPayload,
    ContinuedPayload,
    CriticVerdictPayload,
    CritiquePayload,
    CuratedPayload,
    Empty,
    EvaluationPayload,
    FailedPayload,
    HydrationPayload,
    IterationPayload,
    NotePayload,
    NotifyFailedPayload,
    Payload,
    PhaseErrorPayload,
    PhaseSwitchedPayload,
    PlanPayload,
    PlaybookLoadedPayload,
    PlaybookUpdatedPayload,
    PushedPayload,
    QAPayload,
    RefinementPayload,
    ReflectionPayload,
    RepairedPayload,
    RunStartedPayload,
    SkillLoopPayload,
    StoppedPayload,
)
from loopworks.schemas.rules import Phase


class EventName(StrEnum):
    # The loop's steps.
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
    # The roles around the loop: hydration, review, audit, QA, reflection; the push.
    HYDRATION_DONE = "hydration_done"
    CRITIC_VERDICT = "critic_verdict"
    AUDIT_VERDICT = "audit_verdict"
    # A custodiet BLOCK: the run waits for a person (with the write-up, as the verdict has).
    BLOCKED = "blocked"
    BLOCK_CLEARED = "block_cleared"
    QA_VERDICT = "qa_verdict"
    REFLECTION_DONE = "reflection_done"
    PUSHED = "pushed"
    # Control messages (docs/loop.md#control): approval, pause and resume.
    APPROVED = "approved"
    PAUSED = "paused"
    RESUMED = "resumed"
    # A fresh Temporal history for a long run (the run and its events go on).
    CONTINUED_AS_NEW = "continued_as_new"
    # A model's answer was invalid and it repaired it when shown the errors: the one retry
    # an invalid answer gets, which succeeded (docs/loop.md#invalid-answers).
    OUTPUT_REPAIRED = "output_repaired"
    # The worker that prepared the run runs commands outside the sandbox (LOOPS_SANDBOX=off).
    COMMANDS_UNSANDBOXED = "commands_unsandboxed"
    # The delta playbook (docs/playbook.md): what hydration was given, what the task
    # curator decided, what the skill sub-loop kept, and what the playbook applied.
    PLAYBOOK_LOADED = "playbook_loaded"
    CURATED = "curated"
    SKILL_LOOP_DONE = "skill_loop_done"
    PLAYBOOK_UPDATED = "playbook_updated"
    # A notification its webhook never took, after its retries (docs/notifications.md).
    NOTIFY_FAILED = "notify_failed"


# --- events ------------------------------------------------------------------------------


class EventBase(BaseModel):
    seq: int = Field(ge=1, description="1-based position in the run's history")
    ts: str
    run_id: str
    iteration: int
    phase: Phase
    step: str
    status: str = "ok"


class RunStarted(EventBase):
    event: Literal[EventName.RUN_STARTED] = EventName.RUN_STARTED
    payload: RunStartedPayload


class HydrationDone(EventBase):
    event: Literal[EventName.HYDRATION_DONE] = EventName.HYDRATION_DONE
    payload: HydrationPayload


class CriticVerdictGiven(EventBase):
    event: Literal[EventName.CRITIC_VERDICT] = EventName.CRITIC_VERDICT
    payload: CriticVerdictPayload


class PlanCreated(EventBase):
    event: Literal[EventName.PLAN_CREATED] = EventName.PLAN_CREATED
    payload: PlanPayload


class ArtifactCreated(EventBase):
    event: Literal[EventName.ARTIFACT_CREATED] = EventName.ARTIFACT_CREATED
    payload: ArtifactPayload


class RefinementDone(EventBase):
    event: Literal[EventName.REFINEMENT_DONE] = EventName.REFINEMENT_DONE
    payload: RefinementPayload


class ChecksPrepared(EventBase):
    event: Literal[EventName.CHECKS_PREPARED] = EventName.CHECKS_PREPARED
    payload: ChecksPreparedPayload


class EvaluationDone(EventBase):
    event: Literal[EventName.EVALUATION_DONE] = EventName.EVALUATION_DONE
    payload: EvaluationPayload


class AuditVerdictGiven(EventBase):
    event: Literal[EventName.AUDIT_VERDICT] = EventName.AUDIT_VERDICT
    payload: AuditPayload


class Blocked(EventBase):
    event: Literal[EventName.BLOCKED] = EventName.BLOCKED
    payload: BlockedPayload


class BlockCleared(EventBase):
    event: Literal[EventName.BLOCK_CLEARED] = EventName.BLOCK_CLEARED
    payload: NotePayload


class PhaseSwitched(EventBase):
    event: Literal[EventName.PHASE_SWITCHED] = EventName.PHASE_SWITCHED
    payload: PhaseSwitchedPayload


class QAVerdictGiven(EventBase):
    event: Literal[EventName.QA_VERDICT] = EventName.QA_VERDICT
    payload: QAPayload


class CritiqueDone(EventBase):
    event: Literal[EventName.CRITIQUE_DONE] = EventName.CRITIQUE_DONE
    payload: CritiquePayload


class IterationAdvanced(EventBase):
    event: Literal[EventName.ITERATION_ADVANCED] = EventName.ITERATION_ADVANCED
    payload: IterationPayload


class ReflectionDone(EventBase):
    event: Literal[EventName.REFLECTION_DONE] = EventName.REFLECTION_DONE
    payload: ReflectionPayload


class Pushed(EventBase):
    event: Literal[EventName.PUSHED] = EventName.PUSHED
    payload: PushedPayload


class PhaseError(EventBase):
    event: Literal[EventName.PHASE_ERROR] = EventName.PHASE_ERROR
    payload: PhaseErrorPayload


class Stopped(EventBase):
    event: Literal[EventName.STOPPED] = EventName.STOPPED
    payload: StoppedPayload


class Failed(EventBase):
    event: Literal[EventName.FAILED] = EventName.FAILED
    payload: FailedPayload


class Approved(EventBase):
    event: Literal[EventName.APPROVED] = EventName.APPROVED
    payload: ApprovedPayload


class Paused(EventBase):
    event: Literal[EventName.PAUSED] = EventName.PAUSED
    payload: Empty = Field(default_factory=Empty)


class Resumed(EventBase):
    event: Literal[EventName.RESUMED] = EventName.RESUMED
    payload: Empty = Field(default_factory=Empty)


class ContinuedAsNew(EventBase):
    event: Literal[EventName.CONTINUED_AS_NEW] = EventName.CONTINUED_AS_NEW
    payload: ContinuedPayload


class CommandsUnsandboxed(EventBase):
    event: Literal[EventName.COMMANDS_UNSANDBOXED] = EventName.COMMANDS_UNSANDBOXED
    payload: NotePayload


class OutputRepaired(EventBase):
    event: Literal[EventName.OUTPUT_REPAIRED] = EventName.OUTPUT_REPAIRED
    payload: RepairedPayload


class PlaybookLoaded(EventBase):
    event: Literal[EventName.PLAYBOOK_LOADED] = EventName.PLAYBOOK_LOADED
    payload: PlaybookLoadedPayload


class Curated(EventBase):
    event: Literal[EventName.CURATED] = EventName.CURATED
    payload: CuratedPayload


class SkillLoopDone(EventBase):
    event: Literal[EventName.SKILL_LOOP_DONE] = EventName.SKILL_LOOP_DONE
    payload: SkillLoopPayload


class PlaybookUpdated(EventBase):
    event: Literal[EventName.PLAYBOOK_UPDATED] = EventName.PLAYBOOK_UPDATED
    payload: PlaybookUpdatedPayload


class NotifyFailed(EventBase):
    event: Literal[EventName.NOTIFY_FAILED] = EventName.NOTIFY_FAILED
    payload: NotifyFailedPayload


Event = Annotated[
    RunStarted
    | HydrationDone
    | CriticVerdictGiven
    | PlanCreated
    | ArtifactCreated
    | RefinementDone
    | ChecksPrepared
    | EvaluationDone
    | AuditVerdictGiven
    | Blocked
    | BlockCleared
    | PhaseSwitched
    | QAVerdictGiven
    | CritiqueDone
    | IterationAdvanced
    | ReflectionDone
    | Pushed
    | PhaseError
    | Stopped
    | Failed
    | Approved
    | Paused
    | Resumed
    | ContinuedAsNew
    | OutputRepaired
    | CommandsUnsandboxed
    | PlaybookLoaded
    | Curated
    | SkillLoopDone
    | PlaybookUpdated
    | NotifyFailed,
    Field(discriminator="event"),
]

# Parses one line or one API item, whichever event it is.
EVENT: TypeAdapter[Event] = TypeAdapter(Event)
EVENTS: TypeAdapter[list[Event]] = TypeAdapter(list[Event])

# The event model for each name, for code that builds an event from its name and payload.
EVENT_TYPES: dict[EventName, type[EventBase]] = {
    cls.model_fields["event"].default: cls  # type: ignore[misc]
    for cls in EventBase.__subclasses__()
}


def payload_type(name: EventName) -> type[Payload]:
    annotation = EVENT_TYPES[name].model_fields["payload"].annotation
    assert isinstance(annotation, type) and issubclass(annotation, Payload)
    return annotation
