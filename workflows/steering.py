"""What a person can do to a running loop, and the gate every step passes.

Stop cancels in-flight work; pause and a custodiet BLOCK hold the run before its next step;
approval releases an interactive run into its iterations. `LoopWorkflow` declares the
handlers and delegates here, so the rules of steering read in one place. Used from inside
the workflow only.
"""

from __future__ import annotations

import functools
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loopworks.schemas.detail import RELEASES, Gate, GateView
    from loopworks.schemas.events import ApprovedPayload, Empty, EventName, NotePayload
    from loopworks.schemas.payloads import BlockedPayload
    from loopworks.schemas.run import (
        Approval,
        BlockInfo,
        Budget,
        RunState,
        RunStatus,
        StopReason,
        budget_exceeded,
    )
    from loopworks.workflows import proof
    from loopworks.workflows.record import OnRecord, RunRecord


class Stopped(Exception):
    """A user asked the run to stop; in-flight work has been cancelled."""


class Finished(Exception):
    """The loop reached a stop condition."""

    def __init__(self, reason: StopReason, message: str = "") -> None:
        super().__init__(message or reason.value)
        self.reason = reason
        self.message = message


class Steering(OnRecord):
    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.stop_requested = False
        self.stop_note = ""
        # Reflecting and pushing are how a stop ends; once they start, stop is a no-op.
        self.finalizing = False
        self.inflight: set[workflow.ActivityHandle[Any]] = set()

    # --- handlers ----------------------------------------------------------------------

    def stop(self, reason: str | None) -> None:
        if self.stop_requested or self.finalizing or self.state.status.is_terminal:
            return
        self.stop_requested = True
        self.stop_note = reason or ""
        for handle in list(self.inflight):
            handle.cancel()

    def clear_block(self, note: str) -> RunState:
        self.state.blocked = False
        self.state.block = self.state.block.model_copy(
            update={"blocked": False, "cleared_note": note}
        )
        self.memory.operator_note = note
        self.record.set_status(RunStatus.PAUSED if self.memory.paused else RunStatus.RUNNING)
        self.wait_at(Gate.PAUSE if self.memory.paused else None)
        self.record.emit(EventName.BLOCK_CLEARED, NotePayload(note=note))
        return self.state

    def check_clear_block(self) -> None:
        self._refuse_once_ending()
        if not self.state.blocked:
            raise ValueError(f"run is not blocked (status {self.state.status.value})")

    def pause(self) -> RunState:
        """Pause: the current step finishes, then the run waits (docs/loop.md#control)."""
        self.memory.paused = True
        self.record.emit(EventName.PAUSED, Empty())
        return self.state

    def check_pause(self) -> None:
        self._refuse_once_ending()
        if self.memory.paused or self.state.status.is_terminal:
            raise ValueError(f"run cannot be paused (status {self.state.status.value})")

    def resume(self) -> RunState:
        self.memory.paused = False
        if self.state.status == RunStatus.PAUSED:
            self.record.set_status(RunStatus.RUNNING)
            self.wait_at(None)
        self.record.emit(EventName.RESUMED, Empty())
        return self.state

    def check_resume(self) -> None:
        self._refuse_once_ending()
        if not self.memory.paused:
            raise ValueError(f"run is not paused (status {self.state.status.value})")

    def _refuse_once_ending(self) -> None:
        """Once a stop is asked for or the loop has ended, nothing is held again or
        released: the run reflects and pushes what it has (docs/loop.md#control)."""
        if self.stop_requested or self.finalizing:
            raise ValueError(
                f"run is ending (status {self.state.status.value}): it reflects and pushes "
                "what it has, then stops"
            )

    def approve(self, approval: Approval) -> RunState:
        """Interactive mode: confirm criteria and max iterations, possibly edited."""
        edits: dict[str, Any] = {}
        state = self.state
        proof_edits = {
            name: value
            for name, value in (
                ("verify", approval.verify),
                ("allow_unverified", approval.allow_unverified),
            )
            if value is not None
        }
        if state.proof is not None and proof_edits:
            # A person may set the run's proof; nothing else may (docs/loop.md#the-runs-proof).
            state.proof = proof.edited(state.proof, approval.verify, approval.allow_unverified)
            edits |= proof_edits
        if approval.rules is not None or "verify" in edits:
            rules = approval.rules if approval.rules is not None else state.rules
            state.rules = proof.with_proof(rules, state.proof)
        if approval.rules is not None:
            edits["rules"] = [rule.id for rule in approval.rules]
        if approval.thresholds is not None:
            self.state.thresholds = approval.thresholds
            edits["thresholds"] = approval.thresholds.model_dump()
        if approval.max_iterations is not None:
            self.state.max_iterations = approval.max_iterations
            edits["max_iterations"] = approval.max_iterations
        if approval.note:
            self.memory.operator_note = approval.note
        self.memory.approved = True
        self.record.emit(EventName.APPROVED, ApprovedPayload(edits=edits, note=approval.note))
        if self.stop_requested:
            return self.state
        # `await_approval` sets the run running in this same workflow task: answer the run
        # as it goes on, not `awaiting_approval` (a copy: the run's state is not touched).
        return self.state.model_copy(update={"status": RunStatus.RUNNING, "gate": None})

    def check_approve(self) -> None:
        if self.state.status != RunStatus.AWAITING_APPROVAL:
            raise ValueError(f"run is not awaiting approval (status {self.state.status.value})")

    # --- holds -------------------------------------------------------------------------

    async def await_approval(self) -> None:
        """Interactive mode's confirmation: nothing iterates until a person approves."""
        self.record.set_status(RunStatus.AWAITING_APPROVAL)
        self.wait_at(Gate.APPROVAL)
        await workflow.wait_condition(lambda: self.memory.approved or self.stop_requested)
        self.wait_at(None)
        if self.stop_requested:
            raise Stopped()
        self.record.set_status(RunStatus.RUNNING)

    def block(self, blocked: BlockedPayload) -> None:
        """A custodiet BLOCK: the next gate holds the run until a person clears it. The
        `blocked` event and the run's `block` carry the write-up, for the person who must
        clear it; its `path` holds it as `.loops/blocked.md` on the run's work ref."""
        self.state.blocked = True
        self.state.block = BlockInfo(
            blocked=True,
            reason=blocked.reason,
            count=self.state.block.count + 1,
            report=blocked.report,
            path=blocked.path,
            during=blocked.during,
            refused=blocked.refused,
        )
        self.record.emit(EventName.BLOCKED, blocked)
        self.record.set_status(RunStatus.BLOCKED)

    async def gate(self, budget: Budget | None) -> None:
        """Nothing runs while blocked or paused, or once over budget; a stop request wins
        over everything."""
        over = budget_exceeded(budget, self.state.usage)
        if over:
            raise Finished(StopReason.BUDGET_EXHAUSTED, over)
        while not self.stop_requested and (self.state.blocked or self.memory.paused):
            held = (self.state.blocked, self.memory.paused)
            self.record.set_status(RunStatus.BLOCKED if self.state.blocked else RunStatus.PAUSED)
            self.wait_at(Gate.BLOCK if self.state.blocked else Gate.PAUSE)
            await workflow.wait_condition(functools.partial(self._hold_changed, held))
        self.wait_at(None)
        if self.stop_requested:
            raise Stopped()
        if self.state.status in (RunStatus.BLOCKED, RunStatus.PAUSED):
            self.record.set_status(RunStatus.RUNNING)

    def end_holds(self) -> None:
        """The loop has ended: a block or a pause it was held in holds it no longer, while
        it reflects and pushes. The block's write-up stays, in `block`, no longer live."""
        held = self.state.blocked or self.state.status in (RunStatus.BLOCKED, RunStatus.PAUSED)
        # Its status and search attributes change: commands a run before did not give.
        if not (held and workflow.patched("holds-end-with-the-loop")):
            return
        self.state.blocked = False
        self.state.block = self.state.block.model_copy(update={"blocked": False})
        self.wait_at(None)
        if self.state.status in (RunStatus.BLOCKED, RunStatus.PAUSED):
            self.record.set_status(RunStatus.RUNNING)
        else:
            self.record.sync_search_attributes()

    def wait_at(self, gate: Gate | None) -> None:
        """Show the gate the run waits at (None: it waits at none); only the state
        changes, no command, so a run's history is the same with or without it."""
        if gate is None:
            self.state.gate = None
        elif self.state.gate is None or self.state.gate.kind != gate:
            release = f"/runs/{self.state.run_id}/{RELEASES[gate][0]}"
            self.state.gate = GateView(kind=gate, since=workflow.now().isoformat(), release=release)

    def _hold_changed(self, held: tuple[bool, bool]) -> bool:
        return self.stop_requested or (self.state.blocked, self.memory.paused) != held

    def take_note(self) -> str | None:
        """The operator's note goes to the next model step, once."""
        note, self.memory.operator_note = self.memory.operator_note, None
        return note
