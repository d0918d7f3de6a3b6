"""A worker started before its Temporal server waits for it, saying so, and then polls:
compose and Kubernetes start the two side by side, and restart them apart. Before it
polls, it makes sure the namespace knows the workflows' search attributes, or refuses to
start naming them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.processes import SEARCH_ATTRIBUTES
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import DevServer, Process, Stack, free_port

pytestmark = pytest.mark.integration


def _wait_for(process: Process, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = process.output()
        if text in output:
            return output
        assert process.popen.poll() is None, f"the worker ended:\n{output}"
        time.sleep(0.2)
    raise AssertionError(f"never said {text!r}:\n{process.output()}")


def test_a_worker_waits_for_temporal_then_polls(stack: Stack, tmp_path: Path) -> None:
    port = free_port()
    worker = stack.start_worker(TEMPORAL_ADDRESS=f"127.0.0.1:{port}")
    _wait_for(worker, f"cannot reach Temporal at 127.0.0.1:{port}")

    server = DevServer.start(tmp_path, port=port)
    try:
        output = _wait_for(worker, "worker polling")
        # Not at once: a worker stopped within ~0.1 s of its pollers starting can abort at
        # interpreter exit inside the SDK's core ("PyGILState_Release ... finalizing",
        # seen once in CI), whatever came before; that is not what this test is about.
        time.sleep(1.0)
        worker.stop()
    finally:
        server.process.stop()
    assert worker.popen.returncode == 0
    assert "Traceback" not in output


def test_a_worker_stopped_while_waiting_for_temporal_ends_cleanly(
    stack: Stack, refused_port: int
) -> None:
    worker = stack.start_worker(TEMPORAL_ADDRESS=f"127.0.0.1:{refused_port}")
    _wait_for(worker, "cannot reach Temporal")
    worker.stop()
    assert worker.popen.returncode == 0
    assert "worker stopped before Temporal could be reached" in worker.output()


def _known_attributes(server: DevServer) -> str:
    listed = subprocess.run(
        [
            find_binary("temporal"),
            "operator",
            "search-attribute",
            "list",
            "--address",
            server.address,
            "--namespace",
            "default",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return listed.stdout


def test_a_worker_registers_the_search_attributes_a_dev_server_lacks(tmp_path: Path) -> None:
    """A dev server started by hand knows none of them: the worker adds them before it
    polls, and a run (which upserts them) then completes instead of failing every
    workflow task with BadSearchAttributes."""
    server = DevServer.start(tmp_path / "temporal", search_attributes={})
    stack = Stack(server=server, data_dir=tmp_path / "data", logs=tmp_path / "logs")
    try:
        assert "LoopStatus" not in _known_attributes(server)
        worker = stack.start_worker()
        output = _wait_for(worker, "worker polling")
        assert "registered search attributes on namespace default" in output, output
        known = _known_attributes(server)
        assert all(name in known for name in SEARCH_ATTRIBUTES), known

        _, base = stack.start_api()
        started = httpx.post(
            f"{base}/runs", json={"task": "Write a haiku", "audit_probability": 0}, timeout=30
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        terminal = {status.value for status in TERMINAL_STATUSES}
        deadline, state = time.monotonic() + 120, {}
        while time.monotonic() < deadline:
            state = httpx.get(f"{base}/runs/{run_id}", timeout=30).json()
            if state["status"] in terminal:
                break
            time.sleep(0.3)
        assert state["status"] == "completed", f"{state}\n{worker.output()[-3000:]}"
        assert "BadSearchAttributes" not in worker.output()
        # A second worker finds them all there and adds nothing.
        again = stack.start_worker()
        assert "registered search attributes" not in _wait_for(again, "worker polling")
    finally:
        stack.stop_all()
        server.process.stop()


def test_a_worker_that_cannot_register_them_refuses_to_start_naming_them(
    tmp_path: Path,
) -> None:
    """The dev server's SQLite visibility holds 3 Int attributes: with those taken, it
    refuses to add the workflows' Int attributes, as a server closed to workers would."""
    taken = {"OtherInt1": "Int", "OtherInt2": "Int", "OtherInt3": "Int"}
    server = DevServer.start(tmp_path / "temporal", search_attributes=taken)
    stack = Stack(server=server, data_dir=tmp_path / "data", logs=tmp_path / "logs")
    try:
        worker = stack.start_worker()
        assert worker.popen.wait(timeout=60) == 2, worker.output()
        said = worker.output()
        assert "cannot start: namespace default lacks search attributes" in said, said
        assert "LoopIteration (Int)" in said and "LoopStatus (Keyword)" in said
        assert "this worker cannot add them (" in said
        create = (
            f"temporal operator search-attribute create --address {server.address}"
            " --namespace default"
        )
        assert f"{create} --name LoopIteration --name GraphTasksCompleted" in said, said
        assert "worker polling" not in said and "Traceback" not in said
    finally:
        stack.stop_all()
        server.process.stop()
