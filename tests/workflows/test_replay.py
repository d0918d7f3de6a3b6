"""Recorded histories must replay against the current workflow code (determinism).

A failure here means a change would break runs already in flight: guard it with
`workflow.patched` (docs/operations.md, "Upgrading with runs in flight"), and re-record a
history only once the patch that kept its path is removed
(`python -m tests.histories.record`).

Replayed as a worker with LOOPS_PAYLOAD_KEYS replays them: on the codec's converter, which
reads the plain histories recorded before encryption as well as the encrypted one.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from loopworks.schemas.settings import Settings
from loopworks.service.codec import ENCRYPTED
from loopworks.service.connect import CONVERTER, data_converter
from loopworks.worker.build import WORKFLOWS
from tests.histories.record import RECORDERS, RECORDING_KEYS
from tests.workflows import changed_loop
from tests.workflows.changed_loop import ChangedLoop

pytestmark = pytest.mark.workflow

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


# Every history in the folder: one recorded and not listed would guard nothing.
RECORDED = sorted(path.name for path in HISTORIES.glob("*.json"))
# A worker's converter with the keys the encrypted history was recorded with.
KEYED = data_converter(Settings(LOOPS_PAYLOAD_KEYS=RECORDING_KEYS))


def test_every_recorder_has_its_history_and_every_history_is_replayed() -> None:
    assert sorted(f"{name}.json" for name in RECORDERS) == RECORDED


@pytest.mark.parametrize("name", RECORDED)
async def test_recorded_history_replays(name: str) -> None:
    replayer = Replayer(workflows=WORKFLOWS, data_converter=KEYED)
    result = await replayer.replay_workflow(_history(name))
    assert result.replay_failure is None


async def test_the_encrypted_history_holds_no_task_and_needs_its_key() -> None:
    """Recorded with every payload encrypted: nothing of the run reads in the clear, and
    a worker without the key cannot replay it (it could not run it either)."""
    text = (HISTORIES / "encrypted_run.json").read_text()
    assert base64.b64encode(ENCRYPTED).decode() in text
    for event in json.loads(text)["events"]:
        for payload in _payloads(event):
            data = base64.b64decode(payload.get("data", ""))
            assert b"caching" not in data and b"hydrat" not in data
    plain = Replayer(workflows=WORKFLOWS, data_converter=CONVERTER)
    result = await plain.replay_workflow(
        _history("encrypted_run.json"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None


def _payloads(value: Any) -> list[dict[str, Any]]:
    """Every payload (a dict with metadata and data) inside a history's JSON."""
    if isinstance(value, list):
        return [p for item in value for p in _payloads(item)]
    if not isinstance(value, dict):
        return []
    own = [value] if "metadata" in value and "data" in value else []
    return own + [p for item in value.values() for p in _payloads(item)]


def _history(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name.removesuffix(".json"), (HISTORIES / name).read_text())


