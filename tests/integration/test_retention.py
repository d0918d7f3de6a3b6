"""Retention end to end (docs/operations.md#retention): a real dev server, a worker with
LOOPS_RETENTION_DAYS=0, the API over HTTP with tokens, `loops` as a subprocess and a bare
origin on disk.

`loops gc --dry-run` names a finished run's refs and clones and not an open run's; `loops
gc` removes them and leaves the result branch and the playbook; a pinned run stays until
unpinned; only an admin token may run the gc; and the worker made the gc's Schedule."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pygit2
import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow

from loopworks.schemas.playbook import PLAYBOOK_BRANCH
from loopworks.workflows.retention import RETENTION_WORKFLOW
from tests.integration.stack import ROOT, Stack, git

pytestmark = pytest.mark.integration

ADMIN = "ops-0123456789abcdef"
USER = "alice-0123456789abcdef"
CALLS = "refs/loopworks/_trajectory/"
SKILLED_TASK = "Write a short guide [skill:count_words]"


def _refs(origin: Path) -> list[str]:
    return git(f"--git-dir={origin}", "for-each-ref", "--format=%(refname)").split()


def _of(refs: list[str], run_id: str) -> list[str]:
    """A run's refs: its work ref, its calls', its branch."""
    return [
        ref
        for ref in refs
        if ref in (f"refs/loopworks/{run_id}", f"refs/heads/loops/{run_id}")
        or ref.startswith(f"{CALLS}{run_id}/_/")
    ]


class Api:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def call(self, method: str, path: str, token: str = USER, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.request(
            method, f"{self.base_url}{path}", headers=headers, timeout=90, **kwargs
        )

    def start(self, repo: Path, **request: Any) -> str:
        body = {"task": "Write a short guide", "repo": str(repo), "audit_probability": 0}
        answer = self.call("POST", "/runs", json={**body, **request})
        assert answer.status_code == 201, answer.text
        run_id: str = answer.json()["run_id"]
        return run_id

    def wait(self, run_id: str, check: Any, what: str, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        found: dict[str, Any] = {}
        while time.monotonic() < deadline:
            found = self.call("GET", f"/runs/{run_id}/workspace").json()
            state = self.call("GET", f"/runs/{run_id}").json()
            if check(found, state):
                return state
            time.sleep(0.3)
        raise AssertionError(f"run {run_id} never {what}: {state}")


def loops(stack: Stack, base_url: str, *args: str, token: str = ADMIN) -> str:
    env = stack.env(LOOPS_API_URL=base_url, LOOPS_API_TOKEN=token)
    proc = subprocess.run(
        [sys.executable, "-m", "loopworks.cli", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"loops {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_gc_removes_a_finished_runs_records_and_nothing_else(
    stack: Stack, remote: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"custodiet": {"*": {"verdict": "BLOCK", "reason": "held"}}}))
    stack.start_worker(
        LOOPS_RETENTION_DAYS="0", LOOPS_OFFLINE_LATENCY_MS="50", LOOPS_OFFLINE_SCRIPT=str(script)
    )
    _, base_url = stack.start_api(
        LOOPS_API_TOKENS=f"alice:{USER}", LOOPS_API_ADMIN_TOKENS=f"ops:{ADMIN}"
    )
    api = Api(base_url)

    # A skill session's calls are pushed to refs of their own: records the gc removes.
    finished = api.start(remote, task=SKILLED_TASK)
    pinned = api.start(remote, task=SKILLED_TASK)
    # Open, held by its audit's BLOCK, with its work so far on its work ref.
    waiting = api.start(remote, audit_probability=1)
    for run_id in (finished, pinned):
        api.wait(run_id, lambda found, _: found["finished"], "finished")
    api.wait(waiting, lambda _, state: state["status"] == "blocked", "blocked")
    before = _refs(remote)
    for run_id in (finished, pinned):
        held = _of(before, run_id)
        assert f"refs/loopworks/{run_id}" in held and f"refs/heads/loops/{run_id}" in held
        assert any(ref.startswith(CALLS) for ref in held), held
    waiting_refs = _of(before, waiting)
    assert f"refs/loopworks/{waiting}" in waiting_refs, before
    assert f"refs/heads/{PLAYBOOK_BRANCH}" in before
    clones = stack.data_dir / "workspaces"
    assert (clones / finished / ".git").is_dir()

    # Pinning takes a write token; the gc an admin's.
    assert "is pinned" in loops(stack, base_url, "pin", pinned, token=USER)
    refused = api.call("POST", "/gc", json={"dry_run": True})
    assert refused.status_code == 403, refused.text
    assert "LOOPS_API_ADMIN_TOKENS" in refused.json()["detail"]

    dry = loops(stack, base_url, "gc", "--dry-run")
    assert "retention: records expire 0 days after a run finished" in dry, dry
    assert f"{finished}: work ref, " in dry and "clone(s)" in dry, dry
    assert pinned not in dry.split("pinned:")[0] and f"pinned: {pinned}" in dry, dry
    assert waiting not in dry, dry
    assert "kept: 1 open, 1 pinned" in dry, dry
    assert "would remove: the records of 1 run(s): 1 work ref(s)" in dry, dry
    pin = f"refs/loopworks/_pins/{pinned}/_"
    assert sorted(_refs(remote)) == sorted([*before, pin])  # a dry run removes nothing
    report = json.loads(loops(stack, base_url, "gc", "--dry-run", "--json"))
    [origin] = [o for o in report["origins"] if o["origin"] == str(remote)]
    [expired] = origin["expired"]
    assert expired["run_id"] == finished and expired["work_ref"] and not expired["branch"]
    assert expired["call_refs"] == len(_of(before, finished)) - 2
    assert sorted(expired["clones"]) == sorted(
        p.name for p in clones.iterdir() if p.name.split(".")[0] == finished
    )
    assert expired["clone_bytes"] > 0

    removed = loops(stack, base_url, "gc", "--yes")
    assert "removed: the records of 1 run(s)" in removed, removed
    after = _refs(remote)
    assert _of(after, finished) == [f"refs/heads/loops/{finished}"]  # the result stays
    assert _of(after, pinned) == _of(before, pinned) and pin in after
    assert _of(after, waiting) == waiting_refs
    assert f"refs/heads/{PLAYBOOK_BRANCH}" in after and "refs/heads/main" in after
    assert not [p for p in clones.iterdir() if p.name.split(".")[0] == finished]
    # The run still reads: its state from Temporal, its artifact and events from its branch.
    assert api.call("GET", f"/runs/{finished}/artifact").status_code == 200
    assert api.call("GET", f"/runs/{finished}/events").status_code == 200
    git(f"--git-dir={remote}", "fsck", "--connectivity-only")

    # Unpinned, the pinned run goes too; the open one still stays.
    assert "is not pinned" in loops(stack, base_url, "unpin", pinned, token=USER)
    loops(stack, base_url, "gc", "--yes")
    final = _refs(remote)
    assert _of(final, pinned) == [f"refs/heads/loops/{pinned}"] and pin not in final
    assert _of(final, waiting) == waiting_refs


async def test_the_worker_creates_the_gc_schedule(stack: Stack) -> None:
    """Every worker ensures it at start (compose, Kubernetes and `loops up` all run the
    worker's command: tests/deploy): one Schedule per task queue, in the Temporal UI."""
    worker = stack.start_worker(LOOPS_RETENTION_EVERY_HOURS="6")
    client = await Client.connect(stack.server.address)
    handle = client.get_schedule_handle(f"retention/{stack.task_queue}")
    deadline = time.monotonic() + 60
    while True:
        try:
            described = await handle.describe()
            break
        except Exception:
            if time.monotonic() > deadline or worker.popen.poll() is not None:
                raise AssertionError(f"no schedule: {worker.output()}") from None
            time.sleep(0.3)
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == RETENTION_WORKFLOW
    assert action.task_queue == stack.task_queue
    assert [i.every for i in described.schedule.spec.intervals] == [timedelta(hours=6)]

    # A second worker (or the same after a restart) finds it, and moves its interval.
    worker.stop()
    second = stack.start_worker(LOOPS_RETENTION_EVERY_HOURS="12")
    deadline = time.monotonic() + 60
    while [i.every for i in (await handle.describe()).schedule.spec.intervals] != [
        timedelta(hours=12)
    ]:
        assert time.monotonic() < deadline and second.popen.poll() is None, second.output()
        time.sleep(0.3)
    assert "could not create the retention schedule" not in second.output()


def _result_commit(remote: Path, parent: str) -> str:
    """A commit as a run's result branch holds one: the run's history under `.loops/` (a
    `loops/` branch without it is the repository's own, which the gc never takes)."""
    repo = pygit2.Repository(str(remote))
    records = repo.TreeBuilder()
    records.insert("history.jsonl", repo.create_blob(b"{}\n"), pygit2.GIT_FILEMODE_BLOB)
    root = repo.TreeBuilder(repo.get(parent).peel(pygit2.Tree))
    root.insert(".loops", records.write(), pygit2.GIT_FILEMODE_TREE)
    who = pygit2.Signature("t", "t@example.com")
    return str(repo.create_commit(None, who, who, "a run's result", root.write(), [parent]))


def test_a_run_temporal_forgot_expires_by_its_branch_and_is_pinned_by_its_repo(
    stack: Stack, remote: Path
) -> None:
    """Runs whose histories are gone (or another deployment's): one with a result branch
    has finished when that branch did, one without is kept, and one pinned by naming its
    repository stays; the API and the CLI over open access (the operator's own)."""
    stack.start_worker(LOOPS_RETENTION_DAYS="0")
    _, base_url = stack.start_api()
    sha = git(f"--git-dir={remote}", "rev-parse", "refs/heads/main")
    result = _result_commit(remote, sha)
    for ref, commit in (
        ("refs/loopworks/forgot-1", sha),
        ("refs/heads/loops/forgot-1", result),
        (f"{CALLS}forgot-1/_/00-hydrate-001", sha),
        ("refs/loopworks/forgot-2", sha),
        (f"{CALLS}forgot-2/_/00-hydrate-001", sha),
        ("refs/loopworks/forgot-3", sha),
        ("refs/heads/loops/forgot-3", result),
    ):
        git(f"--git-dir={remote}", "update-ref", ref, commit)
    unknown = httpx.post(f"{base_url}/runs/forgot-9/pin", json={"repo": str(remote)}, timeout=60)
    assert unknown.status_code == 404, unknown.text
    assert "name its repository" in unknown.json()["detail"]
    pinned = httpx.post(f"{base_url}/runs/forgot-3/pin", json={"repo": str(remote)}, timeout=60)
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["ref"] == "refs/loopworks/_pins/forgot-3/_"

    report = json.loads(
        loops(stack, base_url, "gc", "--yes", "--json", "--repo", str(remote), token="")
    )
    [origin] = report["origins"]
    assert [run["run_id"] for run in origin["expired"]] == ["forgot-1"]
    assert origin["kept"] == {"unknown": 1, "pinned": 1}
    left = _refs(remote)
    assert _of(left, "forgot-1") == ["refs/heads/loops/forgot-1"]
    assert len(_of(left, "forgot-2")) == 2
    assert len(_of(left, "forgot-3")) == 2
