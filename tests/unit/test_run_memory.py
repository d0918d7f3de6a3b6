"""The run's memory and event log: bounded tail, idempotent git log, old inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopworks.schemas.events import EVENT
from loopworks.schemas.loop import EVENT_TAIL, LoopInput
from loopworks.schemas.run import RunRequest, RunState
from loopworks.schemas.steps import HISTORY_PATH, RUN_STATE_PATH, TRAJECTORY_DIR, RunLog
from loopworks.workspace.run_log import last_seq, parse_history, write_run_log
from tests.integration.stack import git

pytestmark = pytest.mark.unit

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def _event(seq: int) -> dict[str, object]:
    return {
        "seq": seq,
        "ts": "2026-01-01T00:00:00+00:00",
        "run_id": "r",
        "iteration": 1,
        "phase": "A",
        "step": "PLAN",
        "event": "iteration_advanced",
        "payload": {"iteration": seq},
    }


def test_a_new_runs_memory_starts_from_its_request() -> None:
    params = LoopInput(
        run_id="r-1", alias="r", request=RunRequest(task="t"), created_at="2026-01-01T00:00:00"
    )
    memory = params.first_memory()
    assert memory.state.branch == "loops/r-1" and memory.last_seq == 0 and memory.tail == []


def _commit(root: Path) -> str:
    git("add", "-A", cwd=root)
    git("commit", "-q", "--allow-empty", "-m", "step", cwd=root)
    return git("rev-parse", "HEAD", cwd=root)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A run's clone at its first commit, which holds no record yet."""
    root = tmp_path / "ws"
    root.mkdir()
    git("init", "-q", cwd=root)
    (root / "README.md").write_text("hi\n")
    _commit(root)
    return root


def test_the_git_log_appends_only_what_it_lacks(workspace: Path) -> None:
    events = [EVENT.validate_python(_event(seq)) for seq in range(1, 6)]
    state = (
        LoopInput(run_id="r", alias="r", request=RunRequest(task="t"), created_at="")
        .first_memory()
        .state
    )
    first = RunLog(state=state, events=events[:3], saved_seq=0)
    assert write_run_log(workspace, first).saved_seq == 3
    # A retry starts again from the same commit with the same log: the same bytes.
    written = (workspace / HISTORY_PATH).read_bytes()
    assert write_run_log(workspace, first).saved_seq == 3
    assert (workspace / HISTORY_PATH).read_bytes() == written
    _commit(workspace)
    # The next step is handed what the commit lacks, after the mark the workflow keeps.
    assert (
        write_run_log(workspace, RunLog(state=state, events=events[3:], saved_seq=3)).saved_seq == 5
    )
    _commit(workspace)
    # Nothing new: the mark stays where it was.
    assert write_run_log(workspace, RunLog(state=state, saved_seq=5)).saved_seq == 5
    logged = parse_history((workspace / HISTORY_PATH).read_text())
    assert [e.seq for e in logged] == [1, 2, 3, 4, 5]
    assert last_seq(workspace) == 5
    assert json.loads((workspace / RUN_STATE_PATH).read_text())["run_id"] == "r"


# What a step's command may leave in the work tree's history: a line numbered past any
# event, and one that is no JSON at all.
FORGED_LINES = [json.dumps(_event(1_000_000)), "not an event {"]


@pytest.mark.parametrize("forged", FORGED_LINES, ids=["huge-seq", "not-json"])
def test_the_git_log_appends_to_the_commits_history_not_the_work_trees(
    workspace: Path, forged: str
) -> None:
    """The work tree's history.jsonl is not read: a line a command wrote there neither
    stops the run's events from being appended nor moves the mark past them."""
    events = [EVENT.validate_python(_event(seq)) for seq in range(1, 5)]
    state = _state()
    write_run_log(workspace, RunLog(state=state, events=events[:2], saved_seq=0))
    committed = (workspace / HISTORY_PATH).read_text()
    _commit(workspace)
    with (workspace / HISTORY_PATH).open("a") as history:
        history.write(forged + "\n")

    saved = write_run_log(workspace, RunLog(state=state, events=events[2:], saved_seq=2))

    assert saved.saved_seq == 4
    text = (workspace / HISTORY_PATH).read_text()
    assert text.startswith(committed) and forged not in text
    assert [e.seq for e in parse_history(text)] == [1, 2, 3, 4]


