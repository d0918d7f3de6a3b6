"""The API over HTTP against a real dev server, a real worker and git remotes on disk.

One worker and one API process serve the whole module; each test starts its own runs.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from loopworks.schemas.run import TERMINAL_STATUSES, RunStatus
from tests.integration.stack import DevServer, Stack, bare_remote, git

pytestmark = pytest.mark.integration

RUN_TIMEOUT = 90.0
TERMINAL = {status.value for status in TERMINAL_STATUSES}
# Each offline model call takes this long, so a run stays open long enough to message it.
OFFLINE_LATENCY_MS = "150"


@dataclass
class Service:
    stack: Stack
    http: httpx.Client

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-4000:]}" for p in self.stack.processes)

    def start(self, **body: Any) -> str:
        response = self.http.post("/runs", json={"audit_probability": 0, **body})
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        assert isinstance(run_id, str)
        return run_id

    def wait_until_finished(self, run_id: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            response = self.http.get(f"/runs/{run_id}")
            assert response.status_code == 200, response.text
            state = response.json()
            if state["status"] in TERMINAL:
                return state
            time.sleep(0.25)
        raise AssertionError(f"run {run_id} still {state.get('status')}\n{self.logs()}")


def remote_branch(remote: Path, run_id: str) -> str:
    """The sha of `loops/<run_id>` on the remote, or '' when the branch is absent."""
    out = git("ls-remote", str(remote), f"refs/heads/loops/{run_id}")
    return out.split("\t")[0] if out else ""


@pytest.fixture(scope="module")
def service(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("api-stack")
    stack = Stack(
        server=dev_server,
        data_dir=root / "data",
        logs=root / "logs",
        extra_env={"LOOPS_OFFLINE_LATENCY_MS": OFFLINE_LATENCY_MS},
    )
    try:
        stack.start_worker()
        _, base_url = stack.start_api()
        with httpx.Client(base_url=base_url, timeout=30) as http:
            yield Service(stack, http)
    finally:
        stack.stop_all()


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare remote with one commit on `main`, shared by the module's runs."""
    return bare_remote(tmp_path_factory.mktemp("remote"))


@dataclass
class FinishedRun:
    run_id: str
    state: dict[str, Any]


@pytest.fixture(scope="module")
def repo_run(service: Service, remote: Path) -> FinishedRun:
    """One run on the given remote, started through the API and waited for."""
    response = service.http.post(
        "/runs",
        json={
            "task": "Write a short guide to reflex loops",
            "repo": str(remote),
            "audit_probability": 0,
        },
    )
    assert response.status_code == 201, response.text
    created = response.json()
    run_id = created["run_id"]
    assert re.fullmatch(r"write-a-short-guide-to-reflex-loops-\d{8}-\d{6}-[0-9a-f]{6}", run_id)
    assert created["alias"] == "write-a-short-guide-to-reflex-loops"
    assert created["status_url"] == f"/runs/{run_id}"
    assert response.headers["location"] == f"/runs/{run_id}"
    return FinishedRun(run_id, service.wait_until_finished(run_id))


def test_run_completes_and_pushes_its_branch(repo_run: FinishedRun, remote: Path) -> None:
    state, run_id = repo_run.state, repo_run.run_id
    assert state["status"] == "completed", state
    assert state["stop_reason"] == "threshold_reached"
    assert state["run_id"] == run_id
    assert state["origin"] == str(remote.resolve())
    for field in (
        "alias",
        "iteration",
        "max_iterations",
        "phase",
        "current_step",
        "last_score",
        "stagnation_count",
        "blocked",
        "usage",
    ):
        assert field in state
    tip = remote_branch(remote, run_id)
    assert tip, f"loops/{run_id} is not on the remote"
    artifact = git("--git-dir", str(remote), "show", f"loops/{run_id}:artifact.md")
    assert artifact.strip()
    git("--git-dir", str(remote), "cat-file", "-e", f"loops/{run_id}:.loops/insights.json")


def test_artifact_route_returns_the_pushed_text(
    service: Service, repo_run: FinishedRun, remote: Path
) -> None:
    response = service.http.get(f"/runs/{repo_run.run_id}/artifact")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/markdown")
    pushed = git("--git-dir", str(remote), "show", f"loops/{repo_run.run_id}:artifact.md")
    assert response.text.strip() == pushed
    # The final artifact, from the commit the run's state names.
    state = service.http.get(f"/runs/{repo_run.run_id}").json()
    assert response.headers["X-Loops-Run-Status"] == "completed"
    assert response.headers["X-Loops-Artifact-Commit"] == state["artifact_commit"]


