"""What the CLI prints, from a real run's events and states (tests/cli/sample.py)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import RenderableType

from loopworks.api.models import RunSummary
from loopworks.cli.render import (
    IterationTracker,
    artifact_location,
    console_for,
    final_summary,
    history_line,
    iteration_summaries,
    list_table,
    notice,
    status_line,
    status_notes,
)
from loopworks.schemas.events import (
    EVENT,
    Approved,
    ApprovedPayload,
    AuditPayload,
    AuditVerdictGiven,
    BlockCleared,
    Blocked,
    BlockedPayload,
    Event,
    NotePayload,
    Paused,
    PhaseError,
    PhaseErrorPayload,
)
from loopworks.schemas.rules import Phase
from loopworks.schemas.run import (
    BlockInfo,
    RunState,
    RunStatus,
    Step,
    StopInfo,
    StopReason,
    Thresholds,
)
from tests.cli.sample import EVENTS, LIMIT_STATE, RUN_ID, RUNS, STATE, at

pytestmark = pytest.mark.unit

ARTIFACT = f"loops/{RUN_ID}:artifact.md"


def plain(renderable: RenderableType) -> str:
    """What the CLI prints for `renderable` when its output is not a terminal."""
    out = io.StringIO()
    console_for(out).print(renderable)
    return out.getvalue()


def test_status_line_is_the_documented_compact_line() -> None:
    assert status_line(STATE) == (
        "write-a-short-guide-to-reflex-loops | completed | 2/4 | B | DONE | 1.00"
        " | 2026-11-22T05:11:44Z"
    )
    assert status_notes(STATE) == ["stop: threshold_reached"]


def test_status_notes_say_what_a_live_run_waits_for() -> None:
    blocked = STATE.model_copy(
        update={"status": RunStatus.BLOCKED, "block": BlockInfo(blocked=True, reason="drift")}
    )
    assert status_notes(blocked) == [
        f"blocked: drift (release with: loops clear-block {RUN_ID} --note '...')"
    ]
    waiting = STATE.model_copy(update={"status": RunStatus.AWAITING_APPROVAL})
    assert status_notes(waiting) == [f"awaiting approval (approve with: loops approve {RUN_ID})"]
    assert status_notes(STATE.model_copy(update={"status": RunStatus.RUNNING})) == []
    stopped = STATE.model_copy(
        update={
            "status": RunStatus.STOPPED,
            "stop_reason": StopReason.USER_STOP,
            "stop": StopInfo(reason=StopReason.USER_STOP, message="enough"),
        }
    )
    assert status_notes(stopped) == ["stop: user_stop (enough)"]


def test_status_notes_of_a_run_that_failed_before_any_stop_condition() -> None:
    """No stop reason, only what went wrong: not `stop: none (...)`."""
    failed = STATE.model_copy(
        update={
            "status": RunStatus.FAILED,
            "stop_reason": None,
            "stop": StopInfo(message="branch 'x' does not exist on origin /o.git"),
        }
    )
    assert status_notes(failed) == ["failed: branch 'x' does not exist on origin /o.git"]
    bare = failed.model_copy(update={"stop": StopInfo()})
    assert status_notes(bare) == ["failed"]


def test_status_line_of_a_fresh_run() -> None:
    fresh = RunState(
        run_id="r-1",
        alias="",
        task="t",
        max_iterations=4,
        thresholds=Thresholds(),
        branch="loops/r-1",
        origin="/o.git",
    )
    assert status_line(fresh) == "r-1 | running | 0/4 | A | HYDRATE | 0.00 | -"


def test_list_table_aligns_columns() -> None:
    lines = plain(list_table(RUNS)).splitlines()
    assert lines[0].split() == ["RUN_ID", "ALIAS", "STATUS", "ITER", "SCORE", "STARTED", "BY"]
    assert lines[1].split() == [
        "write-a-short-guide-to-reflex-loops-20261122-051145-3632a2",
        "write-a-short-guide-to-reflex-loops",
        "stopped",
        "1",
        "0.00",
        "2026-11-22T05:11:45Z",
        "-",
    ]
    assert lines[2].split()[2:] == ["completed", "2", "1.00", "2026-11-22T05:11:41Z", "-"]
    # Columns start at the same offset on every line.
    status_column = lines[0].index("STATUS")
    assert lines[1][status_column:].startswith("stopped")
    assert lines[2][status_column:].startswith("completed")


def test_list_table_of_a_run_without_attributes() -> None:
    bare = RunSummary(
        run_id="x",
        status=RunStatus.RUNNING,
        blocked=True,
        started_at=datetime(2026, 2, 18, 12, tzinfo=UTC),
    )
    assert plain(list_table([bare])).splitlines()[1].split() == [
        "x",
        "-",
        "running",
        "(blocked)",
        "-",
        "-",
        "2026-02-18T12:00:00Z",
        "-",
    ]


def test_history_is_one_line_per_event() -> None:
    lines = [history_line(event) for event in EVENTS]
    assert len(lines) == len(EVENTS)
    assert lines[0].split()[:6] == ["1", "05:11:42", "it", "0", "A", "HYDRATE"]
    assert "run_started" in lines[0] and "Write a short guide" in lines[0]
    by_name = {event.event.value: line for event, line in zip(EVENTS, lines, strict=True)}
    assert by_name["plan_created"].endswith("fix has-verification")
    assert "hash e0016d7f, changed: ## Verification" in by_name["refinement_done"]
    assert by_name["iteration_advanced"].endswith("→ iteration 2")
    assert "phase_switched     A → B" in by_name["phase_switched"]
    assert by_name["stopped"].endswith("threshold_reached")
    assert by_name["pushed"].endswith(f"loops/{RUN_ID} @ 60f3adce (verified)")
    evaluations = [line for line in lines if "evaluation_done" in line]
    assert evaluations[1].endswith(
        "score 0.78 / 0.90 FAIL, failed: has-verification, warnings: none"
    )
    assert "1 issue: has-verification" in by_name["critique_done"]


def test_history_marks_errors() -> None:
    # As the API sends it: the CLI parses every event with the shared adapter.
    error = EVENT.validate_python(
        {
            "seq": 9,
            "ts": "2026-02-18T12:00:00+00:00",
            "run_id": RUN_ID,
            "iteration": 1,
            "phase": "A",
            "step": "PLAN",
            "event": "phase_error",
            "status": "error",
            "payload": {"step": "PLAN", "error": "focus: field required"},
        }
    )
    assert isinstance(error, PhaseError)
    assert error.payload == PhaseErrorPayload(step="PLAN", error="focus: field required")
    assert history_line(error).startswith("   9 ! 12:00:00")
    assert history_line(error).endswith("PLAN: focus: field required")
    assert notice(error) == "· phase_error: PLAN: focus: field required"


def test_reused_checks_and_results_read_as_such() -> None:
    event = EVENT.validate_python(
        {
            "seq": 12,
            "ts": "2026-02-18T12:00:00+00:00",
            "run_id": RUN_ID,
            "iteration": 2,
            "phase": "B",
            "step": "PRODUCE_PREPARE",
            "event": "checks_prepared",
            "payload": {"checks": 4, "rules": ["a", "b", "c"], "reused": True},
        }
    )
    assert history_line(event).endswith("4 checks for 3 rules, as before (same rules)")
    evaluated = EVENT.validate_python(
        {
            **event.model_dump(mode="json"),
            "event": "evaluation_done",
            "payload": {"score": 1.0, "passed": True, "threshold": 0.9, "reused": 3},
        }
    )
    assert history_line(evaluated).endswith("(3 checks known on this commit)")


def test_checks_the_budget_left_unchecked_are_named() -> None:
    event = EVENT.validate_python(
        {
            "seq": 12,
            "ts": "2026-02-18T12:00:00+00:00",
            "run_id": RUN_ID,
            "iteration": 1,
            "phase": "A",
            "step": "EVALUATE",
            "event": "evaluation_done",
            "payload": {
                "score": 0.5,
                "passed": False,
                "threshold": 0.9,
                "warnings": ["slow-1", "slow-2"],
                "unchecked": ["slow-1", "slow-2"],
            },
        }
    )
    assert history_line(event).endswith(
        "warnings: slow-1, slow-2, unchecked (check budget spent): slow-1, slow-2"
    )


def test_iteration_summaries_follow_the_documented_format() -> None:
    summaries = iteration_summaries(EVENTS, 4, ARTIFACT)
    assert [text.splitlines()[0] for text in summaries] == [
        # Phase A passed: the loop switched to B and re-evaluated the same artifact.
        "── Iteration 1/4 | Phase A | Score: 1.00 | PASS ──",
        "── Iteration 1/4 | Phase B | Score: 0.78 | FAIL ──",
        "── Iteration 2/4 | Phase B | Score: 1.00 | PASS ──",
    ]
    assert summaries[1].splitlines() == [
        "── Iteration 1/4 | Phase B | Score: 0.78 | FAIL ──",
        "Plan: first complete draft",
        # The evaluated artifact, not the refinement that followed the critique.
        "Hash: ab49bd4b",
        "Changed: initial generation",
        "Failed: has-verification",
        "Warnings: none",
        f"Artifact: {ARTIFACT}",
        "Critique:",
        "  has-verification: Make the artifact satisfy: The artifact says how to verify the result",
    ]
    assert summaries[2].splitlines()[1:5] == [
        "Plan: fix has-verification",
        "Hash: e0016d7f",
        "Changed: none",
        "Failed: none",
    ]
    assert "Critique:" not in summaries[2]


def test_a_summary_is_printed_when_its_iteration_is_over() -> None:
    tracker = IterationTracker(4, ARTIFACT)
    done_at = {}
    for event in EVENTS:
        for summary in tracker.feed(event):
            done_at[(summary.iteration, summary.phase)] = event.event
    assert done_at == {
        (1, "A"): "phase_switched",
        (1, "B"): "iteration_advanced",
        (2, "B"): "stopped",
    }
    assert tracker.finish() == []


def test_approval_with_edited_max_iterations_shows_the_new_limit() -> None:
    approved = Approved(
        **at(4, "43.150000", 0, Phase.A, Step.APPROVE),
        payload=ApprovedPayload(edits={"max_iterations": 2}),
    )
    later = (e.model_copy(update={"seq": e.seq + 1}) for e in EVENTS[3:])
    events: list[Event] = [*EVENTS[:3], approved, *later]
    assert iteration_summaries(events, 4, ARTIFACT)[0].startswith("── Iteration 1/2 |")


def test_an_unfinished_iteration_is_flushed_at_the_end() -> None:
    until_evaluation = [e for e in EVENTS if e.seq <= 7]
    tracker = IterationTracker(4, ARTIFACT)
    assert [s for e in until_evaluation for s in tracker.feed(e)] == []
    (summary,) = tracker.finish()
    assert (summary.iteration, summary.phase, summary.passed) == (1, "A", True)


def test_final_summary_of_a_completed_run() -> None:
    assert final_summary(STATE).splitlines() == [
        f"══ Run {RUN_ID} completed ══",
        "Iteration: 2/4",
        "Phase: B",
        "Final score: 1.00",
        "Stop reason: threshold_reached",
        f"Artifact: {artifact_location(STATE)} on /srv/loops/origin.git",
    ]


def test_final_summary_carries_distance_to_success_on_iteration_limit() -> None:
    lines = final_summary(LIMIT_STATE).splitlines()
    assert lines[:5] == [
        f"══ Run {LIMIT_STATE.run_id} stopped ══",
        "Iteration: 1/1",
        "Phase: A",
        "Final score: 0.00",
        "Stop reason: iteration_limit",
    ]
    assert lines[5:9] == [
        "distance_to_success:",
        "  threshold (phase A): 0.80 | score: 0.00 | gap: 0.80",
        "  failed fail-rules: 1 (impossible)",
        "  rules passed: 0/1",
    ]


def test_final_summary_shows_the_stop_message() -> None:
    stopped = STATE.model_copy(
        update={
            "status": RunStatus.STOPPED,
            "stop_reason": StopReason.USER_STOP,
            "stop": StopInfo(reason=StopReason.USER_STOP, message="from temporal cli"),
        }
    )
    assert "Message: from temporal cli" in final_summary(stopped).splitlines()


def test_notices_for_control_events() -> None:
    envelope = at(30, "50.000000", 2, Phase.B, Step.AUDIT)
    block = Blocked(**envelope, payload=BlockedPayload(reason="drift", report="# Blocked"))
    assert notice(block) == "! custodiet BLOCK: drift"
    during = BlockedPayload(reason="drift", during="produce", refused="run_command: curl x")
    assert (
        notice(Blocked(**envelope, payload=during))
        == "! custodiet BLOCK: drift (during produce, refused run_command: curl x)"
    )
    # The verdict's event says it too; the `blocked` event is the one noticed.
    verdict = AuditPayload(verdict="BLOCK", reason="drift")
    assert notice(AuditVerdictGiven(**envelope, payload=verdict)) is None
    assert notice(AuditVerdictGiven(**envelope, payload=AuditPayload(verdict="OK"))) is None
    cleared = BlockCleared(**envelope, payload=NotePayload(note="go on"))
    assert notice(cleared) == "· block_cleared: note: go on"
    assert notice(Paused(**envelope)) == "· paused"
    assert all(notice(event) is None for event in EVENTS)


def test_text_from_the_api_is_never_read_as_markup() -> None:
    run = RUNS[0].model_copy(update={"alias": "[bold]not-bold[/bold]"})
    assert "[bold]not-bold[/bold]" in plain(list_table([run]))
    out = io.StringIO()
    console_for(out).print("[red]a task with brackets[/red] :smile:")
    assert out.getvalue() == "[red]a task with brackets[/red] :smile:\n"


def test_a_piped_table_keeps_each_run_on_one_line() -> None:
    long_id = "a-" * 80 + "20261122-051141-c0b93a"
    run = RUNS[0].model_copy(update={"run_id": long_id})
    lines = plain(list_table([run])).splitlines()
    assert len(lines) == 2 and lines[1].startswith(long_id)


def _event(name: str, payload: dict[str, object]) -> str:
    event = EVENT.validate_python(
        {
            "seq": 30,
            "ts": "2026-02-18T12:00:00+00:00",
            "run_id": RUN_ID,
            "iteration": 2,
            "phase": "B",
            "step": "CURATE",
            "event": name,
            "payload": payload,
        }
    )
    return history_line(event).split("CURATE", 1)[1].split(name, 1)[1].strip()


@pytest.mark.parametrize(
    ("name", "payload", "line"),
    [
        (
            "playbook_loaded",
            {"name": "app-1", "version": 3, "item_ids": ["pb-1-1", "pb-2-1"], "pinned": True},
            "app-1 v3, pinned, items: pb-1-1, pb-2-1",
        ),
        (
            "curated",
            {"summary": "one lesson", "proposed_updates": 1, "python_helpers": ["count_words"]},
            "1 updates, asked for: count_words; one lesson",
        ),
        (
            "skill_loop_done",
            {
                "accepted": [".loops/skills/a.py"],
                "rejected": {".loops/skills/b.py": "its check failed"},
            },
            "kept: .loops/skills/a.py, rejected: .loops/skills/b.py",
        ),
        ("skill_loop_done", {"error": "generator timed out"}, "failed: generator timed out"),
        (
            "playbook_updated",
            {
                "name": "app-1",
                "batch_id": "r:run",
                "version": 4,
                "changed": True,
                "results": {"added": 1, "tagged": 2},
            },
            "app-1 v4: 1 added, 2 tagged",
        ),
        (
            "playbook_updated",
            {"name": "app-1", "batch_id": "r:run", "version": 4, "changed": False},
            "app-1: nothing changed",
        ),
    ],
)
def test_the_playbook_events_read_as_phrases(
    name: str, payload: dict[str, object], line: str
) -> None:
    assert _event(name, payload) == line