@pytest.mark.parametrize("forged", FORGED_LINES, ids=["huge-seq", "not-json"])
def test_a_committed_line_that_is_no_event_of_the_run_is_passed_over(
    workspace: Path, forged: str
) -> None:
    """A base commit's history.jsonl is the repository's: whatever its lines, the run's
    events follow them, and the step never fails on one. Its readers skip what is no event."""
    (workspace / ".loops").mkdir()
    (workspace / HISTORY_PATH).write_text(forged)  # no newline at its end either
    _commit(workspace)
    events = [EVENT.validate_python(_event(seq)) for seq in range(1, 3)]

    saved = write_run_log(workspace, RunLog(state=_state(), events=events, saved_seq=0))

    assert saved.saved_seq == 2
    text = (workspace / HISTORY_PATH).read_text()
    assert text.splitlines()[0] == forged
    assert [e.seq for e in parse_history(text)][-2:] == [1, 2]
    # A step sent before steps carried the mark takes the commit's last event, as then;
    # a line that is none is passed over, not an error.
    assert write_run_log(workspace, RunLog(state=_state(), events=events)).saved_seq >= 2


def test_the_tail_keeps_the_latest_events_and_all_that_git_lacks() -> None:
    memory = LoopInput(
        run_id="r", alias="r", request=RunRequest(task="t"), created_at=""
    ).first_memory()
    for seq in range(1, EVENT_TAIL + 11):
        memory.remember(EVENT.validate_python(_event(seq)))
    # Nothing is in git yet: nothing may be dropped.
    assert len(memory.tail) == EVENT_TAIL + 10 and memory.tail[0].seq == 1
    memory.saved(EVENT_TAIL)
    assert [e.seq for e in memory.tail] == list(range(11, EVENT_TAIL + 11))
    assert [e.seq for e in memory.unsaved()] == list(range(EVENT_TAIL + 1, EVENT_TAIL + 11))
    memory.saved(3)  # an older step's answer never moves the mark back
    assert memory.saved_seq == EVENT_TAIL


def _state() -> RunState:
    request = RunRequest(task="t")
    return LoopInput(run_id="r", alias="r", request=request, created_at="").first_memory().state


def test_the_git_log_writes_the_carried_calls_records_and_says_which(workspace: Path) -> None:
    calls = {"01-plan-001": '{"kind": "system"}\n', "00-hydrate-001": '{"kind": "user"}\n'}
    saved = write_run_log(workspace, RunLog(state=_state(), calls=calls))
    assert saved.saved_calls == ["00-hydrate-001", "01-plan-001"]
    for name, text in calls.items():
        assert (workspace / TRAJECTORY_DIR / f"{name}.jsonl").read_text() == text


@pytest.mark.parametrize("name", ["../../escaped", "01-plan-001/../../x", ".git/config"])
def test_a_carried_record_named_as_no_call_is_refused(
    tmp_path: Path, workspace: Path, name: str
) -> None:
    config = (workspace / ".git" / "config").read_text()
    with pytest.raises(ValueError, match="not a call's name"):
        write_run_log(workspace, RunLog(state=_state(), calls={name: "x"}))
    assert not any(tmp_path.rglob("*escaped*")) and not (tmp_path / "x").exists()
    assert (workspace / ".git" / "config").read_text() == config


def test_the_memory_drops_a_carried_record_once_a_commit_holds_it() -> None:
    memory = LoopInput(
        run_id="r", alias="r", request=RunRequest(task="t"), created_at=""
    ).first_memory()
    memory.carried_calls = {"01-plan-001": "a", "01-evaluate-001": "b"}
    # A commit that took its log before the evaluator's record came back holds the plan's.
    memory.saved(0, ["01-plan-001"])
    assert memory.carried_calls == {"01-evaluate-001": "b"}
