"""The gc's git (workspace/pruning.py) against real repositories on disk: surveying what an
origin holds for runs, pins, deleting refs (in place on the service's own origin, pushed
to any other, over a path or a URL) and removing a run's clones without following a link
out of the workspaces directory."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.schemas.steps import HISTORY_PATH
from loopworks.workspace.default_origin import create_default_origin
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.pruning import PIN_FILE, PUSH_BATCH, RunRecords
from loopworks.workspace.refs import pin_ref, work_ref
from tests.integration.stack import bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
FORMS = ["own", "path", "file-url"]


def _ws(root: Path) -> GitWorkspaces:
    return GitWorkspaces(root, "loopworks-test", "loops@example.com")


def _origin(tmp_path: Path, form: str) -> tuple[str, Path]:
    """(the origin as runs name it, its git dir)."""
    if form == "own":
        bare = tmp_path / "own.git"
        create_default_origin(_ws(tmp_path / "setup"), bare)
        return str(bare), bare
    bare = bare_remote(tmp_path)
    return (str(bare) if form == "path" else bare.as_uri()), bare


def _refs(git_dir: Path) -> list[str]:
    return git(f"--git-dir={git_dir}", "for-each-ref", "--format=%(refname)").split()


def _finished_run(ws: GitWorkspaces, origin: str, run_id: str, calls: int = 2) -> str:
    """A run as one leaves its origin: its work ref and branch at its last commit, and
    its single-shot calls' refs; its clone (and an evaluation slot's) on `ws`'s disk."""
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout(run_id, origin, base)
    (workdir / "artifact.md").write_text(f"{run_id}\n")
    (workdir / HISTORY_PATH).parent.mkdir(exist_ok=True)
    (workdir / HISTORY_PATH).write_text("{}\n")
    sha = ws.commit(workdir, "produce", WHEN)
    ws.publish(workdir, run_id, sha)
    ws.checkout(run_id, origin, sha, slot="eval-1")
    for n in range(calls):
        ws.record_call(origin, run_id, f"0{n}-hydrate-001", "{}\n", WHEN)
    ws.push_branch(workdir, f"loops/{run_id}", sha, run_id)
    return sha


@pytest.mark.parametrize("form", FORMS)
def test_a_survey_names_each_runs_refs_pins_and_clones(tmp_path: Path, form: str) -> None:
    origin, bare = _origin(tmp_path, form)
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "run-1")
    _finished_run(ws, origin, "g1/task-a/1", calls=1)
    records = RunRecords.of(ws)
    records.pin(origin, "run-1", "alice", WHEN)
    # The playbook's branch is no run's, however it is named.
    sha = git(f"--git-dir={bare}", "rev-parse", "refs/heads/main")
    git(f"--git-dir={bare}", "update-ref", "refs/heads/loops/playbook", sha)
    git(f"--git-dir={bare}", "update-ref", "refs/heads/graphs/g1", sha)

    survey = records.survey(origin)

    assert survey.work_refs == {"run-1": work_ref("run-1"), "g1/task-a/1": work_ref("g1/task-a/1")}
    assert sorted(survey.call_refs["run-1"]) == [
        "refs/loopworks/_trajectory/run-1/_/00-hydrate-001",
        "refs/loopworks/_trajectory/run-1/_/01-hydrate-001",
    ]
    assert len(survey.call_refs["g1/task-a/1"]) == 1
    assert survey.branches == {
        "run-1": "refs/heads/loops/run-1",
        "g1/task-a/1": "refs/heads/loops/g1/task-a/1",
        "g1": "refs/heads/graphs/g1",
    }
    assert survey.pins == {"run-1"}
    assert {run: [c.name for c in clones] for run, clones in survey.clones.items()} == {
        "run-1": ["run-1", "run-1.eval-1"],
        "g1/task-a/1": ["g1/task-a/1", "g1/task-a/1.eval-1"],
    }
    assert all(c.bytes > 0 for clones in survey.clones.values() for c in clones)
    # The branches' tips, when Temporal no longer knows a run: their commits' time. A
    # `loops/` branch holding no run's history is the repository's own: it has none, so
    # the gc never takes it for a forgotten run's result.
    git(f"--git-dir={bare}", "update-ref", "refs/heads/loops/experiment", sha)
    branches = ["refs/heads/loops/run-1", "refs/heads/loops/experiment", "refs/heads/nope"]
    assert records.branch_times(origin, branches) == {"refs/heads/loops/run-1": WHEN}


