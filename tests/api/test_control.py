"""Updates mapped to HTTP (one helper for all) and the Idempotency-Key, without Temporal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import idempotency
from loopworks.api.main import create_app
from loopworks.schemas.run import RunRequest
from loopworks.schemas.settings import Settings
from loopworks.workflows.loop import LoopWorkflow
from tests.api.fake_temporal import FakeClient, FakeDescription, FakeHandle, FakeStarted
from tests.api.test_validation import GRAPH_TASK

pytestmark = pytest.mark.unit

RUN = "fake-20250101-000000-abcdef"


class RejectingHandle(FakeHandle):
    async def execute_update(self, update: Any, *args: Any, **_: Any) -> Any:
        cause = ApplicationError(f"run is not {update.__name__}able (status running)")
        raise WorkflowUpdateFailedError(cause)


@dataclass
class Memo:
    memo: dict[str, str]
    workflow_type: str = "LoopWorkflow"
    status: WorkflowExecutionStatus = WorkflowExecutionStatus.RUNNING

    async def memo_value(self, key: str, default: Any = None) -> Any:
        return self.memo.get(key, default)


class StartOnce(FakeClient):
    """Temporal's id uniqueness: the second start with an id is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[str, dict[str, Any]] = {}

    async def start_workflow(self, run: Any, params: Any, *, id: str, **options: Any) -> Any:
        if run is not LoopWorkflow.run:
            return await super().start_workflow(run, params, id=id, **options)
        if id in self.started:
            raise WorkflowAlreadyStartedError(id, "LoopWorkflow")
        self.started[id] = options
        return FakeStarted(id)

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> Any:
        if workflow_id not in self.started:
            return super().get_workflow_handle(workflow_id)
        started = self.started[workflow_id]

        class _Handle:
            async def describe(self) -> Memo:
                return Memo(dict(started.get("memo") or {}))

        return _Handle()


async def _http(client: FakeClient) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(), client=cast(Client, client))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


@pytest.mark.parametrize(
    ("action", "body"),
    [("pause", {}), ("resume", {}), ("approve", {}), ("clear-block", {"note": "n"})],
)
async def test_accepted_update_is_200_with_the_state(action: str, body: Any) -> None:
    fake = FakeClient()
    async for http in _http(fake):
        response = await http.post(f"/runs/{RUN}/{action}", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["run_id"] == RUN
    assert fake.handle(RUN).updates == [action.replace("-", "_")]


@pytest.mark.parametrize("action", ["pause", "resume", "approve", "clear-block"])
async def test_rejected_update_is_409_with_the_reason(action: str) -> None:
    fake = FakeClient()
    fake.handles[RUN] = RejectingHandle(RUN)
    async for http in _http(fake):
        body = {"note": "n"} if action == "clear-block" else {}
        response = await http.post(f"/runs/{RUN}/{action}", json=body)
        assert response.status_code == 409, response.text
        assert "(status running)" in response.json()["detail"]


@pytest.mark.parametrize("action", ["pause", "resume", "approve", "clear-block"])
async def test_update_to_a_closed_run_is_409(action: str) -> None:
    fake = FakeClient()
    fake.handle(RUN).open_for = 0
    async for http in _http(fake):
        body = {"note": "n"} if action == "clear-block" else {}
        response = await http.post(f"/runs/{RUN}/{action}", json=body)
        assert response.status_code == 409, response.text
        assert "already finished" in response.json()["detail"]
    assert fake.handle(RUN).updates == []


async def test_approve_with_an_empty_object_approves_as_drafted() -> None:
    fake = FakeClient()
    async for http in _http(fake):
        assert (await http.post(f"/runs/{RUN}/approve", json={})).status_code == 200
        # JSON with nothing in it is the same empty approval.
        empty = {"Content-Type": "application/json"}
        assert (await http.post(f"/runs/{RUN}/approve", headers=empty)).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_iterations": 0}, "body.max_iterations"),
        ({"max_iterations": 21}, "body.max_iterations"),
        ({"thresholds": {"A": 2}}, "body.thresholds.A"),
        ({"rules": []}, "body.rules"),
        ({"colour": "red"}, "body.colour"),
    ],
)
async def test_bad_approval_is_422_naming_the_field(body: dict[str, Any], field: str) -> None:
    fake = FakeClient()
    async for http in _http(fake):
        response = await http.post(f"/runs/{RUN}/approve", json=body)
        assert response.status_code == 422, response.text
        assert field in response.json()["message"]
    assert fake.handle(RUN).updates == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # A mistyped edit would approve the plan unedited.
        ({"taks": [GRAPH_TASK]}, "body.taks"),
        ({"tasks": [{**GRAPH_TASK, "verfy": "true"}]}, "body.tasks.0.verfy"),
    ],
)
async def test_a_graph_approval_with_a_field_it_does_not_know_is_422(
    body: dict[str, Any], field: str
) -> None:
    fake = FakeClient()
    async for http in _http(fake):
        response = await http.post("/graphs/graph-1/approve", json=body)
        assert response.status_code == 422, response.text
        assert field in response.json()["message"]
    assert fake.handle("graph-1").updates == []


# --- Idempotency-Key ----------------------------------------------------------------


