"""Steering and watching runs over HTTP: pause/resume, interactive approval, the event
stream, Idempotency-Key and bearer tokens, against a real dev server, worker and API.

One worker and two API processes (sharing one Temporal) serve the module; every offline
model call takes LATENCY_MS so a run stays open long enough to steer.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.integration.stack import DevServer, Stack
from tests.integration.test_api import Service

pytestmark = pytest.mark.integration

LATENCY_MS = "200"
TOKEN = "integration-token-" + uuid.uuid4().hex
UNKNOWN = "no-such-run-20250101-000000-abcdef"
STEER_TIMEOUT = 30.0


@dataclass
class Control(Service):
    # A second API process on the same Temporal: what one starts, the other sees.
    other: httpx.Client
    # An API process with LOOPS_API_TOKENS set.
    guarded: httpx.Client

    def wait_for_status(self, run_id: str, status: str) -> dict[str, Any]:
        deadline = time.monotonic() + STEER_TIMEOUT
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = self.http.get(f"/runs/{run_id}").json()
            if state["status"] == status:
                return state
            assert state["status"] not in ("completed", "stopped", "failed", "halted"), state
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} never {status}: {state}\n{self.logs()}")

    def events(self, run_id: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/runs/{run_id}/events")
        assert response.status_code == 200, response.text
        events = response.json()
        assert isinstance(events, list)
        return events


@pytest.fixture(scope="module")
def control(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Control]:
    root = tmp_path_factory.mktemp("api-control")
    stack = Stack(
        server=dev_server,
        data_dir=root / "data",
        logs=root / "logs",
        extra_env={"LOOPS_OFFLINE_LATENCY_MS": LATENCY_MS},
    )
    try:
        stack.start_worker()
        _, base = stack.start_api()
        _, other_base = stack.start_api()
        _, guarded_base = stack.start_api(LOOPS_API_TOKENS=f"other-token-0123456789,{TOKEN}")
        with (
            httpx.Client(base_url=base, timeout=30) as http,
            httpx.Client(base_url=other_base, timeout=30) as other,
            httpx.Client(base_url=guarded_base, timeout=30) as guarded,
        ):
            yield Control(stack, http, other, guarded)
    finally:
        stack.stop_all()


@pytest.fixture(scope="module")
def finished_run(control: Control) -> str:
    run_id = control.start(task="Write a haiku about queues", max_iterations=1)
    control.wait_until_finished(run_id)
    return run_id


# --- pause / resume ------------------------------------------------------------------


def test_pause_holds_the_run_between_steps_and_resume_continues(control: Control) -> None:
    run_id = control.start(task="Explain durable execution to a new colleague")
    paused = control.http.post(f"/runs/{run_id}/pause", json={})
    assert paused.status_code == 200, paused.text
    assert paused.json()["run_id"] == run_id

    # The step in flight finishes; then the run waits.
    held = control.wait_for_status(run_id, "paused")
    count = len(control.events(run_id))
    time.sleep(1.5)  # several model calls' worth
    still = control.http.get(f"/runs/{run_id}").json()
    assert still["status"] == "paused"
    assert (still["current_step"], still["iteration"]) == (held["current_step"], held["iteration"])
    assert len(control.events(run_id)) == count, "a paused run emitted events"

    again = control.http.post(f"/runs/{run_id}/pause", json={})
    assert again.status_code == 409, again.text
    assert "cannot be paused" in again.json()["detail"]

    resumed = control.http.post(f"/runs/{run_id}/resume", json={})
    assert resumed.status_code == 200, resumed.text
    twice = control.http.post(f"/runs/{run_id}/resume", json={})
    assert twice.status_code == 409, twice.text
    assert "not paused" in twice.json()["detail"]

    state = control.wait_until_finished(run_id)
    assert state["status"] == "completed", state
    names = [event["event"] for event in control.events(run_id)]
    assert names.index("paused") < names.index("resumed"), names


# --- interactive approval ------------------------------------------------------------


def test_interactive_run_waits_for_approval_and_honours_its_edits(control: Control) -> None:
    run_id = control.start(
        task="Outline a talk on reflex loops", mode="interactive", max_iterations=4
    )
    waiting = control.wait_for_status(run_id, "awaiting_approval")
    # The draft a person approves: rules, thresholds and max iterations.
    assert waiting["rules"], waiting
    assert waiting["thresholds"] == {"A": 0.8, "B": 0.9}
    assert waiting["max_iterations"] == 4
    assert (waiting["current_step"], waiting["iteration"]) == ("APPROVE", 0)
    time.sleep(1.0)
    assert control.http.get(f"/runs/{run_id}").json()["status"] == "awaiting_approval"

    resume = control.http.post(f"/runs/{run_id}/resume", json={})
    assert resume.status_code == 409, resume.text

    approved = control.http.post(f"/runs/{run_id}/approve", json={"max_iterations": 1})
    assert approved.status_code == 200, approved.text
    assert approved.json()["max_iterations"] == 1

    again = control.http.post(f"/runs/{run_id}/approve", json={})
    assert again.status_code == 409, again.text
    assert "not awaiting approval" in again.json()["detail"]

    state = control.wait_until_finished(run_id)
    assert (state["iteration"], state["max_iterations"]) == (1, 1), state
    assert state["stop_reason"] in ("threshold_reached", "no_major_issues", "iteration_limit")
    approvals = [e for e in control.events(run_id) if e["event"] == "approved"]
    assert [e["payload"]["edits"] for e in approvals] == [{"max_iterations": 1}]


def test_approve_in_auto_mode_is_409(control: Control) -> None:
    run_id = control.start(task="List three uses of a message queue")
    response = control.http.post(f"/runs/{run_id}/approve", json={})
    assert response.status_code == 409, response.text
    control.http.post(f"/runs/{run_id}/stop", json={"reason": "done testing"})
    control.wait_until_finished(run_id)


# --- unknown, finished, bad input ----------------------------------------------------


@pytest.mark.parametrize("action", ["pause", "resume", "approve"])
def test_unknown_run_is_404(control: Control, action: str) -> None:
    response = control.http.post(f"/runs/{UNKNOWN}/{action}", json={})
    assert response.status_code == 404, response.text
    assert response.json()["detail"] == f"run {UNKNOWN} not found"


def test_unknown_run_stream_is_404(control: Control) -> None:
    response = control.http.get(f"/runs/{UNKNOWN}/events", params={"follow": 1})
    assert response.status_code == 404, response.text


@pytest.mark.parametrize(
    ("action", "body"), [("pause", {}), ("resume", {}), ("approve", {"max_iterations": 2})]
)
def test_finished_run_is_409(
    control: Control, finished_run: str, action: str, body: dict[str, Any] | None
) -> None:
    response = control.http.post(f"/runs/{finished_run}/{action}", json=body)
    assert response.status_code == 409, response.text
    assert "already finished" in response.json()["detail"]


def test_bad_approval_is_422_naming_the_field(control: Control, finished_run: str) -> None:
    response = control.http.post(f"/runs/{finished_run}/approve", json={"max_iterations": 0})
    assert response.status_code == 422, response.text
    assert "body.max_iterations" in response.json()["message"]


# --- the event stream ----------------------------------------------------------------


def frames(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Server-sent events as they arrive; `comment` holds a `:` line."""
    frame: dict[str, str] = {}
    for line in lines:
        if not line:
            if frame:
                yield frame
            frame = {}
            continue
        field, _, value = line.partition(":")
        frame["comment" if field == "" else field] = value.removeprefix(" ")
    if frame:
        yield frame


