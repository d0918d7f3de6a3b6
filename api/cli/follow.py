"""`loops status --follow`: watch a run until it ends.

Events come from the live stream (`GET /runs/{id}/events?follow=1`, server-sent events
whose `id:` is the event's seq, resumed with `Last-Event-ID` after a dropped
connection) or, when the API answers that request with plain JSON, from polling
`events?after=N`. Either way each event is handled once, in seq order: finished
iterations print seed 001 Step 8's summary, and the end prints Step 7's.

Events say what finished, not what is running, so the current step comes from the
run's status: a spinner line on a terminal, a plain line per change otherwise.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import httpx

from loopworks.api.cli.client import ApiClient, CliError, run_path
from loopworks.api.cli.render import (
    IterationTracker,
    artifact_location,
    final_summary,
    is_terminal,
    notice,
)
from loopworks.workflows.summary import render_summary

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
MAX_STREAM_FAILURES = 8
StateSource = Callable[[], dict[str, Any]]


# --- server-sent events ------------------------------------------------------------


@dataclass(frozen=True)
class SseMessage:
    id: str | None
    event: str | None
    data: str


def parse_sse(lines: Iterable[str]) -> Iterator[SseMessage]:
    """The text/event-stream format: fields until a blank line; `:` lines are comments.
    A message cut off by the end of the stream is dropped, as the spec says."""
    data: list[str] = []
    event_id: str | None = None
    event_name: str | None = None
    for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield SseMessage(event_id, event_name, "\n".join(data))
            data, event_id, event_name = [], None, None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "id":
            event_id = value
        elif field == "event":
            event_name = value


def event_from_message(message: SseMessage) -> dict[str, Any] | None:
    """The run event a message carries, or None for anything else (keep-alives, `end`)."""
    try:
        body = json.loads(message.data)
    except ValueError:
        return None
    if not isinstance(body, dict) or "event" not in body:
        return None
    if "seq" not in body and message.id and message.id.isdigit():
        body["seq"] = int(message.id)
    return body if isinstance(body.get("seq"), int) else None


# --- progress ----------------------------------------------------------------------


class Progress:
    """Where follow output goes. Summaries and notices are whole lines; the current step
    is a redrawn spinner line on a TTY and a plain line per change otherwise (so logs
    and tests read cleanly)."""

    def __init__(self, out: TextIO, tty: bool, frame_seconds: float = 0.1) -> None:
        self._out = out
        self._tty = tty
        self._frame_seconds = frame_seconds
        self._lock = threading.Lock()
        self._text = ""
        self._since = time.monotonic()
        self._key: tuple[Any, ...] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._tty and self._thread is None:
            self._thread = threading.Thread(target=self._spin, name="loops-spinner", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        with self._lock:
            if self._tty:
                self._out.write("\r\x1b[2K")
                self._out.flush()

    def line(self, text: str) -> None:
        with self._lock:
            if self._tty:
                self._out.write("\r\x1b[2K")
            self._out.write(text + "\n")
            self._out.flush()

    def update(self, state: Mapping[str, Any]) -> None:
        status = state.get("status")
        key = (status, state.get("iteration"), state.get("phase"), state.get("current_step"))
        if key == self._key or is_terminal(state):
            return
        self._key = key
        iteration = state.get("iteration") or 0
        text = (
            f"iteration {iteration}/{state.get('max_iterations', '?')}"
            f" · phase {state.get('phase', '-')}"
            if iteration
            else "setup"  # hydration and the critic come before iteration 1
        ) + f" · {state.get('current_step', '-')}"
        if status != "running":
            text += f" · {status}"
        with self._lock:
            self._text = text
            self._since = time.monotonic()
        if not self._tty:
            self.line(f"· {text}")

    def _spin(self) -> None:
        for frame in itertools.cycle(SPINNER):
            if self._stop.wait(self._frame_seconds):
                return
            with self._lock:
                if not self._text:
                    continue
                elapsed = int(time.monotonic() - self._since)
                self._out.write(f"\r\x1b[2K{frame} {self._text} · {elapsed}s")
                self._out.flush()


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

    def run(self) -> dict[str, Any]:
        """Follow until the run ends; print its summaries; return its final state."""
        state = self.client.run_state(self.run_id)
        self.tracker = IterationTracker(
            int(state.get("max_iterations") or 0), artifact_location(state)
        )
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

    def _handle(self, event: Mapping[str, Any]) -> None:
        seq = event.get("seq")
        if not isinstance(seq, int) or seq <= self.last_seq:
            return  # already seen (a replay after reconnecting)
        self.last_seq = seq
        text = notice(event)
        if text:
            self.progress.line(text)
        for summary in self.tracker.feed(event):
            self.progress.line(render_summary(summary) + "\n")

    def _stream(self) -> bool:
        """Read the live stream to its end. False when the API has no stream to offer."""
        failures = 0
        with StatePoller(self.state_source, self.progress, self.status_seconds):
            while True:
                headers = {"Accept": "text/event-stream"}
                if self.last_seq:
                    headers["Last-Event-ID"] = str(self.last_seq)
                try:
                    with self.client.stream(
                        run_path(self.run_id, "events"), {"follow": 1}, headers
                    ) as response:
                        if response.status_code == 204:
                            return True  # finished, and we have seen every event
                        content_type = response.headers.get("content-type", "")
                        if not content_type.startswith("text/event-stream"):
                            return False
                        for message in parse_sse(response.iter_lines()):
                            event = event_from_message(message)
                            if event is not None:
                                self._handle(event)
                                failures = 0
                            elif message.event == "error":
                                self.progress.line(f"! event stream: {message.data}")
                except httpx.TransportError as err:
                    failures += 1
                    if failures > MAX_STREAM_FAILURES:
                        raise CliError(
                            f"the event stream of {self.run_id} keeps failing: {err}"
                        ) from err
                    time.sleep(min(0.25 * 2**failures, 5.0))
                    continue
                # The API ends the stream when the run ends; otherwise pick it up again.
                if is_terminal(self.client.run_state(self.run_id)):
                    return True
                time.sleep(self.poll_seconds)

    def _poll(self) -> None:
        while True:
            # State before events: once the state is terminal, every event is already in.
            state = self.client.run_state(self.run_id)
            self.progress.update(state)
            for event in self.client.events(self.run_id, after=self.last_seq):
                self._handle(event)
            if is_terminal(state):
                return
            time.sleep(self.poll_seconds)
