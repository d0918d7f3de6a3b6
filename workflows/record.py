"""The run's record as the workflow keeps it: its state (run.json on the branch), its
events (history.jsonl, of which the workflow keeps a bounded tail: git holds the rest) and
the search attributes that make the Temporal UI a dashboard.

Used from inside the workflow only: it reads `workflow.now()`, never the real clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from loopworks.schemas.evaluation import Evaluation
    from loopworks.schemas.events import (
        EVENT_TYPES,
        ArtifactPayload,
        Event,
        EventName,
        FailedPayload,
        Payload,
        RefinementPayload,
        RepairedPayload,
        StoppedPayload,
    )
    from loopworks.schemas.loop import RunMemory
    from loopworks.schemas.roles import Critique, IterationPlan
    from loopworks.schemas.run import (
        STATUS_FOR_REASON,
        RunState,
        RunStatus,
        Step,
        StopInfo,
        StopReason,
        TokenUsage,
    )
    from loopworks.schemas.steps import (
        ARTIFACT_PATH,
        ArtifactOutput,
        GitLocation,
        ModelOutput,
        SavedLog,
    )
    from loopworks.schemas.summary import IterationSummary, render_summary
    from loopworks.workflows import decisions
    from loopworks.workflows.search_attributes import (
        LOOP_ALIAS,
        LOOP_BLOCKED,
        LOOP_ITERATION,
        LOOP_PHASE,
        LOOP_SCORE,
        LOOP_STATUS,
    )

# A repair's feedback (validation errors) is kept in events up to this many characters.
REPAIR_TEXT_CAP = 500


class SearchAttributes:
    """A workflow's search attributes as last upserted: each upsert is a command in the
    history, so only what changed is sent."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def upsert(self, wanted: list[SearchAttributeUpdate[Any]]) -> None:
        changed = [u for u in wanted if self._values.get(u.key.name) != u.value]
        if changed:
            workflow.upsert_search_attributes(changed)
            self._values.update({u.key.name: u.value for u in changed})


