"""Changes to workflow code are versioned the plain Temporal way, one change at a time
(docs/operations.md, "Upgrading with runs in flight"): `workflow.patched("id")`, then
`workflow.deprecate_patch("id")`, then neither. The baseline asks no patch, so a run
records no marker and upserts no `TemporalChangeVersion`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from loopworks.deploy.histories import LOCAL_ACTIVITY_MARKER, activities_run
from loopworks.worker import build
from loopworks.workflows import loop
from tests.histories.record import TWO_GROUP_RULES
from tests.workflows import changed_loop
from tests.workflows.changed_loop import ChangedLoop
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow

WORKFLOWS = Path(loop.__file__).parent
PATCH_CALLS = {"patched", "deprecate_patch"}


def asked_patch_ids() -> dict[str, list[str]]:
    """Each `workflow.patched` / `workflow.deprecate_patch` call in workflows/, by the id it
    asks: a string literal, or the call as written when it is not one."""
    asked: dict[str, list[str]] = {}
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in PATCH_CALLS
            ):
                continue
            arg = node.args[0] if len(node.args) == 1 and not node.keywords else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            key = arg.value if literal else ast.unparse(node)  # type: ignore[union-attr]
            asked.setdefault(key, []).append(f"{path.name}:{node.lineno}")
    return asked


def test_each_change_is_asked_by_its_own_id_where_it_is_made() -> None:
    """No bundles, no helper in between: each call names one change's id as a literal, so
    `grep -rn '"the-id"' workflows/` finds every place the change is asked, and each id
    is kebab-case (the marker's name in the Temporal UI)."""
    for patch_id, where in asked_patch_ids().items():
        assert patch_id.replace("-", "").isalnum() and patch_id == patch_id.lower(), where


def test_no_module_wraps_the_patch_calls() -> None:
    """A function that takes the id and asks Temporal for it is how bundling starts."""
    wrappers = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            params = {a.arg for a in fn.args.args}
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in PATCH_CALLS
                    and any(isinstance(a, ast.Name) and a.id in params for a in node.args)
                ):
                    wrappers.append(f"{path.name}: {fn.name}")
    assert wrappers == []


async def test_a_new_run_records_only_the_markers_the_code_asks(harness: LoopHarness) -> None:
    """Two groups, a judged rule, a failing first iteration and the playbook: the paths
    every change so far took. At the baseline no change is asked, so the run records no
    patch marker and no `TemporalChangeVersion` upsert; later, only the ids asked in
    workflows/, each once."""
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
    ids = [m["id"] for m in markers]
    assert set(ids) <= set(asked_patch_ids()) and len(ids) == len(set(ids))
    upserts = upserts_by_workflow_task(history).values()
    assert sum("TemporalChangeVersion" in names for names in upserts) == (1 if ids else 0)
    # The baseline's behaviour: PREPARE once for the run's rules, the playbook's batch sent,
    # preparing the workspace a local activity in the first workflow task (its marker
    # shown in the UI with its summary), close an activity that records the reflection.
    scheduled = await harness.activities_run(handle)
    assert scheduled.count("prepare_checks") == 1
    assert "send_playbook_batch" in scheduled
    ran = activities_run(history)
    assert ran[0] == ("prepare_workspace", True)
    assert [name for name, local in ran if local] == ["prepare_workspace"]
    assert ran[-1] == ("record_and_close_run", False)
    summaries = [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
    ]
    assert summaries == ["prepare workspace"]


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
        json.loads(
            e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields[
                "LoopScore"
            ].data
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "LoopScore"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
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


async def test_a_change_goes_patched_then_deprecated_then_removed(
    harness: LoopHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steps docs/operations.md gives, on the real loop: each stage replays the runs
    that may still be open when it is deployed, and skipping a stage would not."""
    changed = tuple(ChangedLoop if w is loop.LoopWorkflow else w for w in build.WORKFLOWS)
    monkeypatch.setattr(build, "WORKFLOWS", changed)

    async def run_at(stage: changed_loop.Change) -> WorkflowHistory:
        monkeypatch.setattr(ChangedLoop, "change", staticmethod(stage))
        async with harness.worker():
            handle = await harness.start(task="Write a guide")
            await handle.result()
            return await handle.fetch_history()

    async def replays(stage: changed_loop.Change, history: WorkflowHistory) -> bool:
        monkeypatch.setattr(ChangedLoop, "change", staticmethod(stage))
        replayer = Replayer(
            workflows=[ChangedLoop],
            workflow_runner=UnsandboxedWorkflowRunner(),
            data_converter=harness.env.client.data_converter,
        )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            assert isinstance(result.replay_failure, NondeterminismError)
        return result.replay_failure is None

    baseline = await run_at(changed_loop.unchanged)
    patched = await run_at(changed_loop.patched)
    deprecated = await run_at(changed_loop.deprecated)
    # The change is made: preparing the workspace is an activity again.
    assert activities_run(baseline)[0] == ("prepare_workspace", True)
    assert activities_run(patched)[0] == ("prepare_workspace", False)

    # Stage 1, patched: runs from the baseline and its own.
    assert await replays(changed_loop.patched, baseline)
    assert await replays(changed_loop.patched, patched)
    # Stage 2, deprecated: its own and stage 1's, but not the baseline's (deploy it only
    # once none is open) ...
    assert await replays(changed_loop.deprecated, patched)
    assert await replays(changed_loop.deprecated, deprecated)
    assert not await replays(changed_loop.deprecated, baseline)
    # ... Stage 3, removed: stage 2's runs, not stage 1's (their marker is not deprecated).
    assert await replays(changed_loop.removed, deprecated)
    assert not await replays(changed_loop.removed, patched)
    # And the unguarded change, made at once, breaks the baseline's runs.
    assert not await replays(changed_loop.removed, baseline)
