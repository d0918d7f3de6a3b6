"""A webhook's receiver chooses its reply, and any API client chooses the receiver: the
delivery reads the reply's status and nothing of its body, and gives an attempt
`LOOPS_NOTIFY_ATTEMPT_S` however the receiver answers. The real activity against a real
socket on this machine, outside Temporal."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from loopworks.activities.notification import NotificationActivities
from loopworks.schemas.notify import (
    Notification,
    NotificationBody,
    NotifyEvent,
    NotifyTarget,
    Webhook,
)
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps

pytestmark = pytest.mark.unit

GIB = 1 << 30


Answer = Callable[[socket.socket, threading.Event], None]


def _receiver(answer: Answer) -> Iterator[int]:
    """A receiver on a free port that reads one request and then answers with `answer`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            answer(conn, done)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield listener.getsockname()[1]
    done.set()
    server.join(5)
    listener.close()


@pytest.fixture
def endless_receiver() -> Iterator[int]:
    """It answers 200 with a body it says is a gibibyte, sends a megabyte of it and then
    nothing: a delivery that reads the body waits on it until its timeout."""

    def answer(conn: socket.socket, done: threading.Event) -> None:
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n".encode())
        conn.sendall(b"x" * (1 << 20))
        done.wait(30)

    yield from _receiver(answer)


@pytest.fixture
def dripping_receiver() -> Iterator[int]:
    """It sends its status line a byte every half second: each read is quick, so a
    timeout on reads alone never ends the attempt."""

    def answer(conn: socket.socket, done: threading.Event) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 200:
            if done.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(0.5)

    yield from _receiver(answer)


def _activities(tmp_path: Path, port: int) -> NotificationActivities:
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_NOTIFY_SECRET="s" * 32,
        LOOPS_NOTIFY_ATTEMPT_S=3,
        LOOPS_ALLOWED_SCHEMES="http,https",
        LOOPS_ALLOWED_ORIGINS=f"127.0.0.1:{port}",
    )
    return NotificationActivities(build_deps(settings))


def _notification(port: int) -> Notification:
    body = NotificationBody(
        kind="run",
        id="r-1",
        event=NotifyEvent.COMPLETED,
        status="completed",
        at="2026-01-01T00:00:00+00:00",
    )
    hook = Webhook(url=f"http://127.0.0.1:{port}/hook")
    return Notification(body=body, key="r-1:1:completed", target=NotifyTarget(webhook=hook))


async def test_a_receivers_reply_body_is_never_read(endless_receiver: int, tmp_path: Path) -> None:
    activities = _activities(tmp_path, endless_receiver)
    note = _notification(endless_receiver)

    outcome = await ActivityEnvironment().run(activities.send_notification, note)

    assert outcome.status_code == 200


async def test_an_attempt_ends_at_its_time_however_the_receiver_drips(
    dripping_receiver: int, tmp_path: Path
) -> None:
    activities = _activities(tmp_path, dripping_receiver)
    note = _notification(dripping_receiver)

    attempt = ActivityEnvironment().run(activities.send_notification, note)
    with pytest.raises(ApplicationError, match=r"no answer in 3s"):
        await asyncio.wait_for(attempt, timeout=30)