def test_run_id_for_key_is_deterministic_and_scoped() -> None:
    one = idempotency.run_id_for_key("k-1", "loopworks")
    assert one == idempotency.run_id_for_key("k-1", "loopworks")
    assert one != idempotency.run_id_for_key("k-2", "loopworks")
    assert one != idempotency.run_id_for_key("k-1", "another-queue")
    assert one.startswith("key-") and len(one) == len("key-") + 32


def test_request_digest_is_of_the_validated_request() -> None:
    digest = idempotency.request_digest
    assert digest(RunRequest(task="t")) == digest(RunRequest(task="t", mode="auto"))
    # Unset, a prep package may set the limit: 4 spelled out is another request.
    assert digest(RunRequest(task="t")) != digest(RunRequest(task="t", max_iterations=4))
    assert digest(RunRequest(task="t")) != digest(RunRequest(task="u"))


async def test_same_key_same_run() -> None:
    fake = StartOnce()
    headers = {"Idempotency-Key": "abc"}
    async for http in _http(fake):
        first = await http.post("/runs", json={"task": "write it"}, headers=headers)
        again = await http.post("/runs", json={"task": "write it", "mode": "auto"}, headers=headers)
    assert first.status_code == 201, first.text
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(fake.started) == 1
    # The replayed request's slots were given back: only the run's own are held.
    assert sorted(fake.slots.values()) == [first.json()["run_id"]] * 2
    assert len(fake.released) == 2
    options = fake.started[first.json()["run_id"]]
    assert options["id_reuse_policy"].name == "REJECT_DUPLICATE"
    assert options["id_conflict_policy"].name == "FAIL"


async def test_same_key_different_request_is_422() -> None:
    fake = StartOnce()
    headers = {"Idempotency-Key": "abc"}
    async for http in _http(fake):
        await http.post("/runs", json={"task": "write it"}, headers=headers)
        other = await http.post("/runs", json={"task": "something else"}, headers=headers)
    assert other.status_code == 422, other.text
    assert "header.Idempotency-Key" in other.json()["message"]
    assert "different request" in other.json()["message"]


async def test_without_a_key_every_post_is_a_new_run() -> None:
    fake = StartOnce()
    async for http in _http(fake):
        first = await http.post("/runs", json={"task": "write it"})
        second = await http.post("/runs", json={"task": "write it"})
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["run_id"] != second.json()["run_id"]
    assert all(
        idempotency.REQUEST_DIGEST_MEMO not in options["memo"] for options in fake.started.values()
    )


@pytest.mark.parametrize("key", ["", "x" * 256])
async def test_bad_key_is_422(key: str) -> None:
    async for http in _http(StartOnce()):
        response = await http.post("/runs", json={"task": "t"}, headers={"Idempotency-Key": key})
        assert response.status_code == 422, response.text
        assert "header.Idempotency-Key" in response.json()["message"]


async def test_a_run_request_may_carry_a_prep_package() -> None:
    """`POST /runs` takes a prep package as `POST /graphs` does; the run makes its plan of
    it (docs/graphs.md#a-single-run-from-a-prep-package)."""
    fixtures = Path(__file__).parents[1] / "fixtures" / "prep"
    upload = {
        "package": (fixtures / "prep-package.json").read_bytes().decode(),
        "tasks": (fixtures / "prep-tasks.jsonl").read_bytes().decode(),
    }
    fake = FakeClient()
    async for http in _http(fake):
        created = await http.post("/runs", json={"task": "Add an export", "prep_package": upload})
        ignoring = await http.post("/runs", json={"task": "t", "read_prep_package": False})
    assert created.status_code == 201, created.text
    assert ignoring.status_code == 201, ignoring.text
    request = fake.starts[0]["params"].request
    assert request.prep_package.package == upload["package"]
    assert request.prep_package.tasks == upload["tasks"]
    assert request.max_iterations is None  # the package's, once the run reads it
    assert fake.starts[1]["params"].request.read_prep_package is False


class ClosingGraph(FakeHandle):
    """A graph that ends between the API's look at it and the stop it sends."""

    async def describe(self, **_: Any) -> FakeDescription:
        return FakeDescription(WorkflowExecutionStatus.RUNNING, "TaskGraphWorkflow")

    async def signal(self, *_: Any, **__: Any) -> None:
        raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")


class ClosingRun(ClosingGraph):
    async def describe(self, **_: Any) -> FakeDescription:
        return FakeDescription(WorkflowExecutionStatus.RUNNING)


@pytest.mark.parametrize("kind", ["runs", "graphs"])
async def test_a_stop_racing_the_end_is_409_not_a_temporal_error(kind: str) -> None:
    """Found by the API fuzz: a graph that finished just as its stop arrived was a 502,
    "Temporal error: workflow execution already completed"."""
    client = FakeClient()
    target = "graph-0-loop-20261126-192438-8f2519" if kind == "graphs" else RUN
    client.handles[target] = ClosingGraph(target) if kind == "graphs" else ClosingRun(target)
    async for http in _http(client):
        response = await http.post(f"/{kind}/{target}/stop", json={"reason": None})
    assert response.status_code == 409, response.text
    assert "has already finished" in response.json()["detail"]
