"""The processes the integration tests start on free ports (the dev server, the API):
started again on new ports when another process takes one of them first (the suite runs
tests in parallel)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import stack as stack_module
from tests.integration.stack import DevServer, ExitedEarly, Stack

pytestmark = pytest.mark.integration


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on, as when another test's server bound it between
    our choosing it and our server starting."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def takes_first(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next free port chosen is `port`, the ones after it free ones."""
    first = iter([port])
    free_port = stack_module.free_port
    monkeypatch.setattr(stack_module, "free_port", lambda: next(first, None) or free_port())


def test_a_server_whose_port_was_taken_starts_again_on_another(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    takes_first(taken_port, monkeypatch)
    server = DevServer.start(tmp_path)
    try:
        assert server.port != taken_port
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
    finally:
        server.process.stop()


def test_a_server_given_a_taken_port_says_why_at_once(tmp_path: Path, taken_port: int) -> None:
    # No waiting out the minute a server that never listens would get: its own words.
    with pytest.raises(ExitedEarly, match="address already in use"):
        server = DevServer.start(tmp_path, port=taken_port)
        server.process.stop()  # reached only when the test fails: leave no server behind


def test_an_api_whose_port_was_taken_starts_again_on_another(
    stack: Stack, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    takes_first(taken_port, monkeypatch)
    process, base = stack.start_api()
    assert base != f"http://127.0.0.1:{taken_port}"
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
        assert response.status == 200
    assert process.popen.poll() is None
