"""A finished run answers without a worker: its status and events are in its result.
And a stack's open runs do not outlive the test that started them."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from loopworks.schemas.payload_keys import new_payload_key
from tests.integration.stack import Stack

pytestmark = pytest.mark.integration


def wait_status(base_url: str, run_id: str, wanted: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = httpx.get(f"{base_url}/runs/{run_id}", timeout=30).json()
        if state["status"] == wanted:
            return state
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never became {wanted}")


def test_finished_run_reads_its_status_and_events_with_no_worker(stack: Stack) -> None:
    worker = stack.start_worker()
    _, base_url = stack.start_api()
    run_id = httpx.post(
        f"{base_url}/runs", json={"task": "Write a guide", "audit_probability": 0}, timeout=30
    ).json()["run_id"]
    wait_status(base_url, run_id, "completed")
    live = httpx.get(f"{base_url}/runs/{run_id}/events", timeout=30).json()

    worker.stop()
    started = time.monotonic()
    events = httpx.get(f"{base_url}/runs/{run_id}/events", timeout=30)
    after = httpx.get(f"{base_url}/runs/{run_id}/events", params={"after": 5}, timeout=30)
    state = httpx.get(f"{base_url}/runs/{run_id}", timeout=30)
    elapsed = time.monotonic() - started

    assert events.status_code == 200 and events.json() == live
    assert [e["seq"] for e in after.json()] == list(range(6, len(live) + 1))
    assert state.status_code == 200 and state.json()["status"] == "completed"
    # Read from history, not by waiting out a query no worker will answer.
    assert elapsed < 5


def test_open_runs_are_terminated_when_the_stack_stops(stack: Stack) -> None:
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="2000")
    _, base_url = stack.start_api()
    run_id = httpx.post(f"{base_url}/runs", json={"task": "Write a guide"}, timeout=30).json()[
        "run_id"
    ]
    stack.terminate_open_runs()

    def listed_status() -> str:
        runs = httpx.get(f"{base_url}/runs", timeout=30).json()
        return next(run["status"] for run in runs if run["run_id"] == run_id)

    # Visibility is eventually consistent: give the listing a moment.
    deadline = time.monotonic() + 10
    while listed_status() == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert listed_status() != "running"


def test_a_terminated_run_reads_as_failed_saying_so(stack: Stack) -> None:
    """A run whose workflow was closed from outside (`temporal workflow terminate`, the
    UI's Terminate) never concluded: its last recorded state says `running`. Its status
    says how it ended instead, as the run list does."""
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="2000")
    _, base_url = stack.start_api()
    run_id = httpx.post(f"{base_url}/runs", json={"task": "Write a guide"}, timeout=30).json()[
        "run_id"
    ]
    stack.terminate_open_runs()  # with the reason "test finished"

    state = wait_status(base_url, run_id, "failed", timeout=30)
    assert state["stop"]["message"] == "the workflow was terminated: test finished"
    artifact = httpx.get(f"{base_url}/runs/{run_id}/artifact", timeout=30)
    assert artifact.status_code == 404
    assert artifact.json()["detail"].endswith("ended (failed) without producing an artifact")


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_run_terminated_before_any_worker_ran_it_reads_as_failed(
    stack: Stack, encrypted: bool
) -> None:
    """Terminated while its first workflow task was queued, a run has no state a worker
    could answer a query with (the server refuses: "closed before WorkflowTaskStarted"):
    it reads as its request set it up, failed, saying why, with no worker at all. Its
    start input is read with the API's converter, so an encrypted one reads as well."""
    if encrypted:
        stack.extra_env["LOOPS_PAYLOAD_KEYS"] = new_payload_key("k1")
    _, base_url = stack.start_api()
    request = {"task": "Write a guide", "max_iterations": 3}
    run_id = httpx.post(f"{base_url}/runs", json=request, timeout=30).json()["run_id"]
    stack.terminate_open_runs()

    state = httpx.get(f"{base_url}/runs/{run_id}", timeout=30)
    events = httpx.get(f"{base_url}/runs/{run_id}/events", timeout=30)
    artifact = httpx.get(f"{base_url}/runs/{run_id}/artifact", timeout=30)

    assert state.status_code == 200, state.text
    assert state.json()["status"] == "failed"
    assert state.json()["stop"]["message"] == "the workflow was terminated: test finished"
    assert (state.json()["task"], state.json()["max_iterations"]) == ("Write a guide", 3)
    assert (events.status_code, events.json()) == (200, [])
    assert artifact.status_code == 404
    assert artifact.json()["detail"].endswith("ended (failed) without producing an artifact")


def test_a_graph_terminated_before_any_worker_ran_it_reads_as_failed(
    stack: Stack, remote: Path
) -> None:
    _, base_url = stack.start_api()
    created = httpx.post(
        f"{base_url}/graphs", json={"goal": "Write a guide", "repo": str(remote)}, timeout=30
    )
    graph_id = created.json()["graph_id"]
    stack.terminate_open_runs()

    graph = httpx.get(f"{base_url}/graphs/{graph_id}", timeout=30)
    ledger = httpx.get(f"{base_url}/graphs/{graph_id}/ledger", timeout=30)

    assert graph.status_code == 200, graph.text
    assert (graph.json()["status"], graph.json()["goal"]) == ("failed", "Write a guide")
    assert graph.json()["message"] == "the workflow was terminated: test finished"
    assert (ledger.status_code, ledger.text) == (200, "")


def test_a_terminated_graph_reads_as_failed_saying_so(stack: Stack, remote: Path) -> None:
    stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="2000")
    _, base_url = stack.start_api()
    created = httpx.post(
        f"{base_url}/graphs", json={"goal": "Write a guide", "repo": str(remote)}, timeout=30
    )
    graph_id = created.json()["graph_id"]
    stack.terminate_open_runs()

    graph = httpx.get(f"{base_url}/graphs/{graph_id}", timeout=30).json()
    assert graph["status"] == "failed", graph
    assert graph["message"] == "the workflow was terminated: test finished"