@contextmanager
def follow(
    http: httpx.Client, run_id: str, headers: dict[str, str] | None = None, **params: Any
) -> Iterator[Iterator[dict[str, str]]]:
    with http.stream(
        "GET",
        f"/runs/{run_id}/events",
        params={"follow": 1, **params},
        headers=headers or {},
        timeout=httpx.Timeout(30, read=60),
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield frames(response.iter_lines())


def seqs(received: list[dict[str, str]]) -> list[int]:
    return [int(frame["id"]) for frame in received if "id" in frame]


def test_stream_follows_a_run_to_its_end(control: Control) -> None:
    run_id = control.start(task="Describe the claim-check pattern")
    received: list[dict[str, str]] = []
    status_at_first_event = ""
    with follow(control.http, run_id) as stream:
        for frame in stream:
            received.append(frame)
            if "id" in frame and not status_at_first_event:
                status_at_first_event = control.http.get(f"/runs/{run_id}").json()["status"]
    # It was live (the run still going), and it ended by itself when the run did.
    assert status_at_first_event == "running"
    assert received[-1]["event"] == "end"
    events = control.events(run_id)
    assert seqs(received) == [event["seq"] for event in events] == list(range(1, len(events) + 1))
    for frame in (f for f in received if "id" in f):
        data = json.loads(frame["data"])
        assert data["seq"] == int(frame["id"]) and data["event"] == frame["event"]
        assert data["run_id"] == run_id
    assert [f["event"] for f in received if "id" in f][-1] == "pushed"
    assert control.http.get(f"/runs/{run_id}").json()["status"] == "completed"


def test_a_reconnecting_client_misses_none_and_sees_none_twice(control: Control) -> None:
    run_id = control.start(task="Compare three retry strategies")
    first: list[dict[str, str]] = []
    with follow(control.http, run_id) as stream:
        for frame in stream:
            first.append(frame)
            if len(seqs(first)) == 3:
                break
    state = control.http.get(f"/runs/{run_id}").json()
    assert state["status"] == "running", "the run ended before the first connection dropped"

    # Resume on the other API process: the cursor is the client's, not the server's.
    second: list[dict[str, str]] = []
    with follow(control.other, run_id, headers={"Last-Event-ID": "3"}) as stream:
        second = list(stream)
    assert second[-1]["event"] == "end"
    total = len(control.events(run_id))
    union = seqs(first) + seqs(second)
    assert union == list(range(1, total + 1)), (seqs(first), seqs(second))

    # `?after=` does the same for a client that keeps its own cursor.
    with follow(control.http, run_id, after=total - 2) as stream:
        assert seqs(list(stream)) == [total - 1, total]
    # Nothing left after the last id of a finished run: 204 tells EventSource to stop.
    done = control.http.get(
        f"/runs/{run_id}/events", params={"follow": 1}, headers={"Last-Event-ID": str(total)}
    )
    assert done.status_code == 204, done.text


def test_stream_bad_last_event_id_is_422(control: Control, finished_run: str) -> None:
    response = control.http.get(
        f"/runs/{finished_run}/events", params={"follow": 1}, headers={"Last-Event-ID": "x"}
    )
    assert response.status_code == 422, response.text
    assert "header.Last-Event-ID" in response.json()["message"]


# --- Idempotency-Key -----------------------------------------------------------------


def _executions(control: Control, run_id: str) -> int:
    async def count() -> int:
        client = await Client.connect(control.stack.server.address)
        # Visibility is eventually consistent; the run is listed within moments.
        deadline = time.monotonic() + 10
        found: list[str] = []
        while time.monotonic() < deadline:
            found = [
                e.run_id or "" async for e in client.list_workflows(f'WorkflowId = "{run_id}"')
            ]
            if found:
                break
            await asyncio.sleep(0.2)
        return len(found)

    return asyncio.run(count())


def test_same_key_same_run(control: Control) -> None:
    key = {"Idempotency-Key": f"test-{uuid.uuid4()}"}
    body = {"task": "Write a changelog entry", "audit_probability": 0, "max_iterations": 1}
    first = control.http.post("/runs", json=body, headers=key)
    assert first.status_code == 201, first.text
    run_id = first.json()["run_id"]
    second = control.other.post("/runs", json=body, headers=key)
    assert second.status_code == 200, second.text
    assert second.json() == first.json()
    assert second.headers["location"] == f"/runs/{run_id}"

    other = control.http.post("/runs", json={**body, "task": "Something else"}, headers=key)
    assert other.status_code == 422, other.text
    assert "header.Idempotency-Key" in other.json()["message"]
    assert "different request" in other.json()["message"]

    # Still the same run after it has finished: the key is not free again.
    control.wait_until_finished(run_id)
    late = control.http.post("/runs", json=body, headers=key)
    assert late.status_code == 200, late.text
    assert late.json()["run_id"] == run_id
    assert _executions(control, run_id) == 1


def test_concurrent_posts_with_one_key_start_one_run(control: Control) -> None:
    key = {"Idempotency-Key": f"race-{uuid.uuid4()}"}
    body = {"task": "Name five queueing disciplines", "audit_probability": 0}

    def post(index: int) -> httpx.Response:
        http = control.http if index % 2 else control.other
        return http.post("/runs", json=body, headers=key)

    with ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(post, range(6)))
    assert sorted(r.status_code for r in responses) == [200] * 5 + [201], [
        r.text for r in responses
    ]
    run_ids = {r.json()["run_id"] for r in responses}
    assert len(run_ids) == 1
    run_id = run_ids.pop()
    assert _executions(control, run_id) == 1
    control.http.post(f"/runs/{run_id}/stop", json={"reason": "done testing"})
    control.wait_until_finished(run_id)


