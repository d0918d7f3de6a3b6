"""`status --follow` against a fake API: the live stream (with a dropped connection and
`Last-Event-ID`), the polling fallback, and the progress lines."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loopworks.api.cli.client import ApiClient
from loopworks.api.cli.config import CliConfig
from loopworks.api.cli.follow import Follower, Progress, SseMessage, event_from_message, parse_sse
from loopworks.api.cli.render import final_summary
from tests.cli.sample import EVENTS, RUN_ID, STATE

pytestmark = pytest.mark.unit

RUNNING = {
    **STATE,
    "status": "running",
    "iteration": 1,
    "phase": "A",
    "current_step": "PLAN",
    "stop": {},
    "stop_reason": None,
}


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"id: {e['seq']}\nevent: {e['event']}\ndata: {json.dumps(e)}\n\n".encode() for e in events
    )


def test_parse_sse_follows_the_format() -> None:
    lines = [
        ": keep-alive",
        "retry: 1000",
        "id: 1",
        "event: plan_created",
        'data: {"a":',
        "data: 1}",
        "",
        "",  # a second blank line dispatches nothing
        "id: 2\r",
        "data: second\r",
        "\r",
        "data: cut off by the end of the stream",
    ]
    assert list(parse_sse(lines)) == [
        SseMessage("1", "plan_created", '{"a":\n1}'),
        SseMessage("2", None, "second"),
    ]


def test_event_from_message_takes_seq_from_the_id_when_missing() -> None:
    body = {"event": "plan_created", "payload": {}}
    assert event_from_message(SseMessage("7", None, json.dumps(body))) == {**body, "seq": 7}
    assert event_from_message(SseMessage(None, "end", "{}")) is None
    assert event_from_message(SseMessage(None, None, "not json")) is None


class FakeApi:
    """Serves STATE and EVENTS; the first stream drops after `drop_after` events."""

    def __init__(self, stream: bool, drop_after: int = 10) -> None:
        self.stream = stream
        self.drop_after = drop_after
        self.stream_requests: list[httpx.Request] = []
        self.state_reads = 0
        self.finished = False

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == f"/runs/{RUN_ID}":
            self.state_reads += 1
            return httpx.Response(200, json=STATE if self.finished else RUNNING)
        if path == f"/runs/{RUN_ID}/events" and request.url.params.get("follow"):
            if not self.stream:
                return httpx.Response(200, json=EVENTS)  # an API that ignores follow=1
            self.stream_requests.append(request)
            after = int(request.headers.get("last-event-id", "0"))
            if not self.stream_requests[1:]:
                return httpx.Response(
                    200,
                    headers={"content-type": "text/event-stream"},
                    content=self._dropping(EVENTS[: self.drop_after]),
                )
            self.finished = True
            # A resumed stream that repeats the last event: the client must not show it twice.
            replay = [e for e in EVENTS if e["seq"] >= after]
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=sse(replay)
            )
        if path == f"/runs/{RUN_ID}/events":
            after = int(request.url.params.get("after", "0"))
            upto = len(EVENTS) if self.finished else 13
            self.finished = self.finished or self.state_reads >= 3
            return httpx.Response(200, json=[e for e in EVENTS[:upto] if e["seq"] > after])
        return httpx.Response(404, json={"detail": f"no route {path}"})

    def _dropping(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        yield sse(events)
        raise httpx.ReadError("connection reset by peer")


def follow(api: FakeApi, use_stream: bool = True) -> tuple[dict[str, Any], str]:
    out = io.StringIO()
    client = ApiClient(
        CliConfig("http://api.test", None), transport=httpx.MockTransport(api.handler)
    )
    follower = Follower(
        client,
        RUN_ID,
        Progress(out, tty=False),
        state_source=lambda: RUNNING,
        use_stream=use_stream,
        poll_seconds=0.01,
        status_seconds=0.01,
    )
    final = follower.run()
    return final, out.getvalue()


def headers_of(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("── Iteration")]


EXPECTED_HEADERS = [
    "── Iteration 1/4 | Phase A | Score: 1.00 | PASS ──",
    "── Iteration 1/4 | Phase B | Score: 0.78 | FAIL ──",
    "── Iteration 2/4 | Phase B | Score: 1.00 | PASS ──",
]


def test_stream_resumes_with_last_event_id_and_shows_each_iteration_once() -> None:
    api = FakeApi(stream=True, drop_after=10)
    final, output = follow(api)
    assert final["status"] == "completed"
    assert [r.headers.get("last-event-id") for r in api.stream_requests] == [None, "10"]
    assert all(r.headers["accept"] == "text/event-stream" for r in api.stream_requests)
    assert headers_of(output) == EXPECTED_HEADERS
    assert output.rstrip().endswith(final_summary(STATE))


def test_polls_when_the_api_has_no_stream() -> None:
    api = FakeApi(stream=False)
    final, output = follow(api)
    assert final["status"] == "completed"
    assert api.stream_requests == []
    assert headers_of(output) == EXPECTED_HEADERS
    assert output.rstrip().endswith(final_summary(STATE))


def test_poll_flag_never_opens_the_stream() -> None:
    api = FakeApi(stream=True)
    _, output = follow(api, use_stream=False)
    assert api.stream_requests == []
    assert headers_of(output) == EXPECTED_HEADERS


def test_plain_progress_lines_without_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=False)
    progress.start()
    progress.update({**RUNNING, "iteration": 0, "current_step": "HYDRATE"})
    progress.update(RUNNING)
    progress.update(RUNNING)  # unchanged: printed once
    progress.update({**RUNNING, "current_step": "EVALUATE"})
    progress.update({**RUNNING, "status": "blocked", "current_step": "AUDIT"})
    progress.update(STATE)  # terminal: the final summary speaks for it
    progress.stop()
    assert out.getvalue().splitlines() == [
        "· setup · HYDRATE",
        "· iteration 1/4 · phase A · PLAN",
        "· iteration 1/4 · phase A · EVALUATE",
        "· iteration 1/4 · phase A · AUDIT · blocked",
    ]
    assert "\x1b" not in out.getvalue()


def test_spinner_on_a_terminal_names_the_step() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=True, frame_seconds=0.01)
    progress.start()
    progress.update({**RUNNING, "current_step": "EVALUATE"})
    time.sleep(0.1)
    progress.line("a summary")
    progress.stop()
    text = out.getvalue()
    assert "\r\x1b[2K" in text
    assert "iteration 1/4 · phase A · EVALUATE · 0s" in text
    assert "a summary\n" in text
    assert text.endswith("\r\x1b[2K")  # the spinner line is cleared at the end


def test_a_finished_run_answered_204_is_caught_up_from_the_event_list() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            if request.url.params.get("follow"):
                return httpx.Response(204)
            return httpx.Response(200, json=EVENTS)
        return httpx.Response(200, json=STATE)

    out = io.StringIO()
    client = ApiClient(CliConfig("http://api.test", None), transport=httpx.MockTransport(handler))
    Follower(client, RUN_ID, Progress(out, tty=False), state_source=lambda: STATE).run()
    assert headers_of(out.getvalue()) == EXPECTED_HEADERS
    assert out.getvalue().rstrip().endswith(final_summary(STATE))
