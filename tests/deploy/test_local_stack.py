"""`loops up`'s supervision: when one of its processes ends, it says which and why."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from loopworks.deploy.local import (
    CannotStart,
    LocalStack,
    StackDown,
    _api_ready,
    _claim,
    _wait,
    free_port,
    main,
)
from loopworks.deploy.one_machine import default_local_roots
from loopworks.schemas.settings import Settings


def test_an_exited_process_is_named_with_how_it_ended_and_its_log(tmp_path: Path) -> None:
    stack = LocalStack(Settings(LOOPS_DATA_DIR=tmp_path), temporal_port=1, ui_port=2)
    quick = [sys.executable, "-c", "raise SystemExit(3)"]
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]
    stack._spawn("worker", quick, {})
    stack._spawn("api", slow, {})
    try:
        worker, api = stack.processes
        worker.wait(timeout=30)
        assert not stack.alive()
        assert stack.exited() == [
            f"worker (pid {worker.pid}) exited with code 3; its log: {tmp_path}/logs/worker.log"
        ]
        api.send_signal(signal.SIGKILL)
        api.wait(timeout=30)
        assert stack.exited()[1] == (
            f"api (pid {api.pid}) killed by signal 9; its log: {tmp_path}/logs/api.log"
        )
    finally:
        stack.stop()


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something else already serves."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _refused(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # pytest keeps its Ctrl-C
    with caplog.at_level(logging.ERROR, logger="loopworks.local"):
        assert main([]) == 1
    return caplog.text


def _no_process(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError(f"nothing may start: {args}")


def test_up_refuses_an_api_port_something_else_serves(
    tmp_path: Path,
    listening: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by hand: a second `loops up` found the first one's API on its port, said
    'loopworks is up', and its own API died on the taken port."""
    monkeypatch.setenv("LOOPS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LOOPS_API_PORT", str(listening))
    said = _refused(caplog, monkeypatch)
    assert f"cannot start: the API's port 127.0.0.1:{listening} is taken" in said
    assert "set LOOPS_API_PORT to a free port" in said


def test_up_refuses_a_data_directory_another_up_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _claim(tmp_path)
    try:
        monkeypatch.setenv("LOOPS_DATA_DIR", str(tmp_path))
        said = _refused(caplog, monkeypatch)
    finally:
        held.close()
    assert f"another `loops up` (pid {os.getpid()}) is serving the data directory" in said
    # Released, the directory is free again.
    _claim(tmp_path).close()


def test_up_refuses_a_taken_temporal_ui_port_before_starting_its_server(
    tmp_path: Path, listening: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path,
        LOOPS_API_PORT=free_port(),
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
    )
    stack = LocalStack(settings, int(settings.temporal_address.rsplit(":")[1]), listening)
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    try:
        with pytest.raises(CannotStart, match="LOOPS_TEMPORAL_UI_PORT"):
            stack.start()
    finally:
        stack.stop()


