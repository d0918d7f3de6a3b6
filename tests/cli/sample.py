"""A real run's events and states (offline model), trimmed of timing fields, built with
the models the API serves (typed events, `RunState`, `RunSummary`): a field renamed in
`schemas/` or `api/models.py` breaks this file, not a silent dict key."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict

from pydantic import BaseModel

from loopworks.api.models import RunSummary
from loopworks.schemas.evaluation import DistanceToSuccess
from loopworks.schemas.events import (
    ArtifactCreated,
    ArtifactPayload,
    ChecksPrepared,
    ChecksPreparedPayload,
    CriticVerdictGiven,
    CriticVerdictPayload,
    CritiqueDone,
    CritiquePayload,
    EvaluationDone,
    EvaluationPayload,
    Event,
    HydrationDone,
    HydrationPayload,
    IterationAdvanced,
    IterationPayload,
    PhaseSwitched,
    PhaseSwitchedPayload,
    PlanCreated,
    PlanPayload,
    Pushed,
    PushedPayload,
    QAPayload,
    QAVerdictGiven,
    RefinementDone,
    RefinementPayload,
    ReflectionDone,
    ReflectionPayload,
    RunStarted,
    RunStartedPayload,
    Stopped,
    StoppedPayload,
)
from loopworks.schemas.roles import Issue
from loopworks.schemas.rules import Phase
from loopworks.schemas.run import (
    RunState,
    RunStatus,
    Step,
    StopInfo,
    StopReason,
    Thresholds,
)

RUN_ID = "write-a-short-guide-to-reflex-loops-20261122-051141-c0b93a"
BRANCH = f"loops/{RUN_ID}"
RULES_A = ["has-title", "covers-task", "has-summary", "not-empty"]
RULES_B = [*RULES_A, "has-verification", "no-placeholders", "coherent"]
FIRST_HASH = "ab49bd4b7ba4b1ecfdb755ab22716379a5ff08ad645d0f0c65f579c47a1f2e3a"
SECOND_HASH = "e0016d7fa9029a871e7e86ddf57c97f249cd7ab01a26498dbdfe4c3521f1247f"
REFLECTION_COMMIT = "60f3adcef0415d366f697c9d8372db33e6f44c91"


class Envelope(TypedDict):
    seq: int
    ts: str
    run_id: str
    iteration: int
    phase: Phase
    step: str


def at(seq: int, clock: str, iteration: int, phase: Phase, step: Step) -> Envelope:
    """The envelope of event `seq`, at `05:11:<clock>` on the run's day."""
    return Envelope(
        seq=seq,
        ts=f"2026-11-22T05:11:{clock}+00:00",
        run_id=RUN_ID,
        iteration=iteration,
        phase=phase,
        step=step.value,
    )


A, B = Phase.A, Phase.B

EVENTS: list[Event] = [
    RunStarted(
        **at(1, "42.855673", 0, A, Step.HYDRATE),
        payload=RunStartedPayload(task="Write a short guide to reflex loops"),
    ),
    HydrationDone(
        **at(2, "43.099494", 0, A, Step.HYDRATE),
        payload=HydrationPayload(template="minor-edit", rules=RULES_B, round=1),
    ),
    CriticVerdictGiven(
        **at(3, "43.124747", 0, A, Step.CRITIC),
        payload=CriticVerdictPayload(verdict="PROCEED", issues=[], round=1),
    ),
    PlanCreated(
        **at(4, "43.162045", 1, A, Step.PLAN),
        payload=PlanPayload(focus="first complete draft", steps=["Draft every section"]),
    ),
    ChecksPrepared(
        **at(5, "43.204215", 1, A, Step.PRODUCE_PREPARE),
        payload=ChecksPreparedPayload(checks=4, rules=RULES_A),
    ),
    ArtifactCreated(
        **at(6, "43.344603", 1, A, Step.PRODUCE_PREPARE),
        payload=ArtifactPayload(
            commit="5c9be34b02e4482d25d146c68249878d55d01c0c",
            hash=FIRST_HASH,
            changed=["initial generation"],
        ),
    ),
    EvaluationDone(
        **at(7, "43.479976", 1, A, Step.EVALUATE),
        payload=EvaluationPayload(score=1.0, passed=True, threshold=0.8),
    ),
    PhaseSwitched(
        **at(8, "43.479976", 1, B, Step.EVALUATE),
        payload=PhaseSwitchedPayload(from_phase="A", to_phase="B"),
    ),
    ChecksPrepared(
        **at(9, "43.514051", 1, B, Step.PREPARE),
        payload=ChecksPreparedPayload(checks=7, rules=RULES_B),
    ),
    EvaluationDone(
        **at(10, "43.699361", 1, B, Step.EVALUATE),
        payload=EvaluationPayload(
            score=0.7778, passed=False, threshold=0.9, failed=["has-verification"]
        ),
    ),
    CritiqueDone(
        **at(11, "43.752761", 1, B, Step.CRITIQUE),
        payload=CritiquePayload(
            issues=[
                Issue(
                    rule_id="has-verification",
                    problem="pattern '^## Verification' not found in artifact.md",
                    fix="Make the artifact satisfy: The artifact says how to verify the result",
                )
            ]
        ),
    ),
    RefinementDone(
        **at(12, "43.871146", 1, B, Step.REFINE),
        payload=RefinementPayload(
            commit="32daf6bad4e580b06d64f79d8aa44b3d49654119",
            hash=SECOND_HASH,
            changed=["## Verification"],
            previous_artifact_hash=FIRST_HASH,
        ),
    ),
    IterationAdvanced(
        **at(13, "43.871146", 1, B, Step.REFINE), payload=IterationPayload(iteration=2)
    ),
    PlanCreated(
        **at(14, "43.950363", 2, B, Step.PLAN),
        payload=PlanPayload(
            focus="fix has-verification", steps=["Make rule has-verification pass"]
        ),
    ),
    ChecksPrepared(
        **at(15, "43.993239", 2, B, Step.PRODUCE_PREPARE),
        payload=ChecksPreparedPayload(checks=7, rules=RULES_B),
    ),
    ArtifactCreated(
        **at(16, "44.084761", 2, B, Step.PRODUCE_PREPARE),
        payload=ArtifactPayload(
            commit="adc45e5392fbcd3b383389a8e57903a61326ea56", hash=SECOND_HASH, changed=["none"]
        ),
    ),
    EvaluationDone(
        **at(17, "44.333701", 2, B, Step.EVALUATE),
        payload=EvaluationPayload(score=1.0, passed=True, threshold=0.9),
    ),
    QAVerdictGiven(
        **at(18, "44.381418", 2, B, Step.QA),
        payload=QAPayload(verdict="VERIFIED", summary="acceptance criteria are met"),
    ),
    Stopped(
        **at(19, "44.381418", 2, B, Step.QA),
        payload=StoppedPayload(reason=StopReason.THRESHOLD_REACHED.value),
    ),
    ReflectionDone(
        **at(20, "44.525465", 2, B, Step.REFLECT),
        payload=ReflectionPayload(
            reflection={"outcome": "Success"}, outcome="Success", commit=REFLECTION_COMMIT
        ),
    ),
    Pushed(
        **at(21, "44.717221", 2, B, Step.CLOSE),
        payload=PushedPayload(
            branch=BRANCH,
            commit=REFLECTION_COMMIT,
            remote_commit=REFLECTION_COMMIT,
            verified=True,
        ),
    ),
]

