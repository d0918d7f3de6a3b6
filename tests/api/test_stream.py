"""The event stream's wire format, cursor, heartbeat and ending, without Temporal."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import stream
from loopworks.api.errors import RunNotFound, StateUnavailable
from loopworks.api.main import create_app
from loopworks.schemas.events import BlockCleared, Event, EventName, NotePayload
from loopworks.schemas.rules import Phase
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient, event

pytestmark = pytest.mark.unit

RUN = "fake-20250101-000000-abcdef"


def parse(raw: bytes | str) -> list[dict[str, str]]:
    """SSE frames as dicts (`comment` for `:` lines), in order."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    frames = []
    for block in text.split("\n\n"):
        if not block:
            continue
        frame: dict[str, str] = {}
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            frame["comment" if field == "" else field] = value
        frames.append(frame)
    return frames


class Scripted:
    """An EventSource whose run emits `batches`, one per poll, then closes."""

    def __init__(self, batches: list[list[Event] | Exception], closes_after: int) -> None:
        self.batches = batches
        self.closes_after = closes_after
        self.polls = 0
        self.afters: list[int] = []

    async def closed(self) -> bool:
        return self.polls >= self.closes_after

    async def events(self, after: int) -> list[Event]:
        self.afters.append(after)
        batch = self.batches[self.polls] if self.polls < len(self.batches) else []
        self.polls += 1
        if isinstance(batch, Exception):
            raise batch
        return batch


async def collect(source: Any, after: int = 0, **options: Any) -> list[dict[str, str]]:
    options = {"poll_s": 0, **options}
    chunks = [chunk async for chunk in stream.follow(source, RUN, after, **options)]
    return parse(b"".join(chunks))


def events(*seqs: int, name: EventName = EventName.PAUSED) -> list[Event]:
    return [event(RUN, seq, name) for seq in seqs]


async def test_events_in_order_with_ids_then_end() -> None:
    source = Scripted([events(1, 2), [], events(3), events(4, 5)], closes_after=3)
    frames = await collect(source)
    assert frames[0] == {"retry": str(stream.RECONNECT_MS)}
    sent = [f for f in frames if "id" in f]
    assert [f["id"] for f in sent] == ["1", "2", "3", "4", "5"]
    for frame in sent:
        data = json.loads(frame["data"])
        assert frame["event"] == data["event"] == "paused"
        assert str(data["seq"]) == frame["id"]
    assert frames[-1]["event"] == stream.END_EVENT
    assert json.loads(frames[-1]["data"]) == {"run_id": RUN, "last_event_id": 5}
    # Each poll asks only for what comes after the last event sent.
    assert source.afters == [0, 2, 2, 3]


async def test_the_cursor_skips_what_the_client_has() -> None:
    source = Scripted([events(2, 3, 4)], closes_after=1)
    frames = await collect(source, after=3)
    assert [f["id"] for f in frames if "id" in f] == ["4"]


async def test_first_batch_and_closed_from_the_route() -> None:
    source = Scripted([], closes_after=0)
    chunks = [c async for c in stream.follow(source, RUN, 0, events(1, 2), True, poll_s=0)]
    frames = parse(b"".join(chunks))
    assert [f.get("id") for f in frames[1:]] == ["1", "2", None]
    assert source.polls == 0


async def test_heartbeat_while_nothing_happens() -> None:
    # Five quiet polls of 20 ms each: at least one 50 ms heartbeat falls due.
    source = Scripted([[], [], [], [], [], events(1)], closes_after=6)
    frames = await collect(source, poll_s=0.02, heartbeat_s=0.05)
    assert {"comment": "keep-alive"} in frames
    assert frames.index({"comment": "keep-alive"}) < len(frames) - 2  # before event 1
    assert stream.HEARTBEAT == b": keep-alive\n\n"