def test_the_temporal_dev_server_is_given_every_port_it_listens_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in CI: left to choose, the dev server's HTTP API took the port chosen for the
    loopworks API (free until the API starts), and `loops up` read Temporal's answer to
    /readyz."""
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path,
        LOOPS_API_PORT=free_port(),
        TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
    )
    temporal_port = int(settings.temporal_address.rsplit(":")[1])
    stack = LocalStack(settings, temporal_port, free_port())
    started: list[list[str]] = []

    def spawn(name: str, command: list[str], env: dict[str, str]) -> None:
        started.append(command)
        raise CannotStart("enough")

    monkeypatch.setattr(stack, "_spawn", spawn)
    with pytest.raises(CannotStart, match="enough"):
        stack.start()
    stack.stop()
    command = started[0]
    ports = {flag: int(command[command.index(flag) + 1]) for flag in _LISTENS}
    assert len(set(ports.values())) == len(_LISTENS)
    assert settings.api_port not in ports.values()


_LISTENS = ("--port", "--ui-port", "--http-port", "--metrics-port")


def test_up_says_so_when_something_else_answers_on_the_api_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class NotOurs(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>someone else</html>")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotOurs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(CannotStart, match="something other than the loopworks API"):
            _api_ready(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_waiting_ends_when_a_process_it_waits_on_has_ended() -> None:
    with pytest.raises(StackDown, match="the API did not come up"):
        _wait(lambda: False, "the API", alive=lambda: False)


def test_ctrl_c_is_a_clean_stop_even_when_a_child_ended_on_it_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C reaches the terminal's whole process group: the worker may end on it before
    `loops up` sees its own flag. Seen in CI as `loops up` exiting 1, saying the worker
    had ended. Here the child has ended and the SIGINT has arrived before the wait."""

    def start(stack: LocalStack) -> None:
        stack._spawn("worker", [sys.executable, "-c", "pass"], {})
        stack.processes[0].wait(timeout=30)
        os.kill(os.getpid(), signal.SIGINT)  # to `loops up`'s own handler

    monkeypatch.setenv("LOOPS_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(LocalStack, "start", start)
    assert _main_keeping_pytests_signals([], caplog) == 0
    assert "exited" not in caplog.text


def test_ctrl_c_during_the_demo_stops_it_cleanly(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    refused_port: int,
) -> None:
    """A Ctrl-C while the demo runs is a stop, not 'the demo failed' (exit 1)."""

    def start(stack: LocalStack) -> None:
        stack._spawn("worker", [sys.executable, "-c", "import time; time.sleep(60)"], {})
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setenv("LOOPS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LOOPS_API_PORT", str(refused_port))  # nothing answers the demo
    monkeypatch.setattr(LocalStack, "start", start)
    assert _main_keeping_pytests_signals(["--demo"], caplog) == 0
    assert "the demo failed" not in caplog.text


def _main_keeping_pytests_signals(argv: list[str], caplog: pytest.LogCaptureFixture) -> int:
    """`loops up`'s main, which installs its own SIGINT/SIGTERM handlers (the tests
    signal it through them); pytest's are put back after."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with caplog.at_level(logging.ERROR, logger="loopworks.local"):
            return main(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_up_says_when_its_data_directory_cannot_be_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file where the directory should be: a sentence, not a traceback."""
    taken = tmp_path / "data"
    taken.write_text("a file, not a directory\n")
    monkeypatch.setenv("LOOPS_DATA_DIR", str(taken))
    said = _refused(caplog, monkeypatch)
    assert f"cannot start: the data directory {taken} cannot be used: File exists" in said


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("LOOPS_API_PORT", "abc", "LOOPS_API_PORT\n  Input should be a valid integer"),
        ("TEMPORAL_ADDRESS", "justahost", "TEMPORAL_ADDRESS needs host:port"),
    ],
)
def test_up_says_which_setting_is_wrong_instead_of_a_traceback(
    variable: str,
    value: str,
    said: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    with caplog.at_level(logging.ERROR, logger="loopworks.local"):
        assert main([]) == 2
    assert "cannot start: " in caplog.text and said in caplog.text


@pytest.mark.deploy
@pytest.mark.parametrize(
    ("settings", "defaulted"),
    [
        ({}, True),
        ({"LOOPS_API_HOST": "localhost"}, True),
        ({"LOOPS_API_HOST": "::1"}, True),
        ({"LOOPS_LOCAL_ROOTS": "/srv/repos"}, False),
        ({"LOOPS_LOCAL_ROOTS": ""}, False),
        ({"LOOPS_API_TOKENS": "a-token-0123456789"}, False),
        ({"LOOPS_API_HOST": "0.0.0.0"}, False),
    ],
)
def test_up_lets_one_user_on_loopback_name_repositories_where_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str], defaulted: bool
) -> None:
    """`loops new --repo .` needs no setting for a single user: loops up's local root is the
    directory it started from, unless the API is shared (tokens, or not on loopback) or
    the operator named the roots."""
    monkeypatch.delenv("LOOPS_LOCAL_ROOTS", raising=False)
    roots = default_local_roots(Settings(**settings), tmp_path)
    assert roots == (str(tmp_path.resolve()) if defaulted else None)