def test_events_route(service: Service, repo_run: FinishedRun) -> None:
    events = service.http.get(f"/runs/{repo_run.run_id}/events").json()
    names = [event["event"] for event in events]
    assert names[0] == "run_started" and names[-1] == "pushed", names
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    expected = [
        "run_started",
        "hydration_done",
        "critic_verdict",
        "plan_created",
        "artifact_created",
        "checks_prepared",
        "evaluation_done",
        "qa_verdict",
        "reflection_done",
        "pushed",
    ]
    remaining = iter(names)
    assert all(name in remaining for name in expected), names  # in this order
    later = service.http.get(f"/runs/{repo_run.run_id}/events", params={"after": 3}).json()
    assert [event["seq"] for event in later] == [event["seq"] for event in events[3:]]


def test_list_route(service: Service, repo_run: FinishedRun) -> None:
    runs = service.http.get("/runs").json()
    listed = {run["run_id"]: run for run in runs}
    assert repo_run.run_id in listed, runs
    row = listed[repo_run.run_id]
    assert row["status"] == "completed"
    assert row["alias"] == repo_run.state["alias"]
    assert row["started_at"]
    completed = service.http.get("/runs", params={"status": "completed", "limit": 500}).json()
    assert repo_run.run_id in {run["run_id"] for run in completed}
    running = service.http.get("/runs", params={"status": "running"}).json()
    assert repo_run.run_id not in {run["run_id"] for run in running}


def test_list_filter_by_alias(service: Service, repo_run: FinishedRun) -> None:
    alias = repo_run.state["alias"]
    found = service.http.get("/runs", params={"alias": alias, "status": "completed"})
    assert found.status_code == 200, found.text
    assert repo_run.run_id in {run["run_id"] for run in found.json()}
    assert {run["alias"] for run in found.json()} == {alias}
    other = service.http.get("/runs", params={"alias": "no-run-has-this-alias"}).json()
    assert other == []
    # Only an alias's shape reaches the visibility query: no quote, no space.
    refused = service.http.get("/runs", params={"alias": 'x" OR WorkflowType != "x'})
    assert refused.status_code == 422


def test_the_list_is_newest_started_first_though_an_older_run_is_still_open(
    service: Service,
) -> None:
    """Found by hand: visibility hands out open runs first, so `loops status` with no run
    (the list's first) showed a run waiting for approval since long before the newest."""
    waiting = service.start(task="Outline a migration plan", mode="interactive")
    newest = service.start(task="Summarise the changelog")
    try:
        assert service.wait_until_finished(newest)["status"] == "completed"
        deadline = time.monotonic() + 10  # visibility is eventually consistent
        while True:
            first = service.http.get("/runs", params={"limit": 1}).json()
            if (first and first[0]["run_id"] == newest) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert [run["run_id"] for run in first] == [newest]
        both = {run["run_id"] for run in service.http.get("/runs").json()}
        assert {waiting, newest} <= both
    finally:
        service.http.post(f"/runs/{waiting}/stop", json={"reason": "test over"})


@pytest.mark.parametrize("status", sorted(s.value for s in RunStatus))
def test_list_filter_is_a_valid_visibility_query(service: Service, status: str) -> None:
    response = service.http.get("/runs", params={"status": status})
    assert response.status_code == 200, response.text
    assert all(run["status"] == status for run in response.json())


def test_visibility_query_on_loop_status(service: Service, repo_run: FinishedRun) -> None:
    async def find() -> bool:
        client = await Client.connect(service.stack.server.address)
        # Visibility is eventually consistent.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ids = [e.id async for e in client.list_workflows('LoopStatus = "completed"')]
            if repo_run.run_id in ids:
                # The task is the run's summary in the Temporal UI.
                description = await client.get_workflow_handle(repo_run.run_id).describe()
                assert await description.static_summary() == repo_run.state["task"]
                return True
            await asyncio.sleep(0.3)
        return False

    assert asyncio.run(find())


