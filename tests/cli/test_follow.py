"""`status --follow` against a fake API: the live stream (with a dropped connection and
`Last-Event-ID`), the polling fallback, and the progress lines."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import httpx
import pytest
from rich.console import Console

from loopworks.cli.client import ApiClient, CliError
from loopworks.cli.config import CliConfig
from loopworks.cli.follow import Follower, Progress
from loopworks.cli.render import console_for, final_summary
from loopworks.schemas.events import Event
from loopworks.schemas.rules import Phase
from loopworks.schemas.run import RunState, RunStatus, Step, StopInfo
from tests.cli.sample import EVENTS, RUN_ID, STATE, wire, wire_list

pytestmark = pytest.mark.unit

RUNNING = STATE.model_copy(
    update={
        "status": RunStatus.RUNNING,
        "iteration": 1,
        "phase": Phase.A,
        "current_step": Step.PLAN,
        "stop": StopInfo(),
        "stop_reason": None,
    }
)
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}
# What api/stream.py sends besides events: a reconnect hint first, keep-alives between.
RETRY_HINT = b"retry: 2000\n\n"
KEEP_ALIVE = b": keep-alive\n\n"
END = b'event: end\ndata: {"run_id": "x", "last_event_id": 21}\n\n'


def sse(events: list[Event]) -> bytes:
    return b"".join(
        f"event: {e.event}\ndata: {e.model_dump_json()}\nid: {e.seq}\n\n".encode() for e in events
    )


def running(**update: object) -> RunState:
    return RUNNING.model_copy(update=update)


class FakeApi:
    """Serves STATE and EVENTS; the first stream drops after `drop_after` events."""

    def __init__(self, stream: bool, drop_after: int = 10, send_end: bool = True) -> None:
        self.stream = stream
        self.drop_after = drop_after
        self.send_end = send_end
        self.stream_requests: list[httpx.Request] = []
        self.state_reads = 0
        self.finished = False

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == f"/runs/{RUN_ID}":
            self.state_reads += 1
            return httpx.Response(200, json=wire(STATE if self.finished else RUNNING))
        if path == f"/runs/{RUN_ID}/events" and request.url.params.get("follow"):
            if not self.stream:
                # An API that ignores follow=1.
                return httpx.Response(200, json=wire_list(EVENTS))
            self.stream_requests.append(request)
            after = int(request.headers.get("last-event-id", "0"))
            if not self.stream_requests[1:]:
                return httpx.Response(
                    200, headers=SSE_HEADERS, content=self._dropping(EVENTS[: self.drop_after])
                )
            self.finished = True
            # A resumed stream that repeats the last event: the client must not show it twice.
            replay = [e for e in EVENTS if e.seq >= after]
            return httpx.Response(200, headers=SSE_HEADERS, content=self.end_with(replay))
        if path == f"/runs/{RUN_ID}/events":
            after = int(request.url.params.get("after", "0"))
            upto = len(EVENTS) if self.finished else 13
            self.finished = self.finished or self.state_reads >= 3
            return httpx.Response(200, json=wire_list([e for e in EVENTS[:upto] if e.seq > after]))
        return httpx.Response(404, json={"detail": f"no route {path}"})

    def end_with(self, events: list[Event]) -> bytes:
        return RETRY_HINT + sse(events) + KEEP_ALIVE + (END if self.send_end else b"")

    def _dropping(self, events: list[Event]) -> Iterator[bytes]:
        yield RETRY_HINT + sse(events[:3]) + KEEP_ALIVE + sse(events[3:])
        raise httpx.ReadError("connection reset by peer")


def follow(api: FakeApi, use_stream: bool = True) -> tuple[RunState, str]:
    out = io.StringIO()
    client = ApiClient(
        CliConfig("http://api.test", None), transport=httpx.MockTransport(api.handler)
    )
    follower = Follower(
        client,
        RUN_ID,
        Progress(console_for(out)),
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


@pytest.mark.parametrize("send_end", [True, False], ids=["end", "no-end"])
def test_stream_resumes_with_last_event_id_and_shows_each_iteration_once(send_end: bool) -> None:
    api = FakeApi(stream=True, drop_after=10, send_end=send_end)
    final, output = follow(api)
    assert final.status == RunStatus.COMPLETED
    assert [r.headers.get("last-event-id") for r in api.stream_requests] == [None, "10"]
    assert all(r.headers["accept"] == "text/event-stream" for r in api.stream_requests)
    assert headers_of(output) == EXPECTED_HEADERS
    assert output.rstrip().endswith(final_summary(STATE))


def test_polls_when_the_api_has_no_stream() -> None:
    api = FakeApi(stream=False)
    final, output = follow(api)
    assert final.status == RunStatus.COMPLETED
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
    progress = Progress(console_for(out))
    progress.start()
    progress.update(running(iteration=0, current_step=Step.HYDRATE))
    progress.update(RUNNING)
    progress.update(RUNNING)  # unchanged: printed once
    progress.update(running(current_step=Step.EVALUATE))
    progress.update(running(status=RunStatus.BLOCKED, current_step=Step.AUDIT))
    progress.update(STATE)  # terminal: the final summary speaks for it
    progress.stop()
    assert out.getvalue().splitlines() == [
        "· setup · HYDRATE",
        "· iteration 1/4 · phase A · PLAN",
        "· iteration 1/4 · phase A · EVALUATE",
        "· iteration 1/4 · phase A · AUDIT · blocked",
        # Waiting for a person: the command that moves it on, once.
        f"! blocked: custodiet audit (release with: loops clear-block {RUN_ID} --note '...')",
    ]
    assert "\x1b" not in out.getvalue()


def test_a_run_that_comes_to_wait_for_approval_says_how_to_approve_once() -> None:
    out = io.StringIO()
    progress = Progress(console_for(out))
    waiting = running(iteration=0, status=RunStatus.AWAITING_APPROVAL, current_step=Step.APPROVE)
    progress.update(running(iteration=0, current_step=Step.HYDRATE))
    progress.update(waiting)
    progress.update(waiting)
    progress.update(RUNNING)
    assert out.getvalue().splitlines() == [
        "· setup · HYDRATE",
        "· setup · APPROVE · awaiting_approval",
        f"! awaiting approval (approve with: loops approve {RUN_ID})",
        "· iteration 1/4 · phase A · PLAN",
    ]


def test_spinner_on_a_terminal_names_the_step() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    progress = Progress(console)
    progress.start()
    progress.update(running(current_step=Step.EVALUATE))
    time.sleep(0.3)
    progress.line("a summary")
    progress.stop()
    text = out.getvalue()
    assert "iteration 1/4 · phase A · EVALUATE · 0s" in text
    assert "a summary\n" in text
    assert "· iteration" not in text  # no plain progress lines on a terminal
    # rich's status is transient: the spinner line is erased when it stops.
    assert text.endswith("\x1b[2K")


def test_a_finished_run_answered_204_is_caught_up_from_the_event_list() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            if request.url.params.get("follow"):
                return httpx.Response(204)
            return httpx.Response(200, json=wire_list(EVENTS))
        return httpx.Response(200, json=wire(STATE))

    out = io.StringIO()
    client = ApiClient(CliConfig("http://api.test", None), transport=httpx.MockTransport(handler))
    Follower(client, RUN_ID, Progress(console_for(out)), state_source=lambda: STATE).run()
    assert headers_of(out.getvalue()) == EXPECTED_HEADERS
    assert out.getvalue().rstrip().endswith(final_summary(STATE))


def test_the_streams_error_message_is_shown_and_the_stream_picked_up_again() -> None:
    streams: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("follow"):
            streams.append(request)
            if len(streams) == 1:
                error = b'event: error\ndata: {"detail": "gave up following run x"}\n\n'
                return httpx.Response(200, headers=SSE_HEADERS, content=sse(EVENTS[:5]) + error)
            return httpx.Response(200, headers=SSE_HEADERS, content=sse(EVENTS[5:]) + END)
        if request.url.path.endswith("/events"):
            return httpx.Response(200, json=[])
        return httpx.Response(200, json=wire(RUNNING))

    out = io.StringIO()
    client = ApiClient(CliConfig("http://api.test", None), transport=httpx.MockTransport(handler))
    Follower(
        client, RUN_ID, Progress(console_for(out)), state_source=lambda: RUNNING, poll_seconds=0
    ).run()
    assert "! event stream: gave up following run x" in out.getvalue()
    assert [r.headers.get("last-event-id") for r in streams] == [None, "5"]
    assert headers_of(out.getvalue()) == EXPECTED_HEADERS


def test_an_event_this_cli_does_not_know_is_an_error_naming_it() -> None:
    unknown = b'event: teleported\ndata: {"seq": 1, "event": "teleported"}\nid: 1\n\n'

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("follow"):
            return httpx.Response(200, headers=SSE_HEADERS, content=unknown)
        return httpx.Response(200, json=wire(RUNNING))

    client = ApiClient(CliConfig("http://api.test", None), transport=httpx.MockTransport(handler))
    follower = Follower(client, RUN_ID, Progress(console_for(io.StringIO())))
    with pytest.raises(CliError, match=r"unexpected event in the event stream of .*teleported"):
        follower.run()


def test_a_stream_that_keeps_failing_does_not_print_the_urls_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error that quotes the URL it failed on would print LOOPS_API_URL's password."""
    monkeypatch.setattr("loopworks.cli.follow.MAX_STREAM_FAILURES", 0)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("follow"):
            raise httpx.ConnectError(f"cannot connect to {request.url}", request=request)
        return httpx.Response(200, json=wire(RUNNING))

    config = CliConfig("http://loops:hunter2-secret@api.test", None)
    client = ApiClient(config, transport=httpx.MockTransport(handler))
    follower = Follower(client, RUN_ID, Progress(console_for(io.StringIO())))
    with pytest.raises(CliError, match="keeps failing") as raised:
        follower.run()
    assert "hunter2-secret" not in str(raised.value), raised.value
    assert "http://***@api.test" in str(raised.value), raised.value
