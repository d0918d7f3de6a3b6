"""A run long enough to continue as new keeps its status, events and live stream; the
events older than the workflow's tail come from the run's history.jsonl in git."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from loopworks.schemas.loop import EVENT_TAIL, LoopInput
from loopworks.schemas.run import RunRequest
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect
from loopworks.workflows.loop import LoopWorkflow
from tests.integration.stack import Stack

pytestmark = pytest.mark.integration

RULES = [
    {"id": "has-title", "description": "a title", "check": {"kind": "pattern", "pattern": "^# "}},
    {"id": "never", "description": "never passes", "check": {"kind": "pattern", "pattern": "ZQX"}},
    # Holds on odd iterations only, so the score moves and the run never stagnates.
    {
        "id": "alternating",
        "description": "holds on odd iterations",
        "check": {
            "kind": "command",
            "command": "test $(( $(ls .loops/trajectory/*-produce.jsonl | wc -l) % 2 )) -eq 1",
        },
    },
]


def read_stream(base_url: str, run_id: str) -> list[tuple[int, str]]:
    """(id, event name) of every SSE event until the server ends the stream."""
    received: list[tuple[int, str]] = []
    fields: dict[str, str] = {}
    with httpx.stream(
        "GET", f"{base_url}/runs/{run_id}/events", params={"follow": 1}, timeout=120
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                key, _, value = line.partition(": ")
                fields[key] = value
                continue
            # A blank line ends one event.
            if "id" in fields and "data" in fields:
                assert json.loads(fields["data"])["seq"] == int(fields["id"])
                received.append((int(fields["id"]), fields.get("event", "")))
            fields = {}
    return received


async def test_status_events_and_stream_survive_continue_as_new(stack: Stack) -> None:
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="50")
    _, base_url = stack.start_api()
    client = await connect(Settings(TEMPORAL_ADDRESS=stack.server.address))
    run_id = f"long-{uuid.uuid4().hex[:8]}"
    await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="long",
            request=RunRequest(
                task="Write a guide", rules=RULES, max_iterations=9, audit_probability=0
            ),
            created_at="2026-01-01T00:00:00+00:00",
            continue_as_new_after_events=20,
        ),
        id=run_id,
        task_queue=stack.task_queue,
    )

    streamed = read_stream(base_url, run_id)

    ids = [event_id for event_id, _ in streamed]
    assert ids == list(range(1, len(ids) + 1))
    names = [name for _, name in streamed]
    assert names.count("continued_as_new") >= 2
    assert names[0] == "run_started" and names[-1] == "pushed"
    state = httpx.get(f"{base_url}/runs/{run_id}", timeout=30).json()
    assert state["status"] == "stopped" and state["stop_reason"] == "iteration_limit"
    assert state["iteration"] == 9
    # More events than the workflow keeps: the first ones are read from git.
    assert len(ids) > EVENT_TAIL
    listed = httpx.get(f"{base_url}/runs/{run_id}/events", timeout=30).json()
    assert [e["seq"] for e in listed] == ids
    later = httpx.get(f"{base_url}/runs/{run_id}/events", params={"after": 5}, timeout=30)
    assert [e["seq"] for e in later.json()] == ids[5:]
    # A reconnecting stream resumes after its Last-Event-ID, from git too.
    with httpx.stream(
        "GET",
        f"{base_url}/runs/{run_id}/events",
        params={"follow": 1},
        headers={"Last-Event-ID": "3"},
        timeout=60,
    ) as response:
        resumed = [
            int(line.removeprefix("id: "))
            for line in response.iter_lines()
            if line.startswith("id: ")
        ]
    assert resumed == ids[3:]