STATE = RunState(
    run_id=RUN_ID,
    alias="write-a-short-guide-to-reflex-loops",
    status=RunStatus.COMPLETED,
    task="Write a short guide to reflex loops",
    iteration=2,
    max_iterations=4,
    phase=Phase.B,
    current_step=Step.DONE,
    thresholds=Thresholds(),
    last_score=1.0,
    stop=StopInfo(passed=True, reason=StopReason.THRESHOLD_REACHED),
    stop_reason=StopReason.THRESHOLD_REACHED,
    artifact_commit="adc45e5392fbcd3b383389a8e57903a61326ea56",
    branch=BRANCH,
    origin="/srv/loops/origin.git",
    created_at="2026-11-22T05:11:41.694563+00:00",
    updated_at="2026-11-22T05:11:44.717221+00:00",
)

LIMIT_RUN_ID = "write-a-short-guide-to-reflex-loops-20261122-051145-3632a2"
LIMIT_STATE = STATE.model_copy(
    update={
        "run_id": LIMIT_RUN_ID,
        "status": RunStatus.STOPPED,
        "iteration": 1,
        "max_iterations": 1,
        "phase": Phase.A,
        "last_score": 0.0,
        "stop": StopInfo(
            passed=False,
            reason=StopReason.ITERATION_LIMIT,
            distance_to_success=DistanceToSuccess(
                phase=Phase.A,
                threshold=0.8,
                score=0.0,
                gap=0.8,
                failed_blocker_count=1,
                blocking_rule_ids=["impossible"],
                passed_rules=0,
                total_rules=1,
            ),
        ),
        "stop_reason": StopReason.ITERATION_LIMIT,
        "artifact_commit": "12e42f738f154e77e4440c15cb831e81116b23b1",
        "branch": f"loops/{LIMIT_RUN_ID}",
        "created_at": "2026-11-22T05:11:45.130142+00:00",
        "updated_at": "2026-11-22T05:11:45.877590+00:00",
    }
)

RUNS: list[RunSummary] = [
    RunSummary(
        run_id=LIMIT_RUN_ID,
        alias="write-a-short-guide-to-reflex-loops",
        status=RunStatus.STOPPED,
        iteration=1,
        phase=Phase.A,
        last_score=0.0,
        blocked=False,
        started_at=datetime.fromisoformat("2026-11-22T05:11:45.131618+00:00"),
        closed_at=datetime.fromisoformat("2026-11-22T05:11:45.887630+00:00"),
        execution_status="completed",
    ),
    RunSummary(
        run_id=RUN_ID,
        alias="write-a-short-guide-to-reflex-loops",
        status=RunStatus.COMPLETED,
        iteration=2,
        phase=Phase.B,
        last_score=1.0,
        blocked=False,
        started_at=datetime.fromisoformat("2026-11-22T05:11:41.699257+00:00"),
        closed_at=datetime.fromisoformat("2026-11-22T05:11:44.730275+00:00"),
        execution_status="completed",
    ),
]


def wire(model: BaseModel) -> dict[str, Any]:
    """What the API sends for a model: its JSON."""
    return model.model_dump(mode="json")


def wire_list(models: Sequence[BaseModel]) -> list[dict[str, Any]]:
    return [wire(model) for model in models]