@pytest.mark.parametrize("form", FORMS)
def test_deleting_a_runs_refs_leaves_every_other_ref(tmp_path: Path, form: str) -> None:
    origin, bare = _origin(tmp_path, form)
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "run-1")
    _finished_run(ws, origin, "run-2")
    records = RunRecords.of(ws)
    before = set(_refs(bare))
    survey = records.survey(origin)
    gone = [*survey.call_refs["run-1"], survey.work_refs["run-1"]]

    records.delete_refs(origin, gone)
    assert set(_refs(bare)) == before - set(gone)
    assert "refs/heads/loops/run-1" in _refs(bare)
    # Deleting them again (another gc got there first) is no error.
    records.delete_refs(origin, [*gone, survey.work_refs["run-2"]])
    assert set(_refs(bare)) == before - {*gone, work_ref("run-2")}


def test_many_refs_are_deleted_in_batches_through_a_push(tmp_path: Path) -> None:
    origin, bare = _origin(tmp_path, "file-url")
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "run-1", calls=1)
    sha = git(f"--git-dir={bare}", "rev-parse", "refs/heads/main")
    names = [f"refs/loopworks/_trajectory/run-1/_/x{n:04d}" for n in range(PUSH_BATCH + 20)]
    updates = "".join(f"create {name} {sha}\n" for name in names)
    subprocess.run(
        ["git", f"--git-dir={bare}", "update-ref", "--stdin"], input=updates, text=True, check=True
    )
    records = RunRecords.of(ws)
    calls = records.survey(origin).call_refs["run-1"]
    assert len(calls) == PUSH_BATCH + 21
    records.delete_refs(origin, calls)
    assert not [ref for ref in _refs(bare) if "_trajectory" in ref]


@pytest.mark.parametrize("form", FORMS)
def test_pin_and_unpin(tmp_path: Path, form: str) -> None:
    origin, bare = _origin(tmp_path, form)
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "run-1")
    records = RunRecords.of(ws)
    assert not records.is_pinned(origin, "run-1")

    assert records.pin(origin, "run-1", "alice", WHEN) == pin_ref("run-1")
    assert records.is_pinned(origin, "run-1")
    pinned = git(f"--git-dir={bare}", "show", f"{pin_ref('run-1')}:{PIN_FILE}")
    assert '"pinned_by": "alice"' in pinned
    # A graph's pin and its task loops' live side by side.
    records.pin(origin, "g1", "bob", WHEN)
    records.pin(origin, "g1/task-a/1", "bob", WHEN)
    assert records.survey(origin).pins == {"run-1", "g1", "g1/task-a/1"}

    assert records.unpin(origin, "run-1")
    assert not records.is_pinned(origin, "run-1")
    assert not records.unpin(origin, "run-1")
    assert records.survey(origin).pins == {"g1", "g1/task-a/1"}


@pytest.mark.parametrize("form", ["own", "file-url"])
def test_holds_run_knows_a_run_or_a_graph_by_any_of_its_refs(tmp_path: Path, form: str) -> None:
    origin, _ = _origin(tmp_path, form)
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "g1/task-a/1")
    records = RunRecords.of(ws)
    assert records.holds_run(origin, "g1/task-a/1")
    assert records.holds_run(origin, "g1")
    assert not records.holds_run(origin, "g")
    assert not records.holds_run(origin, "run-9")


def test_removing_clones_follows_no_link_and_tidies_empty_graph_directories(
    tmp_path: Path,
) -> None:
    origin, _ = _origin(tmp_path, "path")
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "g1/task-a/1")
    _finished_run(ws, origin, "g1/task-b/1")
    records = RunRecords.of(ws)
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    (outside / "keep.txt").write_text("not the worker's\n")
    # A link named as a run's slot would be: never taken for a clone, never followed.
    os.symlink(outside, ws.root / "g1" / "task-a" / "1.evil")
    names = [clone.name for clone in records.clones_of("g1/task-a/1")]
    assert names == ["g1/task-a/1", "g1/task-a/1.eval-1"]

    records.remove_clones(names)
    assert (outside / "keep.txt").read_text() == "not the worker's\n"
    assert (ws.root / "g1" / "task-a" / "1.evil").is_symlink()  # not a clone: left alone
    assert (ws.root / "g1" / "task-b" / "1").is_dir()
    records.remove_clones([c.name for c in records.clones_of("g1/task-b/1")])
    assert not (ws.root / "g1" / "task-b").exists()
    assert (ws.root / "g1").is_dir()  # task-a still holds the link


def test_a_directory_on_the_way_that_is_a_link_hides_no_clone_to_remove(tmp_path: Path) -> None:
    """A graph's directory replaced by a link out of the data directory: its clones are
    not listed, measured or removed through it."""
    origin, _ = _origin(tmp_path, "path")
    ws = _ws(tmp_path / "worker")
    _finished_run(ws, origin, "run-1")
    outside = tmp_path / "elsewhere"
    (outside / "task-a" / "1" / ".git").mkdir(parents=True)
    os.symlink(outside, ws.root / "g2")
    records = RunRecords.of(ws)
    assert records.clones_of("g2/task-a/1") == []
    assert (outside / "task-a" / "1" / ".git").is_dir()