def test_without_a_key_each_post_is_a_run(control: Control) -> None:
    body = {"task": "Say hello", "audit_probability": 0, "max_iterations": 1}
    first, second = (control.http.post("/runs", json=body) for _ in range(2))
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["run_id"] != second.json()["run_id"]
    for response in (first, second):
        control.wait_until_finished(response.json()["run_id"])


# --- bearer tokens -------------------------------------------------------------------


def test_tokens_guard_the_run_routes(control: Control, finished_run: str) -> None:
    guarded = control.guarded
    for method, path in [
        ("GET", "/runs"),
        ("GET", f"/runs/{finished_run}"),
        ("GET", f"/runs/{finished_run}/events"),
        ("POST", f"/runs/{finished_run}/pause"),
    ]:
        body = {} if method == "POST" else None
        bare = guarded.request(method, path, json=body)
        assert bare.status_code == 401, (path, bare.text)
        assert bare.headers["www-authenticate"] == "Bearer"
        wrong = guarded.request(method, path, json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, (path, wrong.text)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get(f"/runs/{finished_run}", headers=auth).status_code == 200
    assert guarded.post(f"/runs/{finished_run}/pause", json={}, headers=auth).status_code == 409
    assert guarded.get("/healthz").status_code == 200
    assert guarded.get("/readyz").status_code == 200
    assert guarded.get("/openapi.json").status_code == 200
