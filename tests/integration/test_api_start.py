"""The API started before any worker: it makes sure the namespace knows the workflows'
search attributes, as a worker does before it polls, so the first run of a fresh
deployment is created, not refused with `invalid search attribute: LoopStartedBy`; where it
cannot add them it is not ready, naming them, until someone does
(docs/operations.md#search-attributes). Real processes: a dev server started knowing
none of them, the API, then a worker."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.processes import SEARCH_ATTRIBUTES
from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import DevServer, Stack

pytestmark = pytest.mark.integration

RUN = {"task": "Write a haiku", "audit_probability": 0}


def _operator(server: DevServer, *args: str) -> str:
    done = subprocess.run(
        [
            find_binary("temporal"),
            "operator",
            "search-attribute",
            *args,
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
    return done.stdout


def _finished(base: str, run_id: str) -> dict[str, object]:
    terminal = {status.value for status in TERMINAL_STATUSES}
    deadline, state = time.monotonic() + 120, {}
    while time.monotonic() < deadline:
        state = httpx.get(f"{base}/runs/{run_id}", timeout=30).json()
        if state["status"] in terminal:
            break
        time.sleep(0.3)
    return state


def test_an_api_started_first_on_a_fresh_server_creates_the_first_run(tmp_path: Path) -> None:
    server = DevServer.start(tmp_path / "temporal", search_attributes={})
    stack = Stack(server=server, data_dir=tmp_path / "data", logs=tmp_path / "logs")
    try:
        assert "LoopStartedBy" not in _operator(server, "list")
        api, base = stack.start_api()
        assert "registered search attributes on namespace default" in api.output()
        known = _operator(server, "list")
        assert all(name in known for name in SEARCH_ATTRIBUTES), known
        assert httpx.get(f"{base}/readyz", timeout=30).status_code == 200

        started = httpx.post(f"{base}/runs", json=RUN, timeout=30)
        assert started.status_code == 201, f"{started.text}\n{api.output()[-3000:]}"
        # The run is a real one: the first worker, started after it, finds the
        # attributes there, adds nothing, and completes it.
        worker = stack.start_worker()
        state = _finished(base, started.json()["run_id"])
        assert state["status"] == "completed", f"{state}\n{worker.output()[-3000:]}"
        assert "registered search attributes" not in worker.output()
    finally:
        stack.stop_all()
        server.process.stop()


def test_an_api_that_cannot_add_them_is_not_ready_naming_them_until_they_are_there(
    tmp_path: Path,
) -> None:
    """The dev server's SQLite visibility holds 3 Int attributes: with those taken, it
    refuses to add the workflows' Int attributes, as a server closed to the API would.
    The API serves, not ready, and asks again: once there is room, it adds them."""
    taken = {"OtherInt1": "Int", "OtherInt2": "Int", "OtherInt3": "Int"}
    server = DevServer.start(tmp_path / "temporal", search_attributes=taken)
    stack = Stack(server=server, data_dir=tmp_path / "data", logs=tmp_path / "logs")
    try:
        api, base = stack.start_api()
        ready = httpx.get(f"{base}/readyz", timeout=30)
        assert ready.status_code == 503, ready.text
        said = ready.json()["detail"]
        assert said.startswith("namespace default lacks search attributes"), said
        assert "LoopIteration (Int)" in said and "LoopStartedBy (Keyword)" in said
        assert "the API cannot add them (" in said
        create = (
            f"temporal operator search-attribute create --address {server.address}"
            " --namespace default"
        )
        assert f"{create} --name LoopIteration --name GraphTasksCompleted" in said, said
        refused = httpx.post(f"{base}/runs", json=RUN, timeout=30)
        assert refused.status_code == 503 and "LoopStartedBy" in refused.text, refused.text
        assert "invalid search attribute" not in refused.text
        assert "Traceback" not in api.output()

        _operator(
            server,
            "remove",
            "--name",
            "OtherInt1",
            "--name",
            "OtherInt2",
            "--name",
            "OtherInt3",
            "--yes",
        )
        assert httpx.get(f"{base}/readyz", timeout=30).status_code == 200
        assert httpx.post(f"{base}/runs", json=RUN, timeout=30).status_code == 201
    finally:
        stack.stop_all()
        server.process.stop()