class RunRecord:
    def __init__(self, memory: RunMemory) -> None:
        self.memory = memory
        self._search_attributes = SearchAttributes()
        # Called after the status changes (the workflow's notifications).
        self.watch: Callable[[], None] | None = None

    @property
    def state(self) -> RunState:
        return self.memory.state

    def emit(self, name: EventName, payload: Payload, status: str = "ok") -> None:
        """Append one event; history.jsonl is append-only and numbered from 1."""
        event = EVENT_TYPES[name](
            seq=self.memory.last_seq + 1,
            ts=workflow.now().isoformat(),
            run_id=self.state.run_id,
            iteration=self.state.iteration,
            phase=self.state.phase,
            step=self.state.current_step.value,
            status=status,
            payload=payload,
        )
        self.memory.remember(event)  # type: ignore[arg-type]
        self.touch()

    def saved(self, saved: SavedLog) -> None:
        """A commit now holds the events and call records a committing step reports."""
        self.memory.saved(saved.saved_seq, saved.saved_calls)

    def events(self, after: int) -> list[Event]:
        return [event for event in self.memory.tail if event.seq > after]

    def touch(self) -> None:
        self.state.updated_at = workflow.now().isoformat()

    def set_step(self, step: Step) -> None:
        self.state.current_step = step
        self.touch()

    def set_status(self, status: RunStatus) -> None:
        changed = status != self.state.status
        self.state.status = status
        self.touch()
        self.sync_search_attributes()
        if changed and self.watch is not None:
            self.watch()

    def add_usage(self, usage: TokenUsage) -> None:
        self.state.usage = self.state.usage + usage

    def add_output(self, output: ModelOutput) -> None:
        """A model step's answer: count its usage, show any repair it needed, and keep the
        call records it carries for the run's next commit (taken off the output, which may
        be kept too: a record is held once)."""
        self.add_usage(output.usage)
        if output.calls:
            self.memory.carried_calls.update(output.calls)
            output.calls = {}
        if output.repairs:
            repairs = [repair[:REPAIR_TEXT_CAP] for repair in output.repairs]
            self.emit(EventName.OUTPUT_REPAIRED, RepairedPayload(repairs=repairs))

    def accept_artifact(self, output: ArtifactOutput, event: EventName) -> None:
        """A new artifact commit from PRODUCE or REFINE, and its event; the step adapter has
        counted its usage."""
        self.state.artifact_commit = output.commit
        fields: dict[str, Any] = {
            "commit": output.commit,
            "hash": output.artifact_hash,
            "changed": output.changed or ["none"],
            "started_at": output.timing.started_at,
            "finished_at": output.timing.finished_at,
        }
        if event == EventName.REFINEMENT_DONE:
            self.emit(
                event,
                RefinementPayload(**fields, previous_artifact_hash=output.previous_artifact_hash),
            )
        else:
            self.emit(event, ArtifactPayload(**fields))

    def conclude(
        self, reason: StopReason, message: str, last_evaluation: Evaluation | None
    ) -> None:
        """Record why the loop stopped; on `iteration_limit` without a pass, with the
        distance-to-success block (docs/loop.md#distance-to-success)."""
        distance = None
        if reason == StopReason.ITERATION_LIMIT and last_evaluation and not last_evaluation.passed:
            distance = decisions.distance_to_success(last_evaluation)
        self.state.stop_reason = reason
        self.state.stop = StopInfo(
            passed=STATUS_FOR_REASON[reason] == RunStatus.COMPLETED,
            reason=reason,
            message=message,
            distance_to_success=distance,
        )
        if reason == StopReason.PHASE_ERROR:
            self.emit(EventName.FAILED, FailedPayload(reason=reason.value, message=message))
        else:
            self.emit(
                EventName.STOPPED,
                StoppedPayload(reason=reason.value, message=message, distance_to_success=distance),
            )

    def fail(self, message: str) -> None:
        """A failure outside the loop's stop conditions (a rejected request, a git error)."""
        self.state.stop = StopInfo(passed=False, reason=self.state.stop_reason, message=message)
        self.state.status = RunStatus.FAILED
        self.emit(EventName.FAILED, FailedPayload(error=message), status="error")

    def final_status(self) -> RunStatus:
        if self.state.status == RunStatus.FAILED or self.state.stop_reason is None:
            return RunStatus.FAILED
        return STATUS_FOR_REASON[self.state.stop_reason]

    def show_iteration(
        self,
        evaluation: Evaluation,
        plan: IterationPlan | None,
        artifact: ArtifactOutput | None,
        critique: Critique | None = None,
    ) -> None:
        """The compact iteration summary as the run's current details in the UI
        (docs/loop.md#iteration-summary)."""
        summary = IterationSummary(
            iteration=self.state.iteration,
            max_iterations=self.state.max_iterations,
            phase=evaluation.phase.value,
            score=evaluation.score,
            passed=evaluation.passed,
            plan_focus=plan.focus if plan else "",
            artifact_hash=artifact.artifact_hash if artifact else "",
            changed=artifact.changed if artifact else [],
            failed=evaluation.failed_blockers,
            warnings=evaluation.failed_warnings,
            artifact=f"{self.state.branch}:{ARTIFACT_PATH}",
            critique=[(i.rule_id, i.fix) for i in critique.issues] if critique else [],
        )
        workflow.set_current_details(render_summary(summary))

    def sync_search_attributes(self) -> None:
        """Keep the Temporal UI's list a dashboard; upsert only what changed."""
        state = self.state
        wanted: list[SearchAttributeUpdate[Any]] = [
            LOOP_STATUS.value_set(state.status.value),
            LOOP_PHASE.value_set(state.phase.value),
            LOOP_ITERATION.value_set(state.iteration),
            LOOP_SCORE.value_set(state.last_score),
            LOOP_BLOCKED.value_set(state.blocked),
            LOOP_ALIAS.value_set(state.alias),
        ]
        self._search_attributes.upsert(wanted)


class OnRecord:
    """For the parts of the workflow that read and change the run through its record."""

    record: RunRecord

    @property
    def memory(self) -> RunMemory:
        return self.record.memory

    @property
    def state(self) -> RunState:
        return self.record.state

    def workspace(self) -> GitLocation:
        """Where the run's work is now: its origin and latest commit, and the playbook's
        files it was given (docs/playbook.md#files)."""
        used = self.state.playbook
        return GitLocation(
            origin=self.state.origin,
            commit=self.memory.commit,
            playbook_files=None if used is None else used.files,
        )