def test_stop_on_a_finished_run_is_409(service: Service, repo_run: FinishedRun) -> None:
    response = service.http.post(f"/runs/{repo_run.run_id}/stop", json={"reason": "late"})
    assert response.status_code == 409, response.text
    assert "finished" in response.json()["detail"]


def test_run_without_repo_uses_the_service_origin(service: Service) -> None:
    run_id = service.start(task="Summarise the design in a page")
    state = service.wait_until_finished(run_id)
    assert state["status"] == "completed", state
    origin = (service.stack.data_dir / "origin.git").resolve()
    assert Path(state["origin"]).resolve() == origin
    assert remote_branch(origin, run_id)
    git("--git-dir", str(origin), "cat-file", "-e", f"loops/{run_id}:artifact.md")


def test_messages_to_a_running_run(service: Service) -> None:
    """clear-block on an unblocked run is rejected by the workflow; stop is accepted once."""
    run_id = service.start(task="Draft release notes for the next version")
    early = service.http.get(f"/runs/{run_id}/artifact")
    assert early.status_code == 404, early.text
    assert "no artifact yet" in early.json()["detail"]
    blank = service.http.post(f"/runs/{run_id}/clear-block", json={"note": "  "})
    assert blank.status_code == 422 and "body.note" in blank.json()["message"]

    rejected = service.http.post(f"/runs/{run_id}/clear-block", json={"note": "go on"})
    assert rejected.status_code == 409, rejected.text
    assert "not blocked" in rejected.json()["detail"]

    stopped = service.http.post(f"/runs/{run_id}/stop", json={"reason": "enough"})
    assert stopped.status_code == 202, stopped.text
    assert stopped.json()["run_id"] == run_id
    state = service.wait_until_finished(run_id)
    assert (state["status"], state["stop_reason"]) == ("stopped", "user_stop"), state

    again = service.http.post(f"/runs/{run_id}/stop", json={})
    assert again.status_code == 409, again.text


def test_a_request_too_large_for_temporal_is_413_and_starts_nothing(service: Service) -> None:
    """Within the API's body limit (8 MiB) but over what the dev server holds as a
    workflow's input (2 MB): Temporal's refusal, as a 413 the client can act on."""
    criteria = [f"Criterion {i}: " + "x" * 60_000 for i in range(50)]
    response = service.http.post(
        "/runs", json={"task": "Write a guide with these criteria", "acceptance_criteria": criteria}
    )
    assert response.status_code == 413, response.text[:500]
    assert "more than Temporal holds" in response.json()["detail"]
    assert "Write a guide with these" not in service.http.get("/runs").text


UNKNOWN = "no-such-run-20250101-000000-abcdef"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", f"/runs/{UNKNOWN}", None),
        ("GET", f"/runs/{UNKNOWN}/events", None),
        ("GET", f"/runs/{UNKNOWN}/artifact", None),
        ("POST", f"/runs/{UNKNOWN}/stop", {}),
        ("POST", f"/runs/{UNKNOWN}/clear-block", {"note": "x"}),
        ("GET", "/runs/bad%20id%21", None),
    ],
)
def test_unknown_run_is_404(
    service: Service, method: str, path: str, body: dict[str, Any] | None
) -> None:
    response = service.http.request(method, path, json=body)
    assert response.status_code == 404, response.text
    assert re.fullmatch(r"run .+ not found", response.json()["detail"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_iterations": 2}, "body.task"),
        ({"task": "t", "max_iterations": 0}, "body.max_iterations"),
        ({"task": "t", "thresholds": {"A": 2.0}}, "body.thresholds.A"),
        ({"task": "t", "template": "no-such-template"}, "body.template"),
    ],
    ids=["missing-task", "max-iterations-0", "threshold-2", "unknown-template"],
)
def test_bad_input_is_422_naming_the_field(
    service: Service, body: dict[str, Any], field: str
) -> None:
    response = service.http.post("/runs", json=body)
    assert response.status_code == 422, response.text
    assert field in response.json()["message"]
    locs = [".".join(map(str, error["loc"])) for error in response.json()["detail"]]
    assert field in locs


def test_health(service: Service) -> None:
    assert service.http.get("/healthz").json() == {"status": "ok"}
    ready = service.http.get("/readyz")
    assert ready.status_code == 200, ready.text