async def test_a_transient_failure_is_ridden_out() -> None:
    source = Scripted([events(1), StateUnavailable("no worker"), events(2)], closes_after=3)
    frames = await collect(source)
    assert [f["id"] for f in frames if "id" in f] == ["1", "2"]
    assert frames[-1]["event"] == stream.END_EVENT


async def test_a_lasting_failure_ends_with_an_error_event() -> None:
    down = RPCError("down", RPCStatusCode.UNAVAILABLE, b"")
    source = Scripted([events(1), *[down] * 50], closes_after=10_000)
    frames = await collect(source, give_up_s=0)
    assert [f["id"] for f in frames if "id" in f] == ["1"]
    assert frames[-1]["event"] == stream.ERROR_EVENT
    assert "gave up" in json.loads(frames[-1]["data"])["detail"]


async def test_a_vanished_run_ends_with_an_error_event() -> None:
    source = Scripted([events(1), RunNotFound(RUN)], closes_after=10_000)
    frames = await collect(source)
    assert frames[-1]["event"] == stream.ERROR_EVENT


def test_event_data_is_one_line() -> None:
    multiline = BlockCleared(
        seq=7,
        ts="2025-01-01T00:00:00+00:00",
        run_id=RUN,
        iteration=1,
        phase=Phase.A,
        step="AUDIT",
        payload=NotePayload(note="a\nb\r\nc"),
    )
    frames = parse(stream.encode(multiline))
    assert frames == [{"event": "block_cleared", "data": multiline.model_dump_json(), "id": "7"}]


# --- the route -----------------------------------------------------------------------


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


@pytest.fixture
async def http(fake: FakeClient) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(), client=cast(Client, fake))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def _finished(fake: FakeClient, count: int) -> None:
    handle = fake.handle(RUN)
    handle.events = events(*range(1, count + 1))
    handle.open_for = 0


async def test_route_streams_a_finished_run(http: httpx.AsyncClient, fake: FakeClient) -> None:
    _finished(fake, 4)
    response = await http.get(f"/runs/{RUN}/events", params={"follow": "1"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    frames = parse(response.text)
    assert [f["id"] for f in frames if "id" in f] == ["1", "2", "3", "4"]
    assert frames[-1]["event"] == stream.END_EVENT


@pytest.mark.parametrize(
    ("params", "headers", "expected"),
    [
        ({"after": "2"}, {}, ["3", "4"]),
        ({}, {"Last-Event-ID": "3"}, ["4"]),
        # A reconnecting EventSource repeats the URL; the header is the newer cursor.
        ({"after": "1"}, {"Last-Event-ID": "2"}, ["3", "4"]),
    ],
)
async def test_route_resumes(
    http: httpx.AsyncClient,
    fake: FakeClient,
    params: dict[str, str],
    headers: dict[str, str],
    expected: list[str],
) -> None:
    _finished(fake, 4)
    response = await http.get(
        f"/runs/{RUN}/events", params={"follow": "1", **params}, headers=headers
    )
    assert [f["id"] for f in parse(response.text) if "id" in f] == expected


async def test_route_204_when_a_finished_run_has_nothing_new(
    http: httpx.AsyncClient, fake: FakeClient
) -> None:
    _finished(fake, 4)
    response = await http.get(f"/runs/{RUN}/events?follow=1", headers={"Last-Event-ID": "4"})
    assert response.status_code == 204


@pytest.mark.parametrize("value", ["abc", "-1", "1.5"])
async def test_route_bad_last_event_id_is_422(http: httpx.AsyncClient, value: str) -> None:
    response = await http.get(f"/runs/{RUN}/events?follow=1", headers={"Last-Event-ID": value})
    assert response.status_code == 422, response.text
    assert "header.Last-Event-ID" in response.json()["message"]


async def test_route_without_follow_is_the_json_list(
    http: httpx.AsyncClient, fake: FakeClient
) -> None:
    _finished(fake, 3)
    response = await http.get(f"/runs/{RUN}/events", params={"after": 1})
    assert response.headers["content-type"] == "application/json"
    assert [e["seq"] for e in response.json()] == [2, 3]
