"""A task graph on a repository whose ledger, or whose `docs/` directory, is a symlink out
of it: the merge queue's activities, run as the worker runs them, on a bare origin on
disk, neither read the secret behind the link nor write anything outside."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from loopworks.activities.integration import IntegrationActivities
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.integration import IntegrationRequest, LedgerRequest, MergeRequest
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import UNSAFE_PATH
from loopworks.schemas.tasks import LEDGER_PATH, LedgerLine, Task, TaskStatus
from loopworks.worker.build import build_deps
from tests.integration.stack import git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
GRAPH = "graph-1"
BRANCH = f"graphs/{GRAPH}"
SECRET = "SECRET-ledger-canary-93be"


def _origin(tmp_path: Path, links: dict[str, Path]) -> str:
    """A bare origin whose `main` holds a README and `links` (path -> target outside)."""
    origin = tmp_path / "origin.git"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(origin))
    seed = tmp_path / "seed"
    git("clone", "--quiet", str(origin), str(seed))
    (seed / "README.md").write_text("# project\n")
    for path, target in links.items():
        (seed / path).parent.mkdir(parents=True, exist_ok=True)
        (seed / path).symlink_to(target)
    git("add", "-A", cwd=seed)
    git("commit", "--quiet", "-m", "seed", cwd=seed)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=seed)
    return str(origin)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.env").write_text(f"TOKEN={SECRET}\n")
    return out


def _unchanged(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.env"]
    assert (outside / "secret.env").read_text() == f"TOKEN={SECRET}\n"


def _acts(tmp_path: Path) -> IntegrationActivities:
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data")
    return IntegrationActivities(build_deps(settings, OfflineModels()))


def _pushed(origin: str) -> str:
    return git("--git-dir", origin, "log", "--all", "-p", "--format=%H %s")


async def test_a_symlinked_ledger_is_neither_read_nor_written(
    tmp_path: Path, outside: Path
) -> None:
    origin = _origin(tmp_path, {LEDGER_PATH: outside / "secret.env"})
    acts = _acts(tmp_path)
    await acts.prepare_integration(IntegrationRequest(graph_id=GRAPH, repo=origin))
    line = LedgerLine(id="T-001", status=TaskStatus.PENDING, updated_at="2024-05-01T12:00:00Z")
    request = LedgerRequest(
        origin=origin, integration_branch=BRANCH, lines=[line], tasks=[], committed_at=WHEN
    )
    with pytest.raises(Exception) as refused:
        await acts.record_ledger(request)
    _unchanged(outside)
    assert SECRET not in _pushed(origin)
    # The step fails saying which path and why, and is not retried.
    assert isinstance(refused.value, ApplicationError), refused.value
    assert refused.value.type == UNSAFE_PATH and refused.value.non_retryable
    assert LEDGER_PATH in refused.value.message


async def test_a_task_is_never_relocated_into_a_symlinked_directory(
    tmp_path: Path, outside: Path
) -> None:
    origin = _origin(tmp_path, {"docs": outside})
    acts = _acts(tmp_path)
    base = (await acts.prepare_integration(IntegrationRequest(graph_id=GRAPH, repo=origin))).commit
    # What a task's loop pushes: its artifact and records at the repository's root.
    work = tmp_path / "child"
    git("clone", "--quiet", origin, str(work))
    git("checkout", "--quiet", "--detach", base, cwd=work)
    (work / "artifact.md").write_text("# the task's artifact\n")
    (work / ".loops").mkdir()
    (work / ".loops" / "history.jsonl").write_text("{}\n")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "loop", cwd=work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/loops/graph-1/T-001/1", cwd=work)
    task = Task(
        id="T-001",
        title="Task T-001",
        description="A change.",
        acceptance_criteria=["done"],
        verification_command="true",
    )
    merge = MergeRequest(
        graph_id=GRAPH,
        origin=origin,
        integration_branch=BRANCH,
        task=task,
        task_branch="loops/graph-1/T-001/1",
        attempt=1,
        committed_at=WHEN,
    )
    with pytest.raises(Exception) as refused:
        await acts.merge_task(merge)
    _unchanged(outside)
    assert isinstance(refused.value, ApplicationError), refused.value
    assert refused.value.type == UNSAFE_PATH and refused.value.non_retryable
    assert git("--git-dir", origin, "rev-parse", f"refs/heads/{BRANCH}") == base
