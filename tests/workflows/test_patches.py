"""A new run records one patch marker for every change bundled in `workflows/patches.py`;
runs from before the bundle replay their own markers (tests/workflows/test_replay.py,
`two_group_run` and `concrete_rules_run`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

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
    ]
    assert [m["id"] for m in markers] == [patches.ALL_TO_2026_11]
    upserted = [
        set(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    assert sum("TemporalChangeVersion" in names for names in upserted) == 1
    # What the bundled changes do, taken: PREPARE once for the run's rules, the judge
    # with the patterns (two groups an evaluation), and the playbook's batch sent.
    scheduled = await harness.scheduled_activities(handle)
    assert scheduled.count("prepare_checks") == 1
    assert "send_playbook_batch" in scheduled


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
