"""A run or graph whose origin answers without what it starts from (the base branch named,
any commit) fails its first git step at once, saying so; an origin that does not answer
is retried as before. Real activities on real repositories, outside Temporal: what is
checked is the error each raises, which is what Temporal's retry policy reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from loopworks.activities.deps import StepDeps
from loopworks.activities.integration import IntegrationActivities
from loopworks.activities.repository import RepositoryActivities
from loopworks.schemas.integration import IntegrationRequest
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ORIGIN_LACKS, WorkspaceRequest
from loopworks.worker.build import build_deps
from loopworks.workspace.runner import GitError
from tests.integration.stack import bare_remote

pytestmark = pytest.mark.unit


@pytest.fixture
def deps(tmp_path: Path) -> StepDeps:
    return build_deps(Settings(LOOPS_DATA_DIR=tmp_path / "data"))


@pytest.fixture
def remote(tmp_path: Path) -> str:
    return bare_remote(tmp_path / "remote").as_uri()  # asked over a URL, as a server is


def _empty(tmp_path: Path) -> str:
    empty = tmp_path / "empty.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(empty)], check=True)
    return str(empty)


async def _prepare(deps: StepDeps, **request: str | None) -> object:
    activities = RepositoryActivities(deps)
    return await ActivityEnvironment().run(
        activities.prepare_workspace, WorkspaceRequest(run_id="r-1", **request)
    )


def _is_definite(err: ApplicationError) -> bool:
    return err.type == ORIGIN_LACKS and err.non_retryable


async def test_a_base_branch_the_origin_lacks_is_not_retried(deps: StepDeps, remote: str) -> None:
    with pytest.raises(ApplicationError) as raised:
        await _prepare(deps, repo=remote, base_branch="no-such-branch")
    assert _is_definite(raised.value)
    assert "branch 'no-such-branch' does not exist on origin" in raised.value.message


async def test_a_base_branch_the_default_origin_lacks_is_not_retried(deps: StepDeps) -> None:
    with pytest.raises(ApplicationError) as raised:
        await _prepare(deps, base_branch="no-such-branch")
    assert _is_definite(raised.value)


async def test_an_origin_without_commits_is_not_retried(deps: StepDeps, tmp_path: Path) -> None:
    with pytest.raises(ApplicationError) as raised:
        await _prepare(deps, repo=_empty(tmp_path))
    assert _is_definite(raised.value)
    assert "no commits" in raised.value.message


async def test_an_origin_git_cannot_reach_is_still_retried(deps: StepDeps, tmp_path: Path) -> None:
    """No answer may be a passing fault (a server restarting): Temporal retries it."""
    with pytest.raises(GitError):
        await _prepare(deps, repo=(tmp_path / "nowhere.git").as_uri())


async def test_the_branch_is_still_found_when_the_origin_has_it(
    deps: StepDeps, remote: str
) -> None:
    info = await _prepare(deps, repo=remote, base_branch="main")
    assert getattr(info, "base_branch", None) == "main"


async def test_a_graph_whose_origin_lacks_its_base_branch_is_not_retried(
    deps: StepDeps, remote: str
) -> None:
    activities = IntegrationActivities(deps)
    request = IntegrationRequest(graph_id="g-1", repo=remote, base_branch="no-such-branch")
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(activities.prepare_integration, request)
    assert _is_definite(raised.value)
