"""SlotWorkflow: one slot of a cap on runs or graphs in progress, open while it is held.

The API claims a slot by starting this workflow under the slot's id, which Temporal lets
only one open workflow have (api/admission.py explains the design); the run or graph the
slot admitted gives it back as it closes (`give_back`), and the slot workflow ends. It
does nothing else, so its history is a handful of events.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from loopworks.schemas.admission import SPENT_MEMO, SlotInput, Spent


@workflow.defn(name="SlotWorkflow")
class SlotWorkflow:
    @workflow.init
    def __init__(self, slot: SlotInput) -> None:
        self._holder = slot.holder
        self._released = False

    @workflow.run
    async def run(self, slot: SlotInput) -> None:
        await workflow.wait_condition(lambda: self._released)

    @workflow.signal
    def release(self, holder: str) -> None:
        # Only its own holder frees it: a run whose slot was reclaimed (its holder looked
        # closed) and taken by another must not free the other's.
        if holder == self._holder:
            self._released = True


async def give_back(slots: list[str], holder: str, spent: Spent) -> None:
    """What a run or graph admitted through `slots` does as it closes: record what it
    spent (for its client's rolling day, api/spend.py), then free each slot."""
    workflow.upsert_memo({SPENT_MEMO: spent.model_dump(mode="json")})
    for slot in slots:
        try:
            await workflow.get_external_workflow_handle(slot).signal(SlotWorkflow.release, holder)
        except FailureError:
            # Gone already: the API reclaimed it (this run looked closed to it) or an
            # operator terminated it. Nothing of ours is held there.
            workflow.logger.info("slot %s was already given back", slot)
