"""A run's edge to its repository's playbook: the activity that hands the run's delta
batch to the playbook's one writer, `PlaybookWorkflow`, through `writer`."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client

from loopworks.activities.deps import StepDeps
from loopworks.activities.heartbeat import heartbeating
from loopworks.playbook import writer
from loopworks.schemas.playbook import AppliedBatch, PlaybookDelivery


class PlaybookDeliveryActivities:
    def __init__(self, deps: StepDeps, client: Client | None) -> None:
        self.deps = deps
        self.client = client

    @activity.defn(name="send_playbook_batch")
    async def send_playbook_batch(self, delivery: PlaybookDelivery) -> AppliedBatch:
        """Hand a run's batch to the playbook's workflow, starting it if need be. A retry
        sends the same batch id, which the workflow applies once."""
        if self.client is None:
            raise RuntimeError("this worker was built without a Temporal client")
        async with heartbeating():
            return await writer.deliver_batch(
                self.client, self.deps.settings, delivery.name, delivery.origin, delivery.batch
            )
