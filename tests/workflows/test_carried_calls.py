"""A run's single-shot calls come back in their steps' results and are committed with the
run's next commit, on the service's own origin as on a user's repository: no ref of their
own, and there no push. Until then the workflow holds them, and the run's trajectory
serves them from there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loopworks.agent.trajectory import from_jsonl
from loopworks.api.trajectory import run_trajectory
from loopworks.schemas.roles import Role
from loopworks.schemas.run import Approval, RunStatus, StopReason
from loopworks.schemas.steps import TRAJECTORY_DIR
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.call_records import CALL_NAME
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.refs import calls_prefix
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_loop import TITLE_RULE, wait_for
from tests.workflows.test_trajectory import CLEAR_RULE

pytestmark = pytest.mark.workflow


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _call_files(repo: Path, branch: str) -> set[str]:
    listed = _git(repo, "ls-tree", "--name-only", f"{branch}:{TRAJECTORY_DIR}").split()
    return {name.removesuffix(".jsonl") for name in listed if CALL_NAME.match(name[:-6])}


@pytest.mark.parametrize("origin", ["own", "users"])
async def test_a_run_commits_its_calls_with_its_work(
    harness: LoopHarness, repo: Path, origin: str
) -> None:
    if origin == "own":
        repo = harness.origin  # the embedded default: no `repo` given
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide",
            repo=str(repo) if origin == "users" else None,
            rules=[TITLE_RULE, CLEAR_RULE],
            max_iterations=1,
            mode="interactive",
        )

        async def awaiting() -> bool:
            return (await harness.status(handle)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(awaiting)
        # Nothing committed yet: hydration's and the critic's records are the workflow's,
        # and the run's trajectory serves them from there.
        held = await handle.query(LoopWorkflow.carried_calls)
        assert sorted(held) == ["00-hydrate-001", "00-review-001"]
        live = await harness.status(handle)
        reader = GitWorkspaces(harness.data_dir / "reader", "t", "t@t")
        records = from_jsonl(run_trajectory(reader, live, held))
        assert {r.role for r in records} == {Role.HYDRATOR, Role.CRITIC}

        await handle.execute_update(LoopWorkflow.approve, Approval())
        state = (await handle.result()).state
        # Its close committed what it still held.
        assert await handle.query(LoopWorkflow.carried_calls) == {}
    assert state.status == RunStatus.COMPLETED

    # Every single-shot call of the run is a file on its branch, none on a ref of its own.
    branch = f"loops/{state.run_id}"
    names = _call_files(repo, branch)
    steps = {name.split("-")[1] for name in names}
    assert {"hydrate", "review", "plan", "evaluate", "reflect"} <= steps, names
    assert _git(repo, "for-each-ref", calls_prefix(state.run_id)) == ""
    # And each is there as it was recorded: the trajectory holds every role's call once.
    served = from_jsonl(run_trajectory(reader, state))
    systems = [r.role for r in served if r.kind == "system"]
    assert systems.count(Role.HYDRATOR) == 1 and systems.count(Role.REFLECTOR) == 1


async def test_a_step_that_fails_after_a_carried_call_puts_its_record_on_its_ref(
    harness: LoopHarness, repo: Path
) -> None:
    # The custodiet audits the producer's write (a call PRODUCE carries); the producer
    # never writes the artifact, so the step fails and its result carries nothing.
    script = {"producer": {"1": {"files": [{"path": "notes.md", "content": "notes"}]}}}
    async with harness.worker(script):
        handle = await harness.start(
            task="Write a guide", repo=str(repo), tool_audit_probability=1.0
        )
        state = (await handle.result()).state
    assert state.stop_reason == StopReason.PHASE_ERROR

    prefix = calls_prefix(state.run_id)
    refs = _git(repo, "for-each-ref", "--format=%(refname)", prefix).split()
    audits = [ref.removeprefix(prefix) for ref in refs if "-audit-" in ref]
    assert audits, refs
    records = from_jsonl(
        _git(repo, "show", f"{prefix}{audits[0]}:{TRAJECTORY_DIR}/{audits[0]}.jsonl")
    )
    assert {r.role for r in records} == {Role.CUSTODIET}
    # What the workflow had carried before the failure was committed by its close.
    assert {"00-hydrate-001", "01-plan-001"} <= _call_files(repo, f"loops/{state.run_id}")
