"""`/runs/{id}/workspace`: a finished run's clones are listed and removed on the API's
disk; a live run's are kept (409), an unknown run is a 404 and a bad id a 422."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api.main import create_app
from loopworks.api.models import RunWorkspace, WorkspaceEntry, WorkspaceRemoved
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient, FakeDescription, FakeHandle

pytestmark = pytest.mark.unit

RUN = "done-20250101-000000-abcdef"
# Beside the run's clones: other runs (one whose id starts like it), an origin cache.
OTHERS = (f"{RUN}-other", "another-20250101-000000-abcdef", ".cache")


class UnknownHandle(FakeHandle):
    async def describe(self, **_: Any) -> FakeDescription:
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")


class NoTemporal(FakeClient):
    def get_workflow_handle_for(self, _run: Any, run_id: str) -> FakeHandle:
        raise AssertionError(f"a bad id reached Temporal: {run_id}")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(LOOPS_DATA_DIR=tmp_path / "data")


@pytest.fixture
def root(settings: Settings) -> Path:
    root = settings.workspaces_dir
    for name in (RUN, f"{RUN}.evaluate", *OTHERS):
        (root / name / ".git").mkdir(parents=True)
        (root / name / "artifact.md").write_text("# x\n")
    (root / RUN / "notes.txt").write_text("0123456789")
    return root


@pytest.fixture
def fake() -> FakeClient:
    client = FakeClient()
    client.handle(RUN).open_for = 0  # closed
    return client


async def _http(settings: Settings, client: FakeClient) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, client=cast(Client, client))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


def remaining(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir())


async def test_get_lists_the_runs_clones_and_their_sizes(
    settings: Settings, root: Path, fake: FakeClient
) -> None:
    async for http in _http(settings, fake):
        response = await http.get(f"/runs/{RUN}/workspace")
    assert response.status_code == 200, response.text
    assert RunWorkspace.model_validate(response.json()) == RunWorkspace(
        run_id=RUN,
        finished=True,
        entries=[
            WorkspaceEntry(name=RUN, bytes=14),
            WorkspaceEntry(name=f"{RUN}.evaluate", bytes=4),
        ],
        bytes=18,
    )
    assert remaining(root) == sorted([RUN, f"{RUN}.evaluate", *OTHERS])


async def test_delete_removes_only_the_runs_clones(
    settings: Settings, root: Path, fake: FakeClient
) -> None:
    outside = root.parent / "outside"
    outside.mkdir()
    (root / f"{RUN}.link").symlink_to(outside, target_is_directory=True)
    async for http in _http(settings, fake):
        response = await http.delete(f"/runs/{RUN}/workspace")
        assert response.status_code == 200, response.text
        removed = WorkspaceRemoved.model_validate(response.json())
        assert [entry.name for entry in removed.removed] == [RUN, f"{RUN}.evaluate", f"{RUN}.link"]
        assert removed.bytes == sum(entry.bytes for entry in removed.removed) >= 18
        assert remaining(root) == sorted(OTHERS)
        assert outside.is_dir(), "a symlink was followed"

        again = await http.delete(f"/runs/{RUN}/workspace")
        assert again.status_code == 200, again.text
        assert again.json() == {"run_id": RUN, "removed": [], "bytes": 0}


async def test_delete_refuses_a_run_that_has_not_finished(
    settings: Settings, root: Path, fake: FakeClient
) -> None:
    fake.handle(RUN).open_for = 1_000_000
    async for http in _http(settings, fake):
        listed = await http.get(f"/runs/{RUN}/workspace")
        assert listed.json()["finished"] is False
        response = await http.delete(f"/runs/{RUN}/workspace")
    assert response.status_code == 409, response.text
    assert response.json()["detail"] == (
        f"run {RUN} has not finished; only a finished run's workspace is removed"
        f" (stop it first: POST /runs/{RUN}/stop)"
    )
    assert RUN in remaining(root)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_an_unknown_run_is_404(
    settings: Settings, root: Path, fake: FakeClient, method: str
) -> None:
    fake.handles[RUN] = UnknownHandle(RUN)
    async for http in _http(settings, fake):
        response = await http.request(method, f"/runs/{RUN}/workspace")
    assert response.status_code == 404, response.text
    assert response.json()["detail"] == f"run {RUN} not found"
    assert RUN in remaining(root)


@pytest.mark.parametrize("run_id", ["-rf", "a..b", f"{RUN}.lock", "x" * 200, "%2E%2E"])
@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_a_bad_id_is_422_before_temporal(
    settings: Settings, root: Path, method: str, run_id: str
) -> None:
    async for http in _http(settings, NoTemporal()):
        response = await http.request(method, f"/runs/{run_id}/workspace")
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["detail"][0]["loc"] == ["path", "run_id"]
    assert "path.run_id: run id" in body["message"]
    assert remaining(root) == sorted([RUN, f"{RUN}.evaluate", *OTHERS])


async def test_nothing_to_list_before_any_run_had_a_workspace(
    settings: Settings, fake: FakeClient
) -> None:
    async for http in _http(settings, fake):
        response = await http.get(f"/runs/{RUN}/workspace")
    assert response.json() == {"run_id": RUN, "finished": True, "entries": [], "bytes": 0}
