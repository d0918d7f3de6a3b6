"""Many runs finishing at once, against a real dev server. The server admits ten updates
in flight per workflow and refuses the rest (RESOURCE_EXHAUSTED, retried by the client:
at a hundred runs the bench saw thousands of refusals), so runs deliver their batches as
signals, which queue, and wait on the `applied` query. Thirty at once, some twice, are
each applied once, in consecutive versions. And the writer continues as new after many
large batches: the server refuses an input past 2 MiB, which is what it carries."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from loopworks.playbook import writer
from loopworks.playbook.activities import PlaybookActivities
from loopworks.playbook.store import PlaybookStore
from loopworks.playbook.workflow import PlaybookWorkflow
from loopworks.schemas.playbook import (
    ITEM_ID_MAX,
    AddDelta,
    DeltaBatch,
    ItemKind,
    PlaybookInput,
    Tag,
    TagDelta,
    playbook_name,
    workflow_id,
)
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps
from loopworks.workspace.git import GitWorkspaces
from tests.integration.stack import DevServer, Stack

pytestmark = pytest.mark.integration

BATCHES = 30


async def test_thirty_runs_finishing_at_once_each_get_their_batch_in_once(
    stack: Stack, remote: Path, tmp_path: Path
) -> None:
    stack.start_worker()
    client = await Client.connect(stack.server.address, data_converter=pydantic_data_converter)
    settings = Settings(LOOPS_DATA_DIR=stack.data_dir, LOOPS_TASK_QUEUE=stack.task_queue)
    origin = str(remote)
    name = playbook_name(origin)
    batches = [
        DeltaBatch(
            batch_id=f"run-{n:02d}:run",
            source=f"run-{n:02d}",
            deltas=[
                AddDelta(kind=ItemKind.CLARIFICATION, section="q", content=f"Answer {n:x}" * n)
            ],
        )
        for n in range(1, BATCHES + 1)
    ]
    sent = [*batches, *batches[::5]]  # a retried activity sends its batch again
    applied = await asyncio.wait_for(
        asyncio.gather(*(writer.deliver_batch(client, settings, name, origin, b) for b in sent)),
        timeout=180,
    )

    versions: dict[str, set[int]] = {}
    for result in applied:
        versions.setdefault(result.batch_id, set()).add(result.version)
    assert all(len(found) == 1 for found in versions.values())
    assert sorted(v for (v,) in versions.values()) == list(range(1, BATCHES + 1))
    store = PlaybookStore.of(GitWorkspaces(tmp_path / "reader", "t", "t@t"))
    history = store.versions(origin, name)
    assert [v.version for v in history] == list(range(BATCHES, 0, -1))
    assert sorted(v.batch_id or "" for v in history) == sorted(b.batch_id for b in batches)


async def test_the_writer_continues_as_new_after_many_batches_of_long_ids(
    dev_server: DevServer, remote: Path, tmp_path: Path
) -> None:
    """Eighty batches of 200 TAGs naming ids as long as a delta takes: their outcomes
    come to more than 2 MiB, so the writer carries counts of them; had it carried them,
    the server would refuse its continue-as-new and every workflow task after."""
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data", LOOPS_TASK_QUEUE="playbook-carried")
    origin, name = str(remote), playbook_name(str(remote))
    real = PlaybookActivities(build_deps(settings))
    async with Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[PlaybookWorkflow],
        activities=[real.read_playbook, real.commit_playbook_versions],
    ):
        handle = await client.start_workflow(
            PlaybookWorkflow.run,
            PlaybookInput(name=name, origin=origin, continue_after_batches=80),
            id=workflow_id(name),
            task_queue=settings.task_queue,
        )
        for n in range(80):
            deltas = [
                TagDelta(item_id=f"pb-{n}-{i}-".ljust(ITEM_ID_MAX, "x"), tag=Tag.HARMFUL)
                for i in range(200)
            ]
            tags = DeltaBatch(batch_id=f"tags-{n}", source="mallory", deltas=deltas)
            await asyncio.wait_for(writer.send_batch(client, settings, name, origin, tags), 30)
        lesson = AddDelta(kind=ItemKind.CONSTRAINT, section="s", content="Use tabs")
        honest = DeltaBatch(batch_id="alice-1", source="alice", deltas=[lesson])
        applied = await asyncio.wait_for(
            writer.send_batch(client, settings, name, origin, honest), 30
        )
        again = await writer.send_batch(
            client, settings, name, origin, DeltaBatch(batch_id="tags-0", source="mallory")
        )
        latest = await client.get_workflow_handle(workflow_id(name)).describe()

    assert latest.run_id != handle.result_run_id
    assert applied.version == 1
    assert (again.version, again.results) == (0, {"unknown_item": 200})
