"""A new run records one patch marker for every change bundled in `workflows/patches.py`;
runs from before the bundle replay their own markers (tests/workflows/test_replay.py,
`two_group_run` and `concrete_rules_run`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from loopworks.deploy.histories import LOCAL_ACTIVITY_MARKER, activities_run
from loopworks.workflows import patches
from tests.histories.record import TWO_GROUP_RULES
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow


async def test_a_new_run_records_one_marker_for_every_bundled_change(
    harness: LoopHarness,
) -> None:
    # Two groups, a judged rule, a failing first iteration and the playbook: each bundled
    # change of the loop is asked at least once.
    async with harness.worker():
        handle = await harness.start(task="Write a guide", rules=TWO_GROUP_RULES, playbook=True)
        await handle.result()
        history = await handle.fetch_history()

    markers = [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name != LOCAL_ACTIVITY_MARKER
    ]
    assert [m["id"] for m in markers] == [patches.ALL_TO_2027_02]
    upserts = upserts_by_workflow_task(history)
    assert sum("TemporalChangeVersion" in names for names in upserts.values()) == 1
    # The marker's own upsert rides in the first workflow task, with the run's first
    # attributes: no workflow task of its own.
    assert "TemporalChangeVersion" in upserts[1] and "LoopStatus" in upserts[1]
    # What the bundled changes do, taken: no workflow task upserts a score alone ...
    assert [names for names in upserts.values() if names == {"LoopScore"}] == []
    # What the bundled changes do, taken: PREPARE once for the run's rules, the judge
    # with the patterns (two groups an evaluation), and the playbook's batch sent.
    scheduled = await harness.activities_run(handle)
    assert scheduled.count("prepare_checks") == 1
    assert "send_playbook_batch" in scheduled
    # ... and preparing the workspace runs in the first workflow task, its marker shown
    # in the UI with the summary the activity had; close is an activity as ever.
    ran = activities_run(history)
    assert [name for name, local in ran if local] == ["prepare_workspace"]
    assert ran[-1] == ("record_and_close_run", False)
    summaries = [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
    ]
    assert summaries == ["prepare workspace"]
    assert ran[0] == ("prepare_workspace", True)


async def test_the_latest_score_reaches_the_ui_with_the_next_upsert(
    harness: LoopHarness,
) -> None:
    """Each evaluation's score is upserted with the run's next change of iteration, phase,
    block or status, and the last one with the run's end."""
    async with harness.worker():
        handle = await harness.start(task="Write a guide", rules=TWO_GROUP_RULES)
        result = await handle.result()
        history = await handle.fetch_history()

    scores = [
        json.loads(e.upsert_workflow_search_attributes_event_attributes.search_attributes
                   .indexed_fields["LoopScore"].data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "LoopScore" in e.upsert_workflow_search_attributes_event_attributes
        .search_attributes.indexed_fields
    ]  # fmt: skip
    assert result.state.iteration >= 2
    assert scores[-1] == result.state.last_score
    assert len(scores) >= 2, "a score after the first evaluation, and the last one"
    assert {"LoopScore"} not in upserts_by_workflow_task(history).values()


def upserts_by_workflow_task(history: WorkflowHistory) -> dict[int, set[str]]:
    """The search attributes each workflow task upserted, by its number from 1."""
    tasks: dict[int, set[str]] = {}
    task = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task += 1
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            tasks.setdefault(task, set()).update(fields.indexed_fields)
    return tasks


def test_only_a_bundled_change_is_asked_through_the_bundle() -> None:
    with pytest.raises(ValueError, match="not in the bundle"):
        patches.applies("a-later-change")


def test_no_workflow_asks_a_bundled_change_on_its_own() -> None:
    """A run since the bundle has no marker of its own for a bundled change: asked with
    `workflow.patched`, its replay would answer no and take the old path."""
    workflows = Path(patches.__file__).parent
    asked_alone = [
        f"{path.name}: {name}"
        for path in workflows.glob("*.py")
        if path.name != "patches.py"
        for name, value in vars(patches).items()
        if isinstance(value, str)
        and value in patches.BUNDLED
        and f"workflow.patched(patches.{name})" in path.read_text()
    ]
    assert asked_alone == []
    assert "patches.applies(" in (workflows / "checking.py").read_text()
