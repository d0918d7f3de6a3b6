"""RetentionWorkflow on the time-skipping server with a real worker: it plans with the
workers' policy, sweeps each origin in an activity of its own, reports an origin it
cannot sweep and goes on with the others, and removes only what a dry run names."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.schemas.retention import GcReport, KeptBecause, RetentionInput
from loopworks.schemas.settings import Settings
from loopworks.workflows.retention import RetentionWorkflow
from loopworks.workspace.configured import workspaces_for
from loopworks.workspace.pruning import RunRecords
from tests.integration.stack import bare_remote
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_graph import start_graph, task

pytestmark = pytest.mark.workflow


def _refs(origin: Path, prefix: str = "refs/") -> list[str]:
    listed = subprocess.run(
        ["git", f"--git-dir={origin}", "for-each-ref", "--format=%(refname)", prefix],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


async def _gc(harness: LoopHarness, params: RetentionInput) -> GcReport:
    return await harness.env.client.execute_workflow(
        RetentionWorkflow.run,
        params,
        id=f"retention-test-{uuid.uuid4().hex[:8]}",
        task_queue=harness.task_queue,
    )


async def test_the_gc_removes_what_its_dry_run_names(harness: LoopHarness, tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote")
    async with harness.worker(LOOPS_RETENTION_DAYS=0):
        handle = await harness.start(task="Write a guide", repo=str(remote))
        await handle.result()
        run_id = handle.id
        before = _refs(remote)
        nowhere = str(tmp_path / "gone.git")

        dry = await _gc(harness, RetentionInput(dry_run=True, repo=str(remote)))
        assert dry.dry_run and dry.policy.days == 0 and not dry.policy.branches
        [origin] = dry.origins
        assert origin.origin == str(remote) and origin.error is None
        assert [run.run_id for run in origin.expired] == [run_id]
        assert origin.totals.runs == 1 and origin.totals.work_refs == 1
        assert origin.totals.call_refs == len(
            _refs(remote, f"refs/loopworks/_trajectory/{run_id}/")
        )
        assert origin.totals.clones >= 1 and origin.totals.clone_bytes > 0
        assert dry.totals == origin.totals
        assert _refs(remote) == before

        # An origin that cannot be swept is reported; the gc goes on and completes.
        failed = await _gc(harness, RetentionInput(dry_run=True, repo=nowhere))
        [unreadable] = failed.origins
        assert unreadable.error and unreadable.totals.runs == 0

        done = await _gc(harness, RetentionInput(repo=str(remote), branches=True))
        assert done.totals.runs == 1 and done.totals.branches == 1
        assert _refs(remote, "refs/loopworks/") == []
        assert f"refs/heads/loops/{run_id}" not in _refs(remote)
        assert "refs/heads/main" in _refs(remote)
        assert not (harness.data_dir / "workspaces" / run_id).exists()


async def test_without_a_policy_nothing_is_visited(harness: LoopHarness, tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote")
    async with harness.worker():
        handle = await harness.start(task="Write a guide", repo=str(remote))
        await handle.result()
        report = await _gc(harness, RetentionInput())
        assert not report.policy.expires and report.origins == []
        asked = await _gc(harness, RetentionInput(repo=str(remote)))
        [origin] = asked.origins
        assert origin.totals.runs == 0 and origin.kept == {}


async def test_an_open_run_is_kept(harness: LoopHarness, tmp_path: Path) -> None:
    """A run held by its audit's BLOCK, its work so far on its work ref: the gc keeps it."""
    remote = bare_remote(tmp_path / "remote")
    block = {"custodiet": {"*": {"verdict": "BLOCK", "reason": "held"}}}
    async with harness.worker(block, LOOPS_RETENTION_DAYS=0):
        handle = await harness.start(task="Write a guide", repo=str(remote), audit_probability=1)
        for _ in range(300):
            if (await harness.status(handle)).status.value == "blocked":
                break
            await asyncio.sleep(0.1)
        assert (await harness.status(handle)).status.value == "blocked"
        # Real time: a skip past the block's wait would end the run before the gc looks.
        with harness.env.auto_time_skipping_disabled():
            report = await _gc(harness, RetentionInput(repo=str(remote)))
            await handle.terminate("test over")
        [origin] = report.origins
        assert origin.totals.runs == 0
        assert origin.kept == {KeptBecause.OPEN: 1}


async def test_a_graphs_task_loops_go_with_the_graph_and_its_integration_branch_stays(
    harness: LoopHarness,
) -> None:
    """On the service's default origin (a graph with no repo): the graph's task loops'
    work refs, call refs and clones go once it has finished; its integration branch, the
    task loops' branches (unless asked) and the playbook stay."""
    async with harness.worker(LOOPS_RETENTION_DAYS=0):
        graph = await start_graph(harness, [task("T-001"), task("T-002", "T-001")])
        result = await graph.result()
        assert result.state.status.value == "completed", result.state.message
        graph_id = result.state.graph_id
        loops = [run_id for t in result.state.tasks for run_id in t.run_ids]
        origin = harness.origin
        assert {f"refs/loopworks/{run_id}" for run_id in loops} <= set(_refs(origin))

        # Named: the time-skipping server lists no workflows to find origins by (the
        # integration test, tests/integration/test_retention.py, finds them).
        dry = await _gc(harness, RetentionInput(dry_run=True, repo=str(origin)))
        [swept] = [o for o in dry.origins if o.origin == str(origin)]
        assert swept.error is None and not swept.kept, swept
        assert sorted(run.run_id for run in swept.expired) == sorted(
            [
                *loops,
                *([graph_id] if _refs(origin, f"refs/loopworks/_trajectory/{graph_id}/_/") else []),
            ]
        )
        assert all(
            run.reason.startswith(f"its graph {graph_id} finished")
            for run in swept.expired
            if run.run_id != graph_id
        )
        # Pinning one task loop keeps it alone.
        await asyncio.to_thread(
            RunRecords.of(workspaces_for(Settings(LOOPS_DATA_DIR=harness.data_dir))).pin,
            str(origin),
            loops[0],
            "test",
            datetime.now(UTC),
        )
        await _gc(harness, RetentionInput(repo=str(origin)))

    left = _refs(origin)
    assert f"refs/loopworks/{loops[0]}" in left
    assert [ref for ref in left if ref.startswith("refs/loopworks/") and loops[1] in ref] == []
    assert f"refs/heads/{result.state.integration_branch}" in left
    assert all(f"refs/heads/loops/{run_id}" in left for run_id in loops)
    assert not (harness.data_dir / "workspaces" / loops[1]).exists()
