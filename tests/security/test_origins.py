"""Finding: any repository a client named was fetched and pushed to (SSRF). A run on
`http://169.254.169.254/...`, an internal service, compose's unauthenticated git daemon,
`ext::sh -c ...` (git runs the command), or any directory on the host (`/home/alice/proj`,
the service's own data directory, or a repository under a local root whose `.git` file,
common dir or alternates send git there) was accepted by the API and used by the worker.

Now an origin is admitted only by the operator's settings (workspace/origin_policy.py): the
API answers 422 naming the setting that would admit it, before anything is fetched, and
the worker refuses the same origins given straight to a workflow (the temporal CLI can
start one around the API), before git touches them, without retrying."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from loopworks.activities.integration import IntegrationActivities
from loopworks.activities.repository import RepositoryActivities
from loopworks.api.main import create_app
from loopworks.schemas.integration import IntegrationRequest
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ORIGIN_REFUSED, WorkspaceRequest
from loopworks.worker.build import build_deps
from loopworks.workspace.stores import mark_own_origin
from tests.integration.stack import bare_remote
from tests.security.credential_seeker import Seeker, credential_seeker

TOKEN = "ghp_in_the_url_0123456789abcdef"


class _NoTemporal:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the API used Temporal: {name}")


@pytest.fixture
def seeker() -> Iterator[Seeker]:
    with credential_seeker() as server:
        yield server


@pytest.fixture
def operator_settings(tmp_path: Path) -> Settings:
    """A shared deployment as its operator sets it up: one directory of local
    repositories, the default schemes, no allow-list."""
    (tmp_path / "projects").mkdir()
    return Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_LOCAL_ROOTS=str(tmp_path / "projects"),
        LOOPS_ALLOWED_SCHEMES="https,ssh",
        LOOPS_ALLOWED_ORIGINS="",
    )


def _refused_origins(tmp_path: Path, seeker: Seeker) -> list[tuple[str, str | None]]:
    """(origin, the setting the refusal names)."""
    outside = bare_remote(tmp_path / "elsewhere")  # a real repository, outside the roots
    inside_data = bare_remote(tmp_path / "data" / "clones")
    # Under a root, but marked as a service's own origin: its clones would borrow its
    # store and write into it directly (workspace/stores.py), whatever it borrows in turn.
    marked = bare_remote(tmp_path / "projects" / "marked")
    mark_own_origin(marked)
    # Under a root, but with git sent into the data directory all the same: by a `.git`
    # file (a worktree's kind), by a common dir, by alternates.
    gitfile = tmp_path / "projects" / "gitfile"
    gitfile.mkdir()
    (gitfile / ".git").write_text(f"gitdir: {inside_data}\n")
    common = bare_remote(tmp_path / "projects" / "common")
    (common / "commondir").write_text(f"{inside_data}\n")
    borrows = bare_remote(tmp_path / "projects" / "borrows")
    (borrows / "objects" / "info" / "alternates").write_text(f"{inside_data}/objects\n")
    return [
        (seeker.url(), "LOOPS_ALLOWED_SCHEMES"),
        (f"https://127.0.0.1:{seeker.port}/r.git", "LOOPS_ALLOWED_ORIGINS"),
        (f"https://localhost:{seeker.port}/r.git", "LOOPS_ALLOWED_ORIGINS"),
        ("http://169.254.169.254/latest/meta-data/", "LOOPS_ALLOWED_SCHEMES"),
        ("https://169.254.169.254/latest/meta-data/", "LOOPS_ALLOWED_ORIGINS"),
        (f"https://[::ffff:127.0.0.1]:{seeker.port}/r.git", "LOOPS_ALLOWED_ORIGINS"),
        (f"ext::sh -c touch% {tmp_path}/pwned", None),
        (str(outside), "LOOPS_LOCAL_ROOTS"),
        (outside.as_uri(), "LOOPS_ALLOWED_SCHEMES"),
        (str(inside_data), None),
        (str(marked), None),
        (str(gitfile), None),
        (str(common), None),
        (str(borrows), None),
        (f"https://x-access-token:{TOKEN}@github.com/acme/app.git", "LOOPS_GIT_CREDENTIALS"),
    ]


@pytest.fixture
async def api(operator_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(operator_settings, client=cast(Client, _NoTemporal()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


async def _post(api: httpx.AsyncClient, route: str, repo: str) -> httpx.Response:
    if route == "/playbooks":
        deltas = {"batch_id": "b-1", "source": "a person", "deltas": []}
        name = "origin-0"
        return await api.post(f"/playbooks/{name}/deltas", params={"repo": repo}, json=deltas)
    body = {"task": "t"} if route == "/runs" else {"goal": "g"}
    return await api.post(route, json={**body, "repo": repo})


@pytest.mark.unit
@pytest.mark.parametrize("route", ["/runs", "/graphs", "/playbooks"])
async def test_the_api_refuses_what_the_settings_do_not_admit(
    api: httpx.AsyncClient, route: str, tmp_path: Path, seeker: Seeker
) -> None:
    for origin, setting in _refused_origins(tmp_path, seeker):
        response = await _post(api, route, origin)
        assert response.status_code == 422, (origin, response.text)
        message = response.json()["message"]
        assert "origin not allowed" in message, (origin, message)
        if setting is not None:
            assert setting in message, (origin, message)
        assert TOKEN not in response.text
    assert seeker.seen.paths == [], "the API fetched a refused origin"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.unit
async def test_a_repository_under_a_local_root_is_still_admitted(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    repo = bare_remote(tmp_path / "projects")
    # Admitted: the API goes on to Temporal (its quotas' count, then the start), which this
    # one cannot reach.
    with pytest.raises(AssertionError, match="the API used Temporal"):
        await _post(api, "/runs", str(repo))


@pytest.mark.integration
async def test_the_worker_refuses_an_origin_given_straight_to_a_workflow(
    operator_settings: Settings, tmp_path: Path, seeker: Seeker
) -> None:
    deps = build_deps(operator_settings)
    repository, integration = RepositoryActivities(deps), IntegrationActivities(deps)
    for origin, _ in _refused_origins(tmp_path, seeker):
        for step, request in (
            (repository.prepare_workspace, WorkspaceRequest(run_id="r-1", repo=origin)),
            (integration.prepare_integration, IntegrationRequest(graph_id="g-1", repo=origin)),
        ):
            with pytest.raises(ApplicationError) as raised:
                await ActivityEnvironment().run(step, request)
            assert raised.value.type == ORIGIN_REFUSED, (origin, raised.value)
            assert raised.value.non_retryable
            assert TOKEN not in raised.value.message
    assert seeker.seen.paths == [], "the worker fetched a refused origin"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.integration
async def test_the_worker_still_uses_an_admitted_origin_and_its_own(
    operator_settings: Settings, tmp_path: Path
) -> None:
    deps = build_deps(operator_settings)
    activities = RepositoryActivities(deps)
    repo = bare_remote(tmp_path / "projects")
    admitted = await ActivityEnvironment().run(
        activities.prepare_workspace, WorkspaceRequest(run_id="r-1", repo=str(repo))
    )
    assert admitted.origin == str(repo)
    own = await ActivityEnvironment().run(
        activities.prepare_workspace, WorkspaceRequest(run_id="r-2")
    )
    assert own.origin.startswith(str(tmp_path / "data"))
    log = subprocess.run(
        ["git", "--git-dir", own.origin, "log", "--format=%s"], capture_output=True, text=True
    )
    assert "Initial commit" in log.stdout
