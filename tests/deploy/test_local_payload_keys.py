"""`loops up` encrypts what its Temporal stores: a payload key made once in the data
directory (private, kept across restarts) unless LOOPS_PAYLOAD_KEYS names the keys, given
to the worker and the API, and the dev server's UI pointed at the API's codec endpoint.
A whole `loops up` reading its encrypted run back after a restart:
tests/integration/test_up.py."""

from __future__ import annotations

import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopworks.deploy.local import CannotStart, LocalStack, free_port
from loopworks.deploy.one_machine import PAYLOAD_KEYS_FILE, local_payload_keys
from loopworks.schemas.payload_keys import new_payload_key, parse_payload_keys
from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit


def test_a_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    settings = Settings(LOOPS_DATA_DIR=tmp_path)
    env, source = local_payload_keys(settings)
    path = tmp_path / PAYLOAD_KEYS_FILE
    assert source == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(parse_payload_keys(env["LOOPS_PAYLOAD_KEYS"])) == ["local-1"]
    assert env["LOOPS_PAYLOAD_KEYS"] == path.read_text().strip()
    # The next start reads the same key: the runs it encrypted stay readable.
    assert local_payload_keys(settings) == (env, source)
    # Rotated by hand (a new key in front), the file is read as it is.
    rotated = f"{new_payload_key('local-2')},{env['LOOPS_PAYLOAD_KEYS']}"
    path.write_text(rotated + "\n")
    assert local_payload_keys(settings)[0] == {"LOOPS_PAYLOAD_KEYS": rotated}


def test_the_operators_keys_win_and_nothing_is_written(tmp_path: Path) -> None:
    keys = new_payload_key("ops")
    assert local_payload_keys(Settings(LOOPS_DATA_DIR=tmp_path, LOOPS_PAYLOAD_KEYS=keys)) == (
        {},
        "LOOPS_PAYLOAD_KEYS",
    )
    assert not (tmp_path / PAYLOAD_KEYS_FILE).exists()


def test_a_spoilt_key_file_stops_up_saying_where(tmp_path: Path) -> None:
    (tmp_path / PAYLOAD_KEYS_FILE).write_text("local-1:not-a-key\n")
    with pytest.raises(ValueError, match=f"{tmp_path / PAYLOAD_KEYS_FILE}: .* not base64"):
        local_payload_keys(Settings(LOOPS_DATA_DIR=tmp_path))
    (tmp_path / PAYLOAD_KEYS_FILE).write_text("\n")
    with pytest.raises(ValueError, match="holds no key"):
        local_payload_keys(Settings(LOOPS_DATA_DIR=tmp_path))


def _spawned(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> list[tuple[str, list[str], dict[str, str]]]:
    """What `stack.start` spawns, up to the worker: the dev server's part is played by
    `listener`, listening on its port."""
    started: list[tuple[str, list[str], dict[str, str]]] = []

    def spawn(name: str, command: list[str], env: dict[str, str]) -> None:
        started.append((name, command, env))
        if name == "temporal":
            listener.bind(("127.0.0.1", stack.temporal_port))
            listener.listen()
        else:
            raise CannotStart("enough")

    monkeypatch.setattr(stack, "_spawn", spawn)
    return started


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        yield sock


def test_the_dev_servers_ui_decodes_through_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> None:
    monkeypatch.delenv("LOOPS_TEMPORAL_UI_URL", raising=False)
    monkeypatch.delenv("LOOPS_PAYLOAD_KEYS", raising=False)
    api_port, temporal_port, ui_port = free_port(), free_port(), free_port()
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path,
        LOOPS_API_PORT=api_port,
        TEMPORAL_ADDRESS=f"127.0.0.1:{temporal_port}",
    )
    stack = LocalStack(settings, temporal_port, ui_port)
    started = _spawned(stack, monkeypatch, listener)
    with pytest.raises(CannotStart, match="enough"):
        stack.start()
    stack.stop()
    assert [name for name, _, _ in started] == ["temporal", "worker"]
    [(_, server, _), (_, _, env)] = started
    codec = server[server.index("--ui-codec-endpoint") + 1]
    assert codec == f"http://127.0.0.1:{api_port}/codec"
    # The worker (and the API, with the same variables) get the keys and the UI's page.
    assert env["LOOPS_PAYLOAD_KEYS"] == (tmp_path / PAYLOAD_KEYS_FILE).read_text().strip()
    assert env["LOOPS_TEMPORAL_UI_URL"] == f"http://127.0.0.1:{ui_port}"
    assert stack.payload_keys == str(tmp_path / PAYLOAD_KEYS_FILE)


def test_a_temporal_it_did_not_start_gets_no_ui_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> None:
    """Where its UI is, `loops up` cannot know: it names none, but encrypts all the same."""
    monkeypatch.delenv("LOOPS_TEMPORAL_UI_URL", raising=False)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = int(listener.getsockname()[1])
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path, LOOPS_API_PORT=free_port(), TEMPORAL_ADDRESS=f"127.0.0.1:{port}"
    )
    stack = LocalStack(settings, port, free_port())
    started = _spawned(stack, monkeypatch, listener)  # no server spawned: unused
    with pytest.raises(CannotStart, match="enough"):
        stack.start()
    stack.stop()
    [(name, _, env)] = started
    assert name == "worker"
    assert "LOOPS_TEMPORAL_UI_URL" not in env and "LOOPS_PAYLOAD_KEYS" in env
