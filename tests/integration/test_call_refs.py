"""The single-shot calls' refs on a remote origin (docs/observability.md#the-trajectory):
the caches steps and the API read from never fetch them with the work refs; reading a
run's trajectory fetches that run's alone."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.refs import work_ref
from tests.integration.stack import bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
OTHER_RUNS = 300  # calls of earlier runs already on origin, three each


def calls_prefix(run_id: str) -> str:
    return f"refs/loopworks/_trajectory/{run_id}/_/"


def _ws(tmp_path: Path, name: str) -> GitWorkspaces:
    return GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com")


def _refs(git_dir: Path, prefix: str) -> list[str]:
    listed = git(f"--git-dir={git_dir}", "for-each-ref", "--format=%(refname)", prefix)
    return listed.split()


def _cache(ws: GitWorkspaces) -> Path:
    (head,) = (ws.root / ".cache").glob("*/HEAD")
    return head.parent


def test_a_workspace_cache_fetches_no_call_refs_and_the_reader_only_the_runs(
    tmp_path: Path,
) -> None:
    origin = bare_remote(tmp_path)
    url = f"file://{origin}"
    worker = _ws(tmp_path, "worker")
    _, base = worker.resolve_base(url, None)

    # A run's work, published, and its single-shot calls recorded beside it.
    workdir = worker.checkout("run-1", url, base)
    (workdir / "artifact.md").write_text("v1\n")
    sha = worker.commit(workdir, "v1", WHEN)
    worker.publish(workdir, "run-1", sha)
    worker.record_call(url, "run-1", "00-hydrate-001", '{"ts":"2024-05-01T12:00:00"}\n', WHEN)
    worker.record_call(url, "run-1", "01-plan-001", '{"ts":"2024-05-01T12:01:00"}\n', WHEN)
    worker.record_call(url, "graph-1/task-a/1", "00-hydrate-001", "{}\n", WHEN)
    # Many more from other runs, as a busy origin holds.
    call = git(f"--git-dir={origin}", "rev-parse", f"{calls_prefix('run-1')}01-plan-001")
    others = [f"run-{n}" for n in range(2, OTHER_RUNS + 2)]
    names = [f"{calls_prefix(run)}{i:02d}-hydrate-001" for run in others for i in range(3)]
    updates = "".join(f"create {name} {call}\n" for name in names)
    update = ["git", f"--git-dir={origin}", "update-ref", "--stdin"]
    subprocess.run(update, input=updates, text=True, check=True)
    assert len(_refs(origin, "refs/loopworks/_trajectory/")) == 3 * len(others) + 3

    # A step reading the run's files through a cache (another worker, so no clone of its
    # own): the cache has the branches and the work refs, and no call ref at all.
    reader = _ws(tmp_path, "api")
    assert reader.read_files("run-1", url, sha, ["artifact.md"]) == {"artifact.md": "v1\n"}
    assert reader.commit_at_ref(url, work_ref("run-1")) == sha
    cache = _cache(reader)
    assert _refs(cache, "refs/loopworks/_trajectory/") == []
    assert _refs(cache, "refs/loopworks/") == [work_ref("run-1")]
    # The run's working clone holds none either.
    assert _refs(workdir / ".git", "refs/loopworks/_trajectory/") == []

    # The trajectory reader still serves the run's calls, fetching those alone.
    calls = reader.call_records(url, "run-1")
    assert sorted(calls) == ["00-hydrate-001", "01-plan-001"]
    assert calls["01-plan-001"] == '{"ts":"2024-05-01T12:01:00"}\n'
    assert _refs(cache, "refs/loopworks/_trajectory/") == [
        f"{calls_prefix('run-1')}00-hydrate-001",
        f"{calls_prefix('run-1')}01-plan-001",
    ]
    # A task loop's calls are its own: not the graph's, nor the other way round.
    assert reader.call_records(url, "graph-1/task-a/1") == {"00-hydrate-001": "{}\n"}
    assert reader.call_records(url, "graph-1") == {}

    # A call recorded since is read on the next ask; the cache's next fetch of work
    # leaves the call refs it holds alone (neither fetched nor pruned).
    worker.record_call(url, "run-1", "02-plan-002", '{"ts":"2024-05-01T12:02:00"}\n', WHEN)
    assert sorted(reader.call_records(url, "run-1")) == [
        "00-hydrate-001",
        "01-plan-001",
        "02-plan-002",
    ]
    assert reader.branch_log(url, "main") == ["Initial commit"]
    assert len(_refs(cache, "refs/loopworks/_trajectory/")) == 3 + 1
