"""Single-shot calls' records on the origin this service created (workspace/call_records.py):
each a blob on a ref of its own until the run's close commits them on its branch and drops
those refs in the same transaction; a retried close loses none; on any other origin they
stay commits on their refs (tests/integration/test_call_refs.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from loopworks.activities.model_calls import (
    CARRIED_CALL_CAP,
    CARRIED_STEP_CAP,
    CallRecord,
    CarriedCalls,
)
from loopworks.activities.repository import RepositoryActivities
from loopworks.api.trajectory import run_trajectory
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.run import RunRequest
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import RecordAndCloseInput, RunLog
from loopworks.worker.build import build_deps
from loopworks.workspace import files
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.refs import work_ref
from tests.integration.stack import GitCalls, bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
HYDRATE = '{"ts":"2024-05-01T12:00:00","step":"hydrate"}\n'
PLAN = '{"ts":"2024-05-01T12:01:00","step":"plan"}\n'
# The calls the run's workflow made, as it names them to the close.
NAMES = ["00-hydrate-001", "01-plan-001"]
_CALLS = "refs/loopworks/_trajectory/run-1/_/"


def _ws(tmp_path: Path, name: str = "worker") -> GitWorkspaces:
    return GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com")


def _call_refs(origin: str | Path, run_id: str) -> dict[str, str]:
    """The run's call refs on origin: name to the type of object each points at."""
    prefix = f"refs/loopworks/_trajectory/{run_id}/_/"
    listed = git(f"--git-dir={origin}", "for-each-ref", "--format=%(refname) %(objecttype)", prefix)
    pairs = (line.split() for line in listed.splitlines())
    return {ref.removeprefix(prefix): kind for ref, kind in pairs}


def _close(
    ws: GitWorkspaces, origin: str, run_id: str, parent: str, calls: list[str] = NAMES
) -> str:
    """What the run's close does with its clone: link the calls the workflow names,
    commit, push the branch."""
    workdir = ws.checkout(run_id, origin, parent)
    (workdir / ".loops").mkdir(exist_ok=True)
    (workdir / ".loops" / "run.json").write_text("{}\n")
    ws.link_calls(workdir, origin, run_id, calls)
    commit = ws.commit(workdir, "close: the run's record", WHEN)
    assert ws.push_branch(workdir, f"loops/{run_id}", commit, run_id) == commit
    return commit


def test_a_call_waits_on_its_ref_as_a_blob_and_the_close_moves_it_onto_the_branch(
    tmp_path: Path,
) -> None:
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)

    # One object and one ref a call: no tree, no commit, no process.
    with GitCalls() as calls:
        blob = ws.record_call(origin, "run-1", "00-hydrate-001", HYDRATE, WHEN)
    assert calls.processes == {}
    assert calls.in_process == {"hash-object": 1, "update-ref": 1}
    assert git(f"--git-dir={origin}", "cat-file", "-t", blob) == "blob"
    ws.record_call(origin, "run-1", "01-plan-001", PLAN, WHEN)
    ws.record_call(origin, "run-2", "00-hydrate-001", "{}\n", WHEN)
    # One the workflow does not name to the close (a run recorded before it named them).
    ws.record_call(origin, "run-1", "01-evaluate-001", "{}\n", WHEN)
    assert _call_refs(origin, "run-1") == {
        "00-hydrate-001": "blob",
        "01-evaluate-001": "blob",
        "01-plan-001": "blob",
    }
    # Read from there while the run goes on.
    reader = _ws(tmp_path, "api")
    assert reader.call_records(origin, "run-1") == {
        "00-hydrate-001": HYDRATE,
        "01-evaluate-001": "{}\n",
        "01-plan-001": PLAN,
    }

    # Named calls with no record (a call that never reached its model) are no matter.
    closed = _close(ws, origin, "run-1", base, [*NAMES, "01-plan-002"])

    # On the branch beside the run's other records, and their refs are gone; the call
    # it was not told of stays where it is, served from there.
    shown = git(f"--git-dir={origin}", "show", "loops/run-1:.loops/trajectory/01-plan-001.jsonl")
    assert f"{shown}\n" == PLAN
    listed = git(f"--git-dir={origin}", "ls-tree", "--name-only", f"{closed}:.loops/trajectory")
    assert listed.split() == ["00-hydrate-001.jsonl", "01-plan-001.jsonl"]
    assert _call_refs(origin, "run-1") == {"01-evaluate-001": "blob"}
    assert reader.call_records(origin, "run-1") == {"01-evaluate-001": "{}\n"}
    # Another run's call is not this close's.
    assert _call_refs(origin, "run-2") == {"00-hydrate-001": "blob"}
    git(f"--git-dir={origin}", "fsck", "--connectivity-only", "--no-dangling")


