"""A webhook's receiver chooses its reply, and any API client chooses the receiver: the
delivery reads the reply's status and nothing of its body. The real activity against a
real socket on this machine, outside Temporal."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
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


@pytest.fixture
def endless_receiver() -> Iterator[int]:
    """A receiver that answers 200 with a body it says is a gibibyte, sends a megabyte of
    it and then nothing: a delivery that reads the body waits on it until its timeout."""
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
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n".encode())
            conn.sendall(b"x" * (1 << 20))
            done.wait(30)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield listener.getsockname()[1]
    done.set()
    server.join(5)
    listener.close()


async def test_a_receivers_reply_body_is_never_read(endless_receiver: int, tmp_path: Path) -> None:
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_NOTIFY_SECRET="s" * 32,
        LOOPS_NOTIFY_ATTEMPT_S=3,
        LOOPS_ALLOWED_SCHEMES="http,https",
        LOOPS_ALLOWED_ORIGINS=f"127.0.0.1:{endless_receiver}",
    )
    activities = NotificationActivities(build_deps(settings))
    body = NotificationBody(
        kind="run",
        id="r-1",
        event=NotifyEvent.COMPLETED,
        status="completed",
        at="2026-01-01T00:00:00+00:00",
    )
    hook = Webhook(url=f"http://127.0.0.1:{endless_receiver}/hook")
    note = Notification(body=body, key="r-1:1:completed", target=NotifyTarget(webhook=hook))

    outcome = await ActivityEnvironment().run(activities.send_notification, note)

    assert outcome.status_code == 200
