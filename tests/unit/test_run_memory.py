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


def test_the_git_log_appends_only_what_it_lacks(tmp_path: Path) -> None:
    events = [EVENT.validate_python(_event(seq)) for seq in range(1, 6)]
    state = (
        LoopInput(run_id="r", alias="r", request=RunRequest(task="t"), created_at="")
        .first_memory()
        .state
    )
    assert write_run_log(tmp_path, RunLog(state=state, events=events[:3])).saved_seq == 3
    # A retry hands the same events again, and the next step some it already has.
    assert write_run_log(tmp_path, RunLog(state=state, events=events[:3])).saved_seq == 3
    assert write_run_log(tmp_path, RunLog(state=state, events=events[1:])).saved_seq == 5
    logged = parse_history((tmp_path / HISTORY_PATH).read_text())
    assert [e.seq for e in logged] == [1, 2, 3, 4, 5]
    assert last_seq(tmp_path) == 5
    assert json.loads((tmp_path / RUN_STATE_PATH).read_text())["run_id"] == "r"


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


def test_the_git_log_writes_the_carried_calls_records_and_says_which(tmp_path: Path) -> None:
    calls = {"01-plan-001": '{"kind": "system"}\n', "00-hydrate-001": '{"kind": "user"}\n'}
    saved = write_run_log(tmp_path, RunLog(state=_state(), calls=calls))
    assert saved.saved_calls == ["00-hydrate-001", "01-plan-001"]
    for name, text in calls.items():
        assert (tmp_path / TRAJECTORY_DIR / f"{name}.jsonl").read_text() == text


@pytest.mark.parametrize("name", ["../../escaped", "01-plan-001/../../x", ".git/config"])
def test_a_carried_record_named_as_no_call_is_refused(tmp_path: Path, name: str) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    with pytest.raises(ValueError, match="not a call's name"):
        write_run_log(workspace, RunLog(state=_state(), calls={name: "x"}))
    assert not any(tmp_path.rglob("*escaped*")) and not (tmp_path / "x").exists()
    assert not (workspace / ".git" / "config").exists()


def test_the_memory_drops_a_carried_record_once_a_commit_holds_it() -> None:
    memory = LoopInput(
        run_id="r", alias="r", request=RunRequest(task="t"), created_at=""
    ).first_memory()
    memory.carried_calls = {"01-plan-001": "a", "01-evaluate-001": "b"}
    # A commit that took its log before the evaluator's record came back holds the plan's.
    memory.saved(0, ["01-plan-001"])
    assert memory.carried_calls == {"01-evaluate-001": "b"}
