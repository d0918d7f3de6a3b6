"""A prep package as the preparation tool writes it (tests/fixtures/prep/), taken by a task
graph and by a single run, on the time-skipping server with real git and the offline
model (docs/graphs.md#prep-packages).

The tasks file is used byte for byte. The package file is too, but for the two values no
fixture can hold for a test: `environment.project_root` (the test's repository) and
`generated_at` (the test server's clock), set as the tool would have set them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loopworks.schemas.events import EventName
from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.run import RunStatus
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import PRODUCING_FOR_TWO_MINUTES, LoopHarness, commit_all
from tests.workflows.test_graph import start_graph
from tests.workflows.test_loop import wait_for

pytestmark = pytest.mark.workflow

FIXTURES = Path(__file__).parents[1] / "fixtures" / "prep"
TASKS_TEXT = (FIXTURES / "prep-tasks.jsonl").read_bytes().decode()
SKIPPED = [
    "line 2: not JSON (Unterminated string starting at column 209)",
    "line 4: description missing (a task needs both)",
]


async def package_text(harness: LoopHarness, project_root: Path) -> str:
    package: dict[str, Any] = json.loads((FIXTURES / "prep-package.json").read_bytes())
    package["environment"]["project_root"] = str(project_root)
    now = await harness.env.get_current_time()
    package["generated_at"] = now.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert package["target_skill"] == "ccw-loop" and package["auto_loop"]["max_iterations"] == 6
    return json.dumps(package, indent=2)


async def test_a_graph_takes_the_package_skips_its_bad_lines_and_its_loops_get_its_limit(
    harness: LoopHarness,
) -> None:
    upload = {"package": await package_text(harness, harness.origin), "tasks": TASKS_TEXT}
    async with harness.worker(PRODUCING_FOR_TWO_MINUTES):
        handle = await start_graph(
            harness, None, prep_package=upload, max_iterations=None, mode="interactive"
        )  # type: ignore[arg-type]

        async def awaiting() -> bool:
            state = await handle.query(TaskGraphWorkflow.status)
            return state.status == GraphStatus.AWAITING_APPROVAL

        await wait_for(awaiting)
        state = await handle.query(TaskGraphWorkflow.status)
        assert state.prep_rejected == []
        assert state.source.startswith("prep package (collaborative-plan-with-file, sha256 ")
        assert [t.task.id for t in state.tasks] == ["T-001", "T-003"]
        assert state.prep_skipped == SKIPPED
        assert state.max_iterations == 6

        await handle.execute_update(TaskGraphWorkflow.approve, {})  # type: ignore[arg-type]

        async def a_loop_started() -> bool:
            graph = await handle.query(TaskGraphWorkflow.status)
            return bool(graph.tasks[0].run_ids)

        await wait_for(a_loop_started)
        child = (await handle.query(TaskGraphWorkflow.status)).tasks[0].run_ids[0]
        child_handle = harness.env.client.get_workflow_handle(child)

        async def producing() -> bool:
            return "produce_artifact" in await harness.activities_run(child_handle)

        await wait_for(producing)
        loop = await child_handle.query(LoopWorkflow.status)
        await handle.signal(TaskGraphWorkflow.stop, "seen enough")
        result = await asyncio.wait_for(handle.result(), timeout=120)

    assert loop.max_iterations == 6
    assert loop.prep == "" and loop.prep_rejected == []  # a task loop reads no package
    assert result.state.status == GraphStatus.STOPPED
    assert result.state.prep_skipped == SKIPPED


async def test_a_run_takes_the_repositorys_package_as_its_plan(
    harness: LoopHarness, repo: Path
) -> None:
    loop_dir = repo / ".workflow" / ".loop"
    loop_dir.mkdir(parents=True)
    (loop_dir / "prep-package.json").write_text(await package_text(harness, repo))
    (loop_dir / "prep-tasks.jsonl").write_bytes(TASKS_TEXT.encode())
    commit_all(repo)
    async with harness.worker():
        handle = await harness.start(
            task="Add a Markdown export", repo=str(repo), mode="interactive"
        )
        ignoring = await harness.start(
            task="Add a Markdown export",
            repo=str(repo),
            mode="interactive",
            read_prep_package=False,
        )

        async def awaiting() -> bool:
            statuses = [(await harness.status(h)).status for h in (handle, ignoring)]
            return statuses == [RunStatus.AWAITING_APPROVAL] * 2

        await wait_for(awaiting)
        state = await harness.status(handle)
        other = await harness.status(ignoring)
        events = await harness.events(handle)
        for running in (handle, ignoring):
            await running.signal(LoopWorkflow.stop, "seen enough")
        for running in (handle, ignoring):
            await asyncio.wait_for(running.result(), timeout=120)

    assert state.prep.startswith("prep package (collaborative-plan-with-file, sha256 ")
    assert state.prep_skipped == SKIPPED and state.prep_rejected == []
    assert state.max_iterations == 6
    assert [rule.id for rule in state.rules] == ["T-001", "T-003"]
    assert "T-003: two notes export to two headings" in state.acceptance_criteria
    [hydrated] = [e for e in events if e.event == EventName.HYDRATION_DONE]
    plan = hydrated.payload.model_dump()["plan"]
    assert [step.split(" ", 1)[0] for step in plan] == ["T-001", "T-003"]
    assert plan[0].endswith("Done when `python3 -c 'import notes.export'` exits 0.")
    # Asked not to read it, a run hydrates as it would without one.
    assert other.prep == "" and other.max_iterations == 4
    assert "T-001" not in [rule.id for rule in other.rules]


async def test_a_run_takes_a_package_sent_with_the_request(harness: LoopHarness) -> None:
    upload = {"package": await package_text(harness, harness.origin), "tasks": TASKS_TEXT}
    async with harness.worker():
        handle = await harness.start(
            task="Add a Markdown export",
            mode="interactive",
            prep_package=upload,
            max_iterations=3,
        )

        async def awaiting() -> bool:
            return (await harness.status(handle)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(awaiting)
        state = await harness.status(handle)
        await handle.signal(LoopWorkflow.stop, "seen enough")
        await asyncio.wait_for(handle.result(), timeout=120)

    assert state.prep.startswith("prep package (collaborative-plan-with-file, sha256 ")
    assert state.max_iterations == 3  # the request's own limit stands
    assert [rule.id for rule in state.rules] == ["T-001", "T-003"]
