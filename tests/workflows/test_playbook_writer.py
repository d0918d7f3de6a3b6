"""The playbook's one writer under races its group commits open: a batch delivered again
while it is being committed, and a group whose commit fails. The writer runs on the
time-skipping server with its real activities, but for a commit held at a gate the test
opens (and told to fail once when the test says so)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from loopworks.playbook import writer
from loopworks.playbook.activities import PlaybookActivities
from loopworks.playbook.store import PlaybookStore
from loopworks.playbook.workflow import (
    REMEMBERED_BATCHES,
    REMEMBERED_BYTES,
    BatchMemory,
    PlaybookWorkflow,
)
from loopworks.schemas.playbook import (
    AddDelta,
    AppliedBatch,
    BatchRecord,
    DeltaBatch,
    DeltaOutcome,
    ItemKind,
    Playbook,
    PlaybookInput,
    PlaybookLimits,
    PlaybookRead,
    PlaybookVersionsWrite,
    playbook_name,
    workflow_id,
)
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps
from loopworks.workspace.git import GitWorkspaces
from tests.workflows.conftest import LoopHarness


class GatedCommits:
    """`commit_playbook_versions` held until `gate` opens; call number `fail_call` fails
    for good (as a branch moved by someone else would)."""

    def __init__(self, real: PlaybookActivities) -> None:
        self.real = real
        self.gate = asyncio.Event()
        self.calls: list[list[str]] = []
        self.fail_call: int | None = None

    @activity.defn(name="commit_playbook_versions")
    async def commit(self, write: PlaybookVersionsWrite) -> list[str]:
        self.calls.append([version.batch_id for version in write.versions])
        call = len(self.calls)
        await self.gate.wait()
        if call == self.fail_call:
            raise ApplicationError("told to fail", non_retryable=True)
        return await self.real.commit_playbook_versions(write)

    async def in_flight(self, count: int) -> None:
        while len(self.calls) < count:
            await asyncio.sleep(0.05)


@pytest.fixture
def origin(repo: Path) -> str:
    return str(repo)


@asynccontextmanager
async def gated_writer(harness: LoopHarness) -> AsyncIterator[tuple[GatedCommits, Settings]]:
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    real = PlaybookActivities(build_deps(settings))
    gated = GatedCommits(real)
    async with Worker(
        harness.env.client,
        task_queue=harness.task_queue,
        workflows=[PlaybookWorkflow],
        activities=[real.read_playbook, gated.commit],
    ):
        yield gated, settings


def batch(name: str) -> DeltaBatch:
    content = f"Lesson {name}: {uuid.uuid4().hex}"
    return DeltaBatch(
        batch_id=name,
        source="test",
        deltas=[AddDelta(kind=ItemKind.CONSTRAINT, section="s", content=content)],
    )


async def applied(handle: WorkflowHandle[PlaybookWorkflow, None], batch_id: str) -> AppliedBatch:
    while True:
        found: AppliedBatch | None = await handle.query(PlaybookWorkflow.applied, batch_id)
        if found is not None:
            return found
        await asyncio.sleep(0.05)


def versions(harness: LoopHarness, origin: str) -> list[tuple[int, str | None]]:
    store = PlaybookStore.of(GitWorkspaces(harness.data_dir / "reader", "t", "t@t"))
    return [(v.version, v.batch_id) for v in store.versions(origin, playbook_name(origin))]


async def test_a_batch_delivered_again_while_it_is_committed_is_applied_once(
    harness: LoopHarness, origin: str
) -> None:
    name = playbook_name(origin)
    async with gated_writer(harness) as (gated, settings):
        client = harness.env.client
        first = asyncio.create_task(
            writer.deliver_batch(client, settings, name, origin, batch("x"))
        )
        await gated.in_flight(1)
        handle = client.get_workflow_handle_for(PlaybookWorkflow.run, workflow_id(name))
        again = batch("x")
        await handle.signal(PlaybookWorkflow.deliver, again)
        await handle.signal(PlaybookWorkflow.deliver, batch("y"))
        gated.gate.set()
        x, y = await first, await applied(handle, "y")

    assert (x.version, y.version) == (1, 2)
    assert gated.calls == [["x"], ["y"]]
    assert versions(harness, origin) == [(2, "y"), (1, "x")]


async def test_a_failed_group_fails_its_handler_and_the_others_wait_for_the_next(
    harness: LoopHarness, origin: str
) -> None:
    name = playbook_name(origin)
    async with gated_writer(harness) as (gated, settings):
        client = harness.env.client
        handle = client.get_workflow_handle_for(PlaybookWorkflow.run, workflow_id(name))
        first = asyncio.create_task(
            writer.deliver_batch(client, settings, name, origin, batch("q"))
        )
        await gated.in_flight(1)
        # While q's commit runs: a person's batch p (an update), then a run's r (a signal).
        person = asyncio.create_task(writer.send_batch(client, settings, name, origin, batch("p")))
        await asyncio.sleep(0.5)
        await handle.signal(PlaybookWorkflow.deliver, batch("r"))
        gated.fail_call = 2  # the group of p and r
        gated.gate.set()
        q = await first
        with pytest.raises(WorkflowUpdateFailedError):
            await person
        r = await applied(handle, "r")
        p = await handle.query(PlaybookWorkflow.applied, "p")
        committed = versions(harness, origin)
        # The writer goes on: p sent again is applied, once.
        again = await writer.send_batch(client, settings, name, origin, batch("p"))

    assert gated.calls == [["q"], ["p", "r"], ["r"], ["p"]]
    assert (q.version, r.version, p, again.version) == (1, 2, None, 3)
    assert committed == [(2, "r"), (1, "q")]


async def test_a_runs_batch_whose_commit_fails_is_answered_and_the_writer_lives_on(
    harness: LoopHarness, origin: str
) -> None:
    """A run's batch is a signal, whose handler, should it raise, fails the whole writer:
    the batches waiting behind it and the memory of those applied would go with it."""
    name = playbook_name(origin)
    async with gated_writer(harness) as (gated, settings):
        client = harness.env.client
        handle = client.get_workflow_handle_for(PlaybookWorkflow.run, workflow_id(name))
        gated.fail_call = 1  # the origin refuses q's commit, past the writer's retries
        first = asyncio.create_task(
            writer.deliver_batch(client, settings, name, origin, batch("q"), timeout_seconds=60)
        )
        await gated.in_flight(1)
        await handle.signal(PlaybookWorkflow.deliver, batch("r"))  # another run finishes
        gated.gate.set()
        with pytest.raises(ApplicationError, match="told to fail") as failed:
            await first  # at once, not when the sender gives up waiting
        q = await handle.query(PlaybookWorkflow.applied, "q")
        r = await applied(handle, "r")
        # Sent again, r is remembered; q is tried again.
        r_again = await writer.send_batch(client, settings, name, origin, batch("r"))
        q_again = await writer.deliver_batch(client, settings, name, origin, batch("q"))
        status = (await handle.describe()).status

    assert failed.value.non_retryable and "q" in failed.value.message
    assert q is not None and q.error == "told to fail" and not q.changed
    assert (r.version, r_again.version, q_again.version, q_again.error) == (1, 1, 2, None)
    assert gated.calls == [["q"], ["r"], ["q"]]
    assert versions(harness, origin) == [(2, "q"), (1, "r")]
    assert status == WorkflowExecutionStatus.RUNNING


async def test_a_batch_that_failed_reading_origin_is_not_applied_later(
    harness: LoopHarness, origin: str
) -> None:
    """A person's batch the writer could not apply (502) stays out of the next group,
    which would commit it although its sender was told it failed."""
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    real = PlaybookActivities(build_deps(settings))
    unreadable = {"reads": 2}  # the writer's own first read, then alice's batch's

    @activity.defn(name="read_playbook")
    async def read_playbook(read: PlaybookRead) -> Playbook | None:
        if unreadable["reads"]:
            unreadable["reads"] -= 1
            raise ApplicationError("origin unreachable", non_retryable=True)
        return await real.read_playbook(read)

    name = playbook_name(origin)
    async with Worker(
        harness.env.client,
        task_queue=harness.task_queue,
        workflows=[PlaybookWorkflow],
        activities=[read_playbook, real.commit_playbook_versions],
    ):
        client = harness.env.client
        with pytest.raises(WorkflowUpdateFailedError):
            await writer.send_batch(client, settings, name, origin, batch("alice-1"))
        bob = await writer.send_batch(client, settings, name, origin, batch("bob-1"))

    assert bob.version == 1
    assert versions(harness, origin) == [(1, "bob-1")]


async def test_a_group_stops_at_its_size(harness: LoopHarness, origin: str) -> None:
    """Whole playbooks, one a version, make the commit's input: a group holds no more
    than `group_bytes` of them (here, one), and the rest wait for the next."""
    name = playbook_name(origin)
    async with gated_writer(harness) as (gated, _):
        client = harness.env.client
        handle = await client.start_workflow(
            PlaybookWorkflow.run,
            PlaybookInput(name=name, origin=origin, limits=PlaybookLimits(group_bytes=1)),
            id=workflow_id(name),
            task_queue=harness.task_queue,
        )
        await handle.signal(PlaybookWorkflow.deliver, batch("a"))
        await gated.in_flight(1)
        for later in ("b", "c"):
            await handle.signal(PlaybookWorkflow.deliver, batch(later))
        gated.gate.set()
        c = await applied(handle, "c")

    assert gated.calls == [["a"], ["b"], ["c"]]
    assert c.version == 3


def test_the_writers_memory_is_bounded_in_bytes_as_well_as_in_batches() -> None:
    """What continue-as-new carries beside the playbook stays far under Temporal's 2 MiB
    whatever the batches were: 80 items each, and long ids with many items pruned."""
    memory = BatchMemory()
    for n in range(1, 601):
        added = [DeltaOutcome(op="ADD", result="added", item_id=f"pb-{n}-{i}") for i in range(80)]
        applied = AppliedBatch(
            batch_id=f"{'run' * 60}-{n}",
            version=n,
            changed=True,
            outcomes=added,
            pruned=[f"pb-{n - 1}-{i}" for i in range(80)],
            commit="ab" * 20,
        )
        memory.keep(BatchRecord.of(applied))
    carried = PlaybookInput(name="app-12345678", origin="o", applied=memory.records())
    assert len(carried.model_dump_json()) < REMEMBERED_BYTES + 1024
    assert 0 < len(memory) < REMEMBERED_BATCHES
    newest = memory.get(f"{'run' * 60}-600")
    assert newest is not None and newest.answer().results == {"added": 80}
    assert memory.get(f"{'run' * 60}-1") is None  # the oldest went first


def test_a_writer_continued_from_one_that_kept_whole_answers_reads_them_as_records() -> None:
    carried = {
        "batch_id": "b",
        "version": 3,
        "changed": True,
        "outcomes": [{"op": "TAG", "result": "tagged", "item_id": "pb-1-1"}] * 2,
        "pruned": ["pb-1-2"],
        "commit": "ab" * 20,
    }
    params = PlaybookInput.model_validate(
        {"name": "app-12345678", "origin": "o", "applied": {"b": carried}}
    )
    assert params.applied["b"] == BatchRecord(
        batch_id="b",
        version=3,
        changed=True,
        commit="ab" * 20,
        results={"tagged": 2},
        pruned=["pb-1-2"],
    )
