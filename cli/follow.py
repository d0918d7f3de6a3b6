"""`loops status --follow`: watch a run until it ends.

Events come from the live stream (`GET /runs/{id}/events?follow=1`, server-sent events
read with httpx-sse, whose `id:` is the event's seq, resumed with `Last-Event-ID` after
a dropped connection) or, when the API answers that request with plain JSON, from
polling `events?after=N`. Either way each event is handled once, in seq order: finished
iterations print their summary (docs/loop.md#iteration-summary), and the end prints how
the run ended.

Events say what finished, not what is running, so the current step comes from the
run's status: rich's spinner on a terminal, a plain line per change otherwise.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx
from httpx_sse import SSEError
from rich.console import Console
from rich.status import Status
from rich.text import Text

from loopworks.cli.client import ApiClient, CliError, parse_event
from loopworks.cli.render import (
    IterationTracker,
    artifact_location,
    final_summary,
    notice,
    status_notes,
)
from loopworks.schemas.events import Event
from loopworks.schemas.git_names import redact_url_credentials
from loopworks.schemas.run import RunState, RunStatus
from loopworks.schemas.summary import render_summary

MAX_STREAM_FAILURES = 8
# The API's own stream messages (api/stream.py); every other message is a run event.
END_EVENT = "end"
ERROR_EVENT = "error"
StateSource = Callable[[], RunState]


# --- progress ----------------------------------------------------------------------


class CurrentStep:
    """The spinner's text: the step the run is on and for how long, measured whenever
    rich redraws (the status poller only says when the step changes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text = ""
        self._since = time.monotonic()

    def set(self, text: str) -> None:
        with self._lock:
            self._text, self._since = text, time.monotonic()

    def __rich__(self) -> Text:
        with self._lock:
            elapsed = int(time.monotonic() - self._since)
            return Text(f"{self._text} · {elapsed}s" if self._text else "")


class Progress:
    """Where follow output goes. Summaries and notices are whole lines; the current step
    is rich's spinner on a terminal (lines print above it) and a plain line per change
    otherwise, so logs and tests read cleanly."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._step = CurrentStep()
        self._key: tuple[object, ...] | None = None
        self._run_status: RunStatus | None = None
        self._status: Status | None = None

    def start(self) -> None:
        if self.console.is_terminal and self._status is None:
            self._status = self.console.status(self._step, spinner="dots")
            self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()  # transient: the spinner line goes
            self._status = None

    def line(self, text: str) -> None:
        self.console.print(text)

    def update(self, state: RunState) -> None:
        key = (state.status, state.iteration, state.phase, state.current_step)
        if key == self._key or state.status.is_terminal:
            return
        self._key = key
        text = (
            f"iteration {state.iteration}/{state.max_iterations} · phase {state.phase.value}"
            if state.iteration
            else "setup"  # hydration and the critic come before iteration 1
        ) + f" · {state.current_step.value}"
        if state.status != RunStatus.RUNNING:
            text += f" · {state.status.value}"
        self._step.set(text)
        if self._status is None:
            self.line(f"· {text}")
        if state.status != self._run_status:
            self._run_status = state.status
            # Waiting for a person (approval, a block, a pause): say which command moves
            # it on, once, as `loops status` does.
            for note in status_notes(state):
                self.line(f"! {note}")


class StatePoller:
    """Feeds the run's status to `Progress` while the main thread reads the stream."""

    def __init__(self, source: StateSource, progress: Progress, interval: float) -> None:
        self._source = source
        self._progress = progress
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loops-status", daemon=True)

    def __enter__(self) -> StatePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._progress.update(self._source())
            except CliError:
                continue  # advisory only; the stream decides when the run is over


# --- following a run ---------------------------------------------------------------


class Follower:
    def __init__(
        self,
        client: ApiClient,
        run_id: str,
        progress: Progress,
        *,
        state_source: StateSource | None = None,
        use_stream: bool = True,
        poll_seconds: float = 0.5,
        status_seconds: float = 1.0,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.progress = progress
        self.state_source = state_source or (lambda: client.run_state(run_id))
        self.use_stream = use_stream
        self.poll_seconds = poll_seconds
        self.status_seconds = status_seconds
        self.last_seq = 0
        self.tracker = IterationTracker(0)

    def run(self) -> RunState:
        """Follow until the run ends; print its summaries; return its final state."""
        state = self.client.run_state(self.run_id)
        self.tracker = IterationTracker(state.max_iterations, artifact_location(state))
        self.progress.start()
        try:
            self.progress.update(state)
            if not (self.use_stream and self._stream()):
                self._poll()
            final = self.client.run_state(self.run_id)
            self._catch_up()
            for summary in self.tracker.finish():
                self.progress.line(render_summary(summary) + "\n")
        finally:
            self.progress.stop()
        self.progress.line(final_summary(final))
        return final

    def _catch_up(self) -> None:
        """Whatever the stream's last moments did not deliver. Best effort: the stream
        ends only after sending everything, and a finished run's final state (read from
        its result) needs no worker, but its events do."""
        try:
            events = self.client.events(self.run_id, after=self.last_seq)
        except CliError:
            return
        for event in events:
            self._handle(event)

    def _handle(self, event: Event) -> None:
        if event.seq <= self.last_seq:
            return  # already seen (a replay after reconnecting)
        self.last_seq = event.seq
        text = notice(event)
        if text:
            self.progress.line(text)
        for summary in self.tracker.feed(event):
            self.progress.line(render_summary(summary) + "\n")

    def _stream(self) -> bool:
        """Read the live stream to its end. False when the API has no stream to offer.

        httpx-sse parses the stream but does not reconnect (its README leaves that to
        the caller), so the loop here resumes from the last seq after a dropped
        connection, with a growing pause while the API stays unreachable.
        """
        failures = 0
        what = f"the event stream of {self.run_id}"
        with StatePoller(self.state_source, self.progress, self.status_seconds):
            while True:
                try:
                    with self.client.event_stream(self.run_id, self.last_seq) as source:
                        if source.response.status_code == httpx.codes.NO_CONTENT:
                            return True  # finished, and we have seen every event
                        for message in source.iter_sse():
                            if message.event == END_EVENT:
                                return True  # the run has closed and all was sent
                            if message.event == ERROR_EVENT:
                                self.progress.line(f"! event stream: {_detail(message.data)}")
                            elif message.data:  # not the `retry:` hint
                                self._handle(parse_event(message.data, what))
                                failures = 0
                except SSEError:
                    return False  # an API that answers follow=1 with JSON: poll it
                except httpx.TransportError as err:
                    failures += 1
                    if failures > MAX_STREAM_FAILURES:
                        # The error may quote the URL, and LOOPS_API_URL a password.
                        said = redact_url_credentials(str(err))
                        raise CliError(f"{what} keeps failing: {said}") from err
                    time.sleep(min(0.25 * 2**failures, 5.0))
                    continue
                # The stream ended without `end` (the API gave up or restarted).
                if self.client.run_state(self.run_id).status.is_terminal:
                    return True
                time.sleep(self.poll_seconds)

    def _poll(self) -> None:
        while True:
            # State before events: once the state is terminal, every event is already in.
            state = self.client.run_state(self.run_id)
            self.progress.update(state)
            for event in self.client.events(self.run_id, after=self.last_seq):
                self._handle(event)
            if state.status.is_terminal:
                return
            time.sleep(self.poll_seconds)


def _detail(data: str) -> str:
    """An `error` message's `detail`, or its data as sent."""
    try:
        body = json.loads(data)
    except ValueError:
        return data
    return str(body.get("detail") or data) if isinstance(body, dict) else data
