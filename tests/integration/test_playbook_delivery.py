"""Many runs finishing at once, against a real dev server. The server admits ten updates
in flight per workflow and refuses the rest (RESOURCE_EXHAUSTED, retried by the client:
at a hundred runs the bench saw thousands of refusals), so runs deliver their batches as
signals, which queue, and wait on the `applied` query. Thirty at once, some twice, are
each applied once, in consecutive versions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from loopworks.playbook import writer
from loopworks.playbook.store import PlaybookStore
from loopworks.schemas.playbook import AddDelta, DeltaBatch, ItemKind, playbook_name
from loopworks.schemas.settings import Settings
from loopworks.workspace.git import GitWorkspaces
from tests.integration.stack import Stack

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
