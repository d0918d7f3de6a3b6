"""The floor: what Temporal itself costs for the shape of a loopworks run.

`scripts/bench.py` takes the activities one of its runs scheduled, batch by batch (a batch
is what one workflow task started side by side: PRODUCE ‖ PREPARE, a group of checks), and
replays that shape here with a workflow whose activities do nothing: the same number of
workflow tasks, activity tasks and local activities, on the same dev server, in the same
process as loopworks' worker, at the same concurrency. Its CPU per run is the least any
service built on Temporal pays for that shape; the bench prints loopworks' CPU per run as
a ratio to it (docs/benchmarks.md). Not a module of the package: the bench imports it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner


class Step(BaseModel):
    """One activity of the shape: its loopworks name (carried, not run) and how it ran."""

    name: str
    local: bool


class FloorInput(BaseModel):
    batches: list[list[Step]]


@activity.defn(name="floor_step")
async def floor_step(name: str) -> str:
    return name


@workflow.defn(name="FloorWorkflow")
class FloorWorkflow:
    @workflow.run
    async def run(self, shape: FloorInput) -> int:
        timeout = timedelta(seconds=60)
        for batch in shape.batches:
            await asyncio.gather(
                *(
                    workflow.execute_local_activity(
                        floor_step, step.name, start_to_close_timeout=timeout
                    )
                    if step.local
                    else workflow.execute_activity(
                        floor_step, step.name, start_to_close_timeout=timeout
                    )
                    for step in batch
                )
            )
        return sum(len(batch) for batch in shape.batches)


def floor_worker(client: Client, queue: str, sandboxed: bool) -> Worker:
    """A worker for the floor, with the workflow runner loopworks' worker uses."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[FloorWorkflow],
        activities=[floor_step],
        workflow_runner=SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner(),
    )


async def run_floor(
    client: Client,
    queue: str,
    batches: Sequence[Sequence[tuple[str, bool]]],
    runs: int,
    concurrency: int,
) -> None:
    """`runs` floor workflows of this shape, `concurrency` at a time, each to its end."""
    shape = FloorInput(
        batches=[[Step(name=name, local=local) for name, local in batch] for batch in batches]
    )
    limit = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with limit:
            await client.execute_workflow(
                FloorWorkflow.run, shape, id=f"floor-{uuid.uuid4().hex[:10]}", task_queue=queue
            )

    await asyncio.gather(*(one() for _ in range(runs)))
