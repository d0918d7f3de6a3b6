"""A whole loop and a whole graph on an origin that names a program everywhere git would
run one (tests/security/hostile_origin.py): the run and the graph complete and push, and
none of the origin's programs ran, nor when its history and files are read in place after.

The real workflows and activities on the time-skipping server, with the offline model."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from loopworks.playbook.store import PlaybookStore
from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.playbook import playbook_name
from loopworks.schemas.run import RunStatus
from loopworks.schemas.tasks import TaskStatus
from loopworks.workspace.git import GitWorkspaces
from tests.integration.stack import git
from tests.security.hostile_origin import HostileOrigin, hostile_origin
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import start_graph, task

pytestmark = pytest.mark.workflow


@pytest.fixture(autouse=True)
def inside_the_workflow_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """As every workflow test (tests/workflows/conftest.py)."""
    monkeypatch.setenv("LOOPS_WORKFLOW_SANDBOX", "true")


@pytest.fixture
def harness(time_skipping_env: WorkflowEnvironment, tmp_path: Path) -> LoopHarness:
    return LoopHarness(time_skipping_env, tmp_path / "data", f"q-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def origin(tmp_path: Path) -> HostileOrigin:
    return hostile_origin(tmp_path / "hostile")


@pytest.mark.parametrize("form", ["path", "file-url"])
async def test_a_whole_run_on_a_hostile_origin_runs_none_of_its_programs(
    harness: LoopHarness, origin: HostileOrigin, tmp_path: Path, form: str
) -> None:
    repo = str(origin.path) if form == "path" else origin.path.as_uri()
    async with harness.worker():
        handle = await harness.start(task="Write a short guide", repo=repo, playbook=True)
        result = await handle.result()

    state = result.state
    assert state.status == RunStatus.COMPLETED, state.message
    pushed = git("rev-parse", f"refs/heads/{state.branch}", cwd=origin.path)
    assert state.artifact_commit is not None
    # The playbook reads and writes went through the same origin.
    reader = PlaybookStore.of(GitWorkspaces(tmp_path / "reader", "t", "t@t"))
    assert reader.versions(repo, playbook_name(repo))
    # The reads a playbook and the API make, in place on a path origin.
    assert reader.branch_log(repo, "main") == ["Initial commit"]
    assert reader.read_file_at_ref(repo, f"refs/heads/{state.branch}", "artifact.md")
    assert "artifact.md" in reader.list_files(repo, pushed)
    assert origin.ran() == []


async def test_a_whole_graph_on_a_hostile_origin_runs_none_of_its_programs(
    harness: LoopHarness, origin: HostileOrigin
) -> None:
    tasks = [task("T-001"), task("T-002", "T-001"), task("T-003", "T-001")]
    async with harness.worker():
        handle = await start_graph(harness, tasks, repo=str(origin.path))
        result = await handle.result()

    state = result.state
    assert state.status == GraphStatus.COMPLETED, state.message
    assert [t.status for t in state.tasks] == [TaskStatus.COMPLETED] * 3
    listed = git("ls-tree", "-r", "--name-only", state.integration_branch, cwd=origin.path)
    assert "docs/tasks/T-003/artifact.md" in listed.splitlines()
    assert origin.ran() == []