def test_a_retried_close_keeps_the_calls_the_first_attempt_moved(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    ws.record_call(origin, "run-1", "00-hydrate-001", HYDRATE, WHEN)
    ws.record_call(origin, "run-1", "01-plan-001", PLAN, WHEN)

    first = _close(ws, origin, "run-1", base)
    assert _call_refs(origin, "run-1") == {}
    # The attempt's answer was lost (a crash after the push): the close runs again from
    # the same commit, on a worker that never saw the first (a clone of its own).
    again = _close(_ws(tmp_path, "other-worker"), origin, "run-1", base)

    assert again == first
    listed = git(f"--git-dir={origin}", "ls-tree", "--name-only", f"{again}:.loops/trajectory")
    assert listed.split() == ["00-hydrate-001.jsonl", "01-plan-001.jsonl"]
    assert git(f"--git-dir={origin}", "rev-parse", work_ref("run-1")) == again


def test_a_call_recorded_again_after_the_link_keeps_its_ref(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    ws.record_call(origin, "run-1", "00-hydrate-001", HYDRATE, WHEN)
    workdir = ws.checkout("run-1", origin, base)
    assert ws.link_calls(workdir, origin, "run-1", NAMES) == ["00-hydrate-001"]
    commit = ws.commit(workdir, "close", WHEN)
    # A retry of the call rewrites its record between the link and the push: the branch
    # holds the older one, so the ref (the newer) stays, and the reader serves it.
    newer = HYDRATE.replace("12:00:00", "12:05:00")
    ws.record_call(origin, "run-1", "00-hydrate-001", newer, WHEN)
    ws.push_branch(workdir, "loops/run-1", commit, "run-1")
    assert _call_refs(origin, "run-1") == {"00-hydrate-001": "blob"}
    assert ws.call_records(origin, "run-1") == {"00-hydrate-001": newer}


def test_a_call_recorded_as_a_commit_before_is_linked_too(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    # How every origin held a call until records became blobs here: a parentless commit
    # with the one file, on the call's ref (a run that started before, still open).
    scratch = tmp_path / "scratch"
    git("init", "--quiet", str(scratch))
    (scratch / ".loops" / "trajectory").mkdir(parents=True)
    (scratch / ".loops" / "trajectory" / "00-hydrate-001.jsonl").write_text(HYDRATE)
    git("add", "-A", cwd=scratch)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "call", cwd=scratch)
    ref = "refs/loopworks/_trajectory/run-1/_/00-hydrate-001"
    git("push", "--quiet", origin, f"HEAD:{ref}", cwd=scratch)
    assert _call_refs(origin, "run-1") == {"00-hydrate-001": "commit"}
    assert ws.call_records(origin, "run-1") == {"00-hydrate-001": HYDRATE}

    closed = _close(ws, origin, "run-1", base)

    shown = git(f"--git-dir={origin}", "show", f"{closed}:.loops/trajectory/00-hydrate-001.jsonl")
    assert f"{shown}\n" == HYDRATE
    assert _call_refs(origin, "run-1") == {}


def test_on_any_other_origin_a_call_stays_a_commit_on_its_ref(tmp_path: Path) -> None:
    origin = bare_remote(tmp_path)
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(str(origin), None)
    # Written in a scratch repository made in-process, pushed: one process a call.
    with GitCalls() as calls:
        ws.record_call(str(origin), "run-1", "00-hydrate-001", HYDRATE, WHEN)
    assert calls.processes == {"push": 1}
    assert calls.in_process["init"] == 1 and calls.in_process["commit-tree"] == 1
    assert _call_refs(origin, "run-1") == {"00-hydrate-001": "commit"}

    closed = _close(ws, str(origin), "run-1", base)

    listed = git(f"--git-dir={origin}", "ls-tree", "--name-only", f"{closed}:.loops")
    assert listed.split() == ["run.json"]
    assert _call_refs(origin, "run-1") == {"00-hydrate-001": "commit"}
    assert ws.call_records(str(origin), "run-1") == {"00-hydrate-001": HYDRATE}


def test_on_any_other_origin_calls_recorded_together_share_a_push(tmp_path: Path) -> None:
    """While a push to the origin runs, the calls recorded meanwhile wait and go in one
    push: a hundred runs on a user's repository make a push per group, not per call.
    Each call still returns only once its own record is on origin."""
    origin = bare_remote(tmp_path)
    ws = _ws(tmp_path)
    first_pushing, release = threading.Event(), threading.Event()
    git_command = ws._git

    def held_first_push(args: list[str], *rest: Any, **options: Any) -> Any:
        if "push" in args and not first_pushing.is_set():
            first_pushing.set()
            assert release.wait(30)
        return git_command(args, *rest, **options)

    ws._git = held_first_push  # type: ignore[method-assign]
    names = [f"01-evaluate-{n:03d}" for n in range(1, 9)]
    with GitCalls() as calls, ThreadPoolExecutor(max_workers=len(names)) as pool:
        first = pool.submit(ws.record_call, str(origin), "run-1", names[0], HYDRATE, WHEN)
        assert first_pushing.wait(30)
        rest = [
            pool.submit(ws.record_call, str(origin), "run-1", name, f"{name}\n", WHEN)
            for name in names[1:]
        ]
        time.sleep(0.5)  # the seven reach the group while the first push is held
        release.set()
        commits = [first.result(30), *(future.result(30) for future in rest)]

    assert calls.processes == {"push": 2}
    assert _call_refs(origin, "run-1") == dict.fromkeys(names, "commit")
    for name, commit in zip(names, commits, strict=True):
        assert git(f"--git-dir={origin}", "rev-parse", f"{_CALLS}{name}") == commit
    records = ws.call_records(str(origin), "run-1")
    assert records == {names[0]: HYDRATE, **{name: f"{name}\n" for name in names[1:]}}


async def test_a_close_that_fails_puts_the_calls_it_held_on_their_refs(tmp_path: Path) -> None:
    """A run on a user's repository holds its last calls' records for its close: a close
    that fails (here: a commit origin lacks) leaves them on their refs, not nowhere."""
    origin = str(bare_remote(tmp_path))
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data", LOOPS_LLM="offline")
    activities = RepositoryActivities(build_deps(settings))
    state = LoopInput(run_id="run-1", alias="r", request=RunRequest(task="t"), created_at="")
    request = RecordAndCloseInput(
        run_id="run-1",
        origin=origin,
        branch="loops/run-1",
        commit="0" * 40,
        log=RunLog(state=state.first_memory().state, calls={"02-reflect-001": HYDRATE}),
        committed_at=WHEN,
    )
    with pytest.raises(Exception, match="0000000"):
        await ActivityEnvironment().run(activities.record_and_close_run, request)
    assert _call_refs(origin, "run-1") == {"02-reflect-001": "commit"}
    assert _ws(tmp_path, "reader").call_records(origin, "run-1") == {"02-reflect-001": HYDRATE}


def test_a_step_hands_back_no_more_than_its_bound(tmp_path: Path) -> None:
    """Past CARRIED_STEP_CAP a step's records go to their refs: Temporal refuses a result
    past 2 MB, and a PRODUCE audited at every tool call makes many."""
    carried = CarriedCalls(_ws(tmp_path))
    text = "x" * (CARRIED_CALL_CAP - 1)
    taken = [carried.take(CallRecord("o", "r", f"01-audit-{n:03d}", text, WHEN)) for n in range(8)]
    assert taken == [True] * (CARRIED_STEP_CAP // CARRIED_CALL_CAP) + [False] * 4
    # The same call again replaces its own record: it is not counted twice.
    assert carried.take(CallRecord("o", "r", "01-audit-000", text, WHEN))


def test_a_failed_attempts_record_on_its_ref_yields_to_the_retrys_committed_one(
    tmp_path: Path,
) -> None:
    """On a user's repository a step that failed left its call's record on the call's
    ref, and its retry's record of the same call went with a commit: the later is served."""
    origin = str(bare_remote(tmp_path))
    ws = _ws(tmp_path)
    base = ws.resolve_base(origin, None)[1]
    failed = '{"ts":"2024-05-01T11:59:00","step":"plan","attempt":1}\n'
    ws.record_call(origin, "run-1", "01-plan-001", failed, WHEN)
    workdir = ws.checkout("run-1", origin, base)
    (workdir / ".loops" / "trajectory").mkdir(parents=True)
    (workdir / ".loops" / "trajectory" / "01-plan-001.jsonl").write_text(PLAN)
    ws.publish(workdir, "run-1", ws.commit(workdir, "iteration 1 · produce", WHEN))
    state = (
        LoopInput(
            run_id="run-1", alias="r", request=RunRequest(task="t", repo=origin), created_at=""
        )
        .first_memory()
        .state
    )
    assert run_trajectory(_ws(tmp_path, "reader"), state) == PLAN


def test_on_the_own_origin_the_close_keeps_the_later_of_a_ref_and_a_committed_record(
    tmp_path: Path,
) -> None:
    """A step that failed left its call's record on the call's ref; its retry's record of
    the same call went with the run's next commit. The close keeps the retry's and drops
    the stale ref; a ref newer than what was committed wins."""
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    failed = '{"ts":"2024-05-01T11:59:00","step":"plan","attempt":1}\n'
    ws.record_call(origin, "run-1", "01-plan-001", failed, WHEN)
    newer = HYDRATE.replace("12:00:00", "12:05:00")
    ws.record_call(origin, "run-1", "00-hydrate-001", newer, WHEN)
    workdir = ws.checkout("run-1", origin, base)
    (workdir / ".loops" / "trajectory").mkdir(parents=True)
    (workdir / ".loops" / "trajectory" / "01-plan-001.jsonl").write_text(PLAN)
    (workdir / ".loops" / "trajectory" / "00-hydrate-001.jsonl").write_text(HYDRATE)
    produced = ws.commit(workdir, "iteration 1 · produce", WHEN)
    ws.publish(workdir, "run-1", produced)

    closed = _close(_ws(tmp_path, "closer"), origin, "run-1", produced)

    def committed(name: str) -> str:
        return git(f"--git-dir={origin}", "show", f"{closed}:.loops/trajectory/{name}.jsonl")

    assert f"{committed('01-plan-001')}\n" == PLAN
    assert f"{committed('00-hydrate-001')}\n" == newer
    assert _call_refs(origin, "run-1") == {}


def test_the_close_neither_reads_nor_writes_through_a_link_where_a_record_goes(
    tmp_path: Path,
) -> None:
    """A command of the run's left a symlink where a call's record is to be linked, to a
    forged record that would win on its time: the close refuses it."""
    ws = _ws(tmp_path)
    origin = ws.ensure_default_origin(tmp_path / "data" / "origin.git")
    _, base = ws.resolve_base(origin, None)
    ws.record_call(origin, "run-1", "01-plan-001", PLAN, WHEN)
    forged = '{"ts":"2999-01-01T00:00:00","step":"forged"}\n'
    workdir = ws.checkout("run-1", origin, base)
    (workdir / ".loops" / "trajectory").mkdir(parents=True)
    (workdir / "forged.jsonl").write_text(forged)
    (workdir / ".loops" / "trajectory" / "01-plan-001.jsonl").symlink_to("../../forged.jsonl")

    with pytest.raises(files.Refused):
        ws.link_calls(workdir, origin, "run-1", NAMES)
    assert (workdir / "forged.jsonl").read_text() == forged