@pytest.mark.parametrize(
    ("change", "caught"),
    [
        (changed_loop.unchanged, False),
        (changed_loop.prepares_workspace_remotely, True),
        (changed_loop.learns_after_close, True),
        # The first change again, asked with `workflow.patched`: safe.
        (changed_loop.patched, False),
    ],
)
async def test_a_change_to_the_loop_without_a_patch_fails_replay(
    monkeypatch: pytest.MonkeyPatch, change: changed_loop.Change, caught: bool
) -> None:
    """The replay test catches a non-deterministic change: replayed against the playbook
    run's history (its workspace prepared, curated, pushed), the changed loop issues
    other commands than the history holds."""
    monkeypatch.setattr(ChangedLoop, "change", staticmethod(change))
    replayer = Replayer(
        workflows=[ChangedLoop],
        data_converter=KEYED,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(
        _history("playbook_run.json"), raise_on_replay_failure=False
    )
    if caught:
        assert isinstance(result.replay_failure, NondeterminismError)
    else:
        assert result.replay_failure is None


def test_full_run_history_covers_the_loop() -> None:
    """The recorded full run must exercise the paths replay is meant to protect."""
    text = (HISTORIES / "full_run.json").read_text()
    for activity in [
        "hydrate",
        "review_plan",
        "plan_iteration",
        "produce_artifact",
        "prepare_checks",
        "evaluate_group",
        "audit_run",
        "critique_artifact",
        "refine_artifact",
        "verify_result",
        "reflect_on_run",
        "record_and_close_run",
    ]:
        assert f'"name": "{activity}"' in text, activity
    assert "WORKFLOW_EXECUTION_UPDATE_ACCEPTED" in text


def test_steered_run_history_covers_control_and_continue_as_new() -> None:
    text = (HISTORIES / "steered_run.json").read_text()
    assert text.count("WORKFLOW_EXECUTION_UPDATE_ACCEPTED") >= 3  # approve, pause, resume
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW" in text


def test_continued_run_history_starts_from_a_carried_memory() -> None:
    """Recorded after the run's memory became one model: a continued execution's input."""
    history = json.loads((HISTORIES / "continued_run.json").read_text())
    started = history["events"][0]["workflowExecutionStartedEventAttributes"]
    params = json.loads(base64.b64decode(started["input"]["payloads"][0]["data"]))
    memory = params["memory"]
    assert memory["generation"] > 1 and memory["next_iteration"] > 1
    assert 0 < memory["saved_seq"] <= memory["last_seq"] == memory["tail"][-1]["seq"]


def test_graph_run_history_covers_children_merges_and_the_ledger() -> None:
    text = (HISTORIES / "graph_run.json").read_text()
    assert text.count("START_CHILD_WORKFLOW_EXECUTION_INITIATED") == 4
    for activity in ["prepare_integration", "merge_task", "record_ledger"]:
        assert f'"name": "{activity}"' in text, activity


def test_the_budget_graph_history_spends_its_total_and_starts_no_more() -> None:
    events = json.loads((HISTORIES / "budget_graph_run.json").read_text())["events"]
    children = [
        json.loads(base64.b64decode(attrs["input"]["payloads"][0]["data"]))
        for event in events
        if (attrs := event.get("startChildWorkflowExecutionInitiatedEventAttributes"))
    ]
    assert [child["alias"] for child in children] == ["T-001", "T-002"]
    first, second = (child["request"]["budget"]["max_tokens"] for child in children)
    assert first == 3000 and second < 4000 - 2000  # what the first loop left
    [done] = [e for e in events if "workflowExecutionCompletedEventAttributes" in e]
    result = done["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]
    message = json.loads(base64.b64decode(result["data"]))["state"]["message"]
    # T-002's loop went past what it was given within its last step, and completed.
    assert message.startswith("the graph's budget is spent: used ")
    assert message.endswith("of 4000; not started: T-003")


def test_playbook_histories_cover_curation_the_sub_loop_and_the_writer() -> None:
    run = (HISTORIES / "playbook_run.json").read_text()
    assert run.count("START_CHILD_WORKFLOW_EXECUTION_INITIATED") == 1  # the skill sub-loop
    for activity in ["curate_run", "send_playbook_batch"]:
        assert f'"name": "{activity}"' in run, activity
    writer = (HISTORIES / "playbook_writer.json").read_text()
    for activity in ["read_playbook", "commit_playbook_versions"]:
        assert f'"name": "{activity}"' in writer, activity
    # Two runs' batches as signals, then one sent again by hand as an update.
    assert writer.count("EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED") == 2
    assert writer.count("EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED") == 1


def _result(name: str) -> dict[str, Any]:
    """What the recorded workflow answered."""
    events = json.loads((HISTORIES / name).read_text())["events"]
    (done,) = [e for e in events if "workflowExecutionCompletedEventAttributes" in e]
    payload = done["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]
    answer: dict[str, Any] = json.loads(base64.b64decode(payload["data"]))
    return answer


def test_the_halted_skill_history_started_the_sub_loop_a_halted_run_now_does_not() -> None:
    # Recorded before: replayed, the halted run starts its skill sub-loop again, since the
    # patch that stops it is not marked in its history.
    run = (HISTORIES / "halted_skill_run.json").read_text()
    assert run.count("START_CHILD_WORKFLOW_EXECUTION_INITIATED") == 1
    assert "no-skill-loop-after-halt-or-block" not in run
    assert _result("halted_skill_run.json")["state"]["stop_reason"] == "critic_halt"


def test_the_skill_loop_history_answered_the_commit_of_a_generator_that_wrote_nothing() -> None:
    # Recorded when the sub-loop answered such a generator's commit; it now answers none,
    # and the history replays (above) all the same: a workflow's result is not a command.
    answer = _result("skill_loop_writing_nothing.json")
    assert answer["commit"] and not answer["accepted"] and answer["rejected"]


def test_the_grouped_writer_history_commits_batches_together() -> None:
    grouped = json.loads((HISTORIES / "playbook_grouped.json").read_text())["events"]
    signals = [e for e in grouped if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"]
    commits = [
        e
        for e in grouped
        if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name")
        == "commit_playbook_versions"
    ]
    assert len(signals) == 7  # a run's batch, then six at once
    assert 1 <= len(commits) < len(signals)


def _scheduled(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    ]


def test_the_two_group_history_prepares_and_evaluates_each_check_once() -> None:
    events = json.loads((HISTORIES / "two_group_run.json").read_text())["events"]
    scheduled = _scheduled(events)
    assert scheduled.count("plan_iteration") == 2  # two iterations,
    assert scheduled.count("prepare_checks") == 1  # one PREPARE: the same rules throughout
    # Three evaluations; the last (the phase switch, on the same commit, with the same
    # rules) runs no check again: two of two groups.
    assert scheduled.count("evaluate_group") == 2 * 2
    assert "record_and_close_run" in scheduled and "close_run" not in scheduled


def test_the_concrete_rules_history_prepares_without_an_activity() -> None:
    """PREPARE on the first iteration and at the phase switch, neither an activity."""
    events = json.loads((HISTORIES / "concrete_rules_run.json").read_text())["events"]
    scheduled = _scheduled(events)
    assert "prepare_checks" not in scheduled
    assert scheduled.count("plan_iteration") == 2 and "evaluate_group" in scheduled


def _inputs(events: list[dict[str, Any]], activity: str) -> list[dict[str, Any]]:
    """The decoded input of each scheduling of `activity`."""
    return [
        json.loads(base64.b64decode(attrs["input"]["payloads"][0]["data"]))
        for event in events
        if (attrs := event.get("activityTaskScheduledEventAttributes"))
        and attrs["activityType"]["name"] == activity
    ]


def test_the_prep_histories_take_the_package_as_written() -> None:
    """A graph and a run given the preparation tool's package (tests/fixtures/prep/)."""
    graph = json.loads((HISTORIES / "prep_graph_run.json").read_text())["events"]
    patches = [
        json.loads(base64.b64decode(attrs["details"]["patch-data"]["payloads"][0]["data"]))
        for event in graph
        if (attrs := event.get("markerRecordedEventAttributes"))
        and attrs["markerName"] == "core_patch"
    ]
    assert [patch["id"] for patch in patches] == ["prep-package-as-written"]
    children = [e for e in graph if "startChildWorkflowExecutionInitiatedEventAttributes" in e]
    assert len(children) == 4  # T-001 twice, its fix twice; T-003 blocked
    run = json.loads((HISTORIES / "prep_run.json").read_text())["events"]
    [hydrate] = _inputs(run, "hydrate")
    assert [step.split(" ", 1)[0] for step in hydrate["user_plan"]] == ["T-001", "T-003"]
    assert [rule["id"] for rule in hydrate["user_rules"]] == ["T-001", "T-003"]


def _event_types(events: list[dict[str, Any]]) -> list[str]:
    return [e["eventType"].removeprefix("EVENT_TYPE_") for e in events]


def test_the_notifying_histories_cover_both_shapes_of_a_notification() -> None:
    """A run from before hand-overs sends its notifications as its own activities and
    waits for them; one after hands them to its delivery workflow (started, then
    signalled while it still sends) and closes; that workflow sends them, and tells the
    closed run of none (docs/notifications.md#delivery)."""
    before = json.loads((HISTORIES / "notified_run.json").read_text())["events"]
    assert "send_notification" in _scheduled(before)
    assert "START_CHILD_WORKFLOW_EXECUTION_INITIATED" not in _event_types(before)
    run = json.loads((HISTORIES / "handed_over_run.json").read_text())["events"]
    types = _event_types(run)
    assert "send_notification" not in _scheduled(run)
    markers = [
        e["markerRecordedEventAttributes"]["markerName"]
        for e in run
        if "markerRecordedEventAttributes" in e
    ]
    assert "core_patch" in markers
    assert types.count("START_CHILD_WORKFLOW_EXECUTION_INITIATED") == 2
    assert types.count("START_CHILD_WORKFLOW_EXECUTION_FAILED") == 1
    # The run's last transition, signalled to its delivery workflow, then its close.
    own = [t for t in types if not t.startswith("WORKFLOW_TASK_")]
    assert own[-2:] == ["EXTERNAL_WORKFLOW_EXECUTION_SIGNALED", "WORKFLOW_EXECUTION_COMPLETED"]
    deliveries = json.loads((HISTORIES / "notification_deliveries.json").read_text())["events"]
    assert _scheduled(deliveries).count("send_notification") == 4
    kinds = _event_types(deliveries)
    assert kinds.count("WORKFLOW_EXECUTION_SIGNALED") == 1
    assert kinds.count("SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED") == 2
