"""The delta playbook, end to end on the time-skipping server: runs read it at hydration
and send it what they learnt, its one writer applies every batch once, the skill sub-loop
commits helpers that pass their check, and a rollback is a new version.

Each test has its own origin repository, so its own playbook (and workflow id) on the
shared test server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from temporalio.client import WorkflowHandle, WorkflowHistory

from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.playbook import writer
from loopworks.playbook.store import PlaybookStore
from loopworks.playbook.workflow import PlaybookWorkflow
from loopworks.schemas.events import Event, EventName
from loopworks.schemas.loop import LoopResult
from loopworks.schemas.playbook import (
    AddDelta,
    Delta,
    DeltaBatch,
    ItemKind,
    PlaybookInput,
    Tag,
    TagDelta,
    playbook_name,
    workflow_id,
)
from loopworks.schemas.proof import PROOF_FILE
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import HISTORY_PATH
from loopworks.worker.build import build_worker
from loopworks.workflows.learning import Learning
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.run_log import parse_history
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_loop import wait_for
from tests.workflows.test_production import CommandFirst

pytestmark = pytest.mark.workflow

TASK = "Document how to run the test suite"


class RecordingModels(OfflineModels):
    """The offline model, keeping what each hydrator call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.hydrator_contexts: list[dict[str, Any]] = []

    async def respond(self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if call.role == Role.HYDRATOR:
            self.hydrator_contexts.append(call.context)
        return await super().respond(call, messages, info)


def settings(harness: LoopHarness) -> Settings:
    return Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)


def store(harness: LoopHarness) -> PlaybookStore:
    return PlaybookStore.of(GitWorkspaces(harness.data_dir / "reader", "t", "t@t"))


@asynccontextmanager
async def worker(harness: LoopHarness, models: OfflineModels | None = None) -> AsyncIterator[None]:
    async with build_worker(harness.env.client, settings(harness), models=models):
        yield


async def run(harness: LoopHarness, repo: Path, task: str = TASK, **request: Any) -> LoopResult:
    request.setdefault("playbook", True)
    handle: WorkflowHandle[LoopWorkflow, LoopResult] = await harness.start(
        task=task, repo=str(repo), **request
    )
    return await handle.result()


def distinct(n: int) -> str:
    """Lesson text no other number's resembles: near-duplicates would be merged."""
    return f"Remember {hashlib.sha256(str(n).encode()).hexdigest()[:24]}"


def of(events: list[Event], name: EventName) -> list[Event]:
    return [event for event in events if event.event == name]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


async def test_the_second_run_hydrates_from_what_the_first_added(
    harness: LoopHarness, repo: Path
) -> None:
    models = RecordingModels()
    async with worker(harness, models):
        first = await run(harness, repo)
        assert first.state.status == RunStatus.COMPLETED
        loaded = of(first.log, EventName.PLAYBOOK_LOADED)[0]
        assert (loaded.payload.version, loaded.payload.item_ids) == (0, [])
        updated = of(first.log, EventName.PLAYBOOK_UPDATED)
        assert [e.payload.batch_id for e in updated] == [f"{first.state.run_id}:run"]
        assert updated[0].payload.version == 1
        # Read from the writer's memory, which counts each batch's results.
        assert updated[0].payload.results == {"added": 1}

        playbook = store(harness).current(str(repo), playbook_name(str(repo)))
        assert playbook is not None and playbook.version == 1
        (item,) = playbook.items
        assert item.kind == ItemKind.CONSTRAINT
        assert item.sources == [first.state.run_id]

        second = await run(harness, repo)

    loaded = of(second.log, EventName.PLAYBOOK_LOADED)[0]
    assert loaded.payload.name == playbook_name(str(repo))
    assert (loaded.payload.version, loaded.payload.item_ids) == (1, [item.id])
    assert second.state.playbook is not None
    assert second.state.playbook.item_ids == [item.id]
    # What the model was sent: the first run's lesson, in the hydrator's context.
    given = models.hydrator_contexts[-1]["playbook_items"]
    assert [(i["id"], i["content"]) for i in given] == [(item.id, item.content)]
    # The second run's reflector tagged it; its curator found the lesson already there.
    after = store(harness).current(str(repo), playbook_name(str(repo)))
    assert after is not None and after.version == 2
    assert [(i.id, i.helpful) for i in after.items] == [(item.id, 1)]


async def test_a_run_given_more_items_than_a_batch_holds_tags_them_all(
    harness: LoopHarness, repo: Path
) -> None:
    """Small items fit the hydration budget (tokens) two hundred at a time and more, yet a
    batch holds 200 deltas: the run's tags go in as many batches as they need."""
    name, origin = playbook_name(str(repo)), str(repo)
    tiny = [hashlib.sha256(str(n).encode()).hexdigest()[:6] for n in range(210)]  # 3 tokens
    async with worker(harness):
        client, config = harness.env.client, settings(harness)
        for part, lessons in (("a", tiny[:150]), ("b", tiny[150:])):
            deltas = [
                AddDelta(kind=ItemKind.CLARIFICATION, section="s", content=c) for c in lessons
            ]
            batch = DeltaBatch(batch_id=f"seed-{part}", source="alice", deltas=deltas)
            await writer.send_batch(client, config, name, origin, batch)
        # Without the split, the run's task failed for good as it built its batch.
        result = await asyncio.wait_for(run(harness, repo), 120)

    assert result.state.status == RunStatus.COMPLETED
    assert result.state.playbook is not None and len(result.state.playbook.item_ids) == 210
    updated = [e.payload for e in of(result.log, EventName.PLAYBOOK_UPDATED)]
    run_id = result.state.run_id
    assert [u.batch_id for u in updated] == [f"{run_id}:run", f"{run_id}:run-2"]
    assert sum(u.results.get("tagged", 0) for u in updated) == 210
    assert not of(result.log, EventName.FAILED)


class EventsOnly:
    """A run's record as `Learning` reads it, keeping the events it emits."""

    def __init__(self, run_id: str) -> None:
        self.state = SimpleNamespace(run_id=run_id, origin="/srv/app.git")
        self.memory = SimpleNamespace(playbook=playbook_name("/srv/app.git"))
        self.emitted: list[tuple[EventName, Any, str]] = []

    def emit(self, name: EventName, payload: Any, status: str = "ok") -> None:
        self.emitted.append((name, payload, status))


async def test_a_batch_that_cannot_be_built_is_an_event_not_a_failed_task() -> None:
    """Pydantic refusing a batch inside the run's workflow would fail its task on every
    retry; the run records why and goes on (here, an id too long for a batch's)."""
    record = EventsOnly("r" * 200)
    learning = Learning(record, runner=None, request=None)  # type: ignore[arg-type]
    await learning._send("run", [TagDelta(item_id="pb-1-1", tag=Tag.HELPFUL)])
    ((name, payload, status),) = record.emitted
    assert (name, status, payload.step) == (EventName.FAILED, "error", "CURATE")
    assert "batch_id" in payload.error


async def test_a_pinned_version_and_an_opt_out(harness: LoopHarness, repo: Path) -> None:
    async with worker(harness):
        await run(harness, repo)
        await run(harness, repo, task="Describe the project's layout")
        name = playbook_name(str(repo))
        assert store(harness).current(str(repo), name).version >= 2  # type: ignore[union-attr]

        pinned = await run(harness, repo, playbook_version=1)
        loaded = of(pinned.log, EventName.PLAYBOOK_LOADED)[0]
        assert (loaded.payload.version, loaded.payload.pinned) == (1, True)

        before = store(harness).versions(str(repo), name)
        opted_out = await run(harness, repo, playbook=False)
    assert opted_out.state.status == RunStatus.COMPLETED
    assert not of(opted_out.log, EventName.PLAYBOOK_LOADED)
    assert not of(opted_out.log, EventName.PLAYBOOK_UPDATED)
    assert store(harness).versions(str(repo), name) == before


async def test_twenty_concurrent_batches_some_sent_twice_are_each_applied_once(
    harness: LoopHarness, repo: Path
) -> None:
    name, origin = playbook_name(str(repo)), str(repo)
    batches = [
        DeltaBatch(
            batch_id=f"batch-{n:02d}",
            source=f"run-{n}",
            deltas=[AddDelta(kind=ItemKind.SKILL, section="s", content=distinct(n))],
        )
        for n in range(1, 21)
    ]
    async with worker(harness):
        # As runs send them (signals, then the `applied` query) and as a person does
        # (updates), five of them twice, one of those both ways.
        client, config = harness.env.client, settings(harness)
        applied = await asyncio.gather(
            *(writer.deliver_batch(client, config, name, origin, b) for b in batches),
            *(writer.send_batch(client, config, name, origin, b) for b in batches[::4]),
        )
        state = await writer.describe(harness.env.client, name)

    by_batch: dict[str, set[int]] = {}
    for result in applied:
        by_batch.setdefault(result.batch_id, set()).add(result.version)
    # A batch sent twice answers the one version it made.
    assert all(len(versions) == 1 for versions in by_batch.values())
    assert sorted(v for (v,) in by_batch.values()) == list(range(1, 21))
    assert state is not None and (state.version, state.items) == (20, 20)
    history = store(harness).versions(origin, name)
    assert [v.version for v in history] == list(range(20, 0, -1))
    assert sorted(v.batch_id or "" for v in history) == [b.batch_id for b in batches]
    # The batches that waited while a push ran went out together: fewer pushes than
    # versions, each version still a commit of its own.
    written = harness.env.client.get_workflow_handle(workflow_id(name))
    pushes = await harness.activities_run(written)
    assert 1 <= pushes.count("commit_playbook_versions") < len(batches)
    assert "commit_playbook" not in pushes


async def test_the_writer_continues_as_new_and_still_applies_each_batch_once(
    harness: LoopHarness, repo: Path
) -> None:
    name, origin = playbook_name(str(repo)), str(repo)
    client = harness.env.client
    async with worker(harness):
        handle = await client.start_workflow(
            PlaybookWorkflow.run,
            PlaybookInput(name=name, origin=origin, continue_after_batches=2),
            id=workflow_id(name),
            task_queue=harness.task_queue,
        )
        first_run = handle.result_run_id
        for n in range(1, 6):
            batch = DeltaBatch(
                batch_id=f"b{n}",
                source="test",
                deltas=[
                    AddDelta(kind=ItemKind.REFERENCE, section="docs", content=f"doc {n} x" * n)
                ],
            )
            await writer.send_batch(client, settings(harness), name, origin, batch)
        again = await writer.send_batch(
            client, settings(harness), name, origin, DeltaBatch(batch_id="b1", source="test")
        )
        state = await writer.describe(client, name)
        latest = await client.get_workflow_handle(workflow_id(name)).describe()
    assert again.version == 1  # b1, remembered across continue-as-new
    assert state is not None and state.version == 5
    assert latest.run_id != first_run


async def test_the_writer_carries_each_batch_s_results_not_its_outcomes(
    harness: LoopHarness, repo: Path
) -> None:
    """Continue-as-new carries the writer's memory in one input, which Temporal refuses
    past 2 MiB: a batch's outcomes (up to 200, each naming an id) would fill it in a few
    hundred batches, so the writer keeps counts of them."""
    name, origin = playbook_name(str(repo)), str(repo)
    client = harness.env.client
    deltas: list[Delta] = [
        AddDelta(kind=ItemKind.REFERENCE, section="docs", content=distinct(n)) for n in range(150)
    ]
    deltas += [TagDelta(item_id=f"pb-9-{n}", tag=Tag.HARMFUL) for n in range(50)]
    big = DeltaBatch(batch_id="big", source="test", deltas=deltas)
    async with worker(harness):
        handle = await client.start_workflow(
            PlaybookWorkflow.run,
            PlaybookInput(name=name, origin=origin, continue_after_batches=1),
            id=workflow_id(name),
            task_queue=harness.task_queue,
        )
        first = await writer.send_batch(client, settings(harness), name, origin, big)
        while (await client.get_workflow_handle(workflow_id(name)).describe()).run_id == (
            handle.result_run_id
        ):
            await asyncio.sleep(0.1)
        history = await client.get_workflow_handle(workflow_id(name)).fetch_history()
        again = await writer.send_batch(client, settings(harness), name, origin, big)
    started = history.events[0].workflow_execution_started_event_attributes
    (carried,) = await client.data_converter.decode(started.input.payloads, [PlaybookInput])
    record = carried.applied["big"]
    assert "outcomes" not in record.model_dump()
    assert record.results == {"added": 150, "unknown_item": 50}
    # The call that applied it answers each delta; the same batch sent again, the counts.
    assert len(first.outcomes) == 200
    assert (again.version, again.results, again.outcomes) == (1, record.results, [])


async def test_a_rollback_makes_an_old_version_current_as_a_new_one(
    harness: LoopHarness, repo: Path
) -> None:
    name, origin = playbook_name(str(repo)), str(repo)
    one = DeltaBatch(
        batch_id="one",
        source="a",
        deltas=[AddDelta(kind=ItemKind.CONSTRAINT, section="style", content="Use tabs")],
    )
    async with worker(harness):
        v1 = await writer.send_batch(harness.env.client, settings(harness), name, origin, one)
        item_id = store(harness).current(origin, name).items[0].id  # type: ignore[union-attr]
        two = DeltaBatch(
            batch_id="two",
            source="b",
            deltas=[
                TagDelta(item_id=item_id, tag=Tag.HELPFUL),
                AddDelta(kind=ItemKind.SKILL, section="tests", content="Run make check first"),
            ],
        )
        await writer.send_batch(harness.env.client, settings(harness), name, origin, two)
        back = await writer.rollback(harness.env.client, settings(harness), name, origin, 1)
    assert (v1.version, back.version) == (1, 3)
    current = store(harness).current(origin, name)
    version_one = store(harness).at_version(origin, name, 1)
    assert current is not None and version_one is not None
    assert current.version == 3
    assert current.items == version_one.items


async def test_a_curator_asking_for_a_helper_starts_the_skill_sub_loop(
    harness: LoopHarness, repo: Path
) -> None:
    async with worker(harness):
        result = await run(harness, repo, task=f"{TASK} [skill:count_words]")
    assert result.state.status == RunStatus.COMPLETED
    (curated,) = of(result.log, EventName.CURATED)
    assert curated.payload.python_helpers == ["count_words"]
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    helper = ".loops/skills/count_words.py"
    assert done.payload.accepted == [helper] and done.payload.error is None
    # Committed on the run's branch, pushed, and it runs.
    branch = result.state.branch
    text = git(repo, "show", f"{branch}:{helper}")
    assert "--self-test" in text
    # One trajectory: the skill generator's lines say so, in a session of their own
    # linked to the run.
    files = git(repo, "ls-tree", "-r", "--name-only", branch, ".loops/trajectory").split()
    skill_files = [f for f in files if f.endswith("-skill.jsonl")]
    assert skill_files
    lines = [json.loads(x) for x in git(repo, "show", f"{branch}:{skill_files[0]}").splitlines()]
    assert lines and {x["loop_type"] for x in lines} == {"skill"}
    session = f"{result.state.run_id}:skill:{result.state.iteration}"
    assert {x["trajectory_id"] for x in lines} == {session}
    assert {x["parent_trajectory_id"] for x in lines} == {result.state.run_id}
    produce = next(f for f in files if f.endswith("-produce.jsonl"))
    task_lines = [json.loads(x) for x in git(repo, "show", f"{branch}:{produce}").splitlines()]
    assert {x["loop_type"] for x in task_lines} == {"task"}
    # The skill curator's item is in the playbook, naming the helper.
    updated = [e.payload.batch_id for e in of(result.log, EventName.PLAYBOOK_UPDATED)]
    assert updated == [f"{result.state.run_id}:run", f"{result.state.run_id}:skill"]
    playbook = store(harness).current(str(repo), playbook_name(str(repo)))
    assert playbook is not None
    assert any(i.kind == ItemKind.SKILL and helper in i.content for i in playbook.items)


async def test_the_skill_generators_command_writes_none_of_the_runs_records(
    harness: LoopHarness, repo: Path
) -> None:
    """The generator's helpers are its work, the records beside them the worker's: what its
    command wrote there is put back before its commit, which the run adopts."""
    forged = json.dumps({"seq": 1_000_000, "run_id": "forged", "event": "run_started"})
    command = (
        f"printf '%s\\n' {shlex.quote(forged)} >> {HISTORY_PATH} && printf 'true\\n' > {PROOF_FILE}"
    )
    models = CommandFirst(command, role=Role.SKILL_GENERATOR)
    async with worker(harness, models):
        result = await run(harness, repo, task=f"{TASK} [skill:count_words]")
    assert result.state.status == RunStatus.COMPLETED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert done.payload.accepted == [".loops/skills/count_words.py"]
    branch = result.state.branch
    files = git(repo, "ls-tree", "-r", "--name-only", branch).split()
    assert PROOF_FILE not in files
    history = git(repo, "show", f"{branch}:{HISTORY_PATH}")
    assert "forged" not in history
    assert [e.seq for e in parse_history(history)] == list(range(1, result.events))


async def test_a_helper_that_fails_its_check_leaves_the_run_completed_and_no_skill(
    harness: LoopHarness, repo: Path
) -> None:
    async with worker(harness):
        result = await run(harness, repo, task=f"{TASK} [skill-broken:bad_helper]")
    assert result.state.status == RunStatus.COMPLETED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    helper = ".loops/skills/bad_helper.py"
    assert done.payload.accepted == []
    assert "check failed" in done.payload.rejected[helper]
    files = git(repo, "ls-tree", "-r", "--name-only", result.state.branch).split()
    assert helper not in files
    # The skill sub-loop sent nothing: only the run's own batch reached the playbook.
    updated = [e.payload.batch_id for e in of(result.log, EventName.PLAYBOOK_UPDATED)]
    assert updated == [f"{result.state.run_id}:run"]
    playbook = store(harness).current(str(repo), playbook_name(str(repo)))
    assert playbook is not None
    assert not [i for i in playbook.items if i.kind == ItemKind.SKILL]


async def test_a_skill_sub_loop_that_fails_leaves_the_run_completed(
    harness: LoopHarness, repo: Path
) -> None:
    # The skill reflector's answer is invalid, and again when repaired: the review step
    # fails for good, so does the sub-loop; the run says so and pushes all the same.
    script = OfflineScript.model_validate({"skill-reflector": {"1": {"raw": "not json"}}})
    async with worker(harness, OfflineModels(script=script)):
        result = await run(harness, repo, task=f"{TASK} [skill:count_words]")
    assert result.state.status == RunStatus.COMPLETED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert done.payload.error and not done.payload.accepted
    assert of(result.log, EventName.PUSHED)
    files = git(repo, "ls-tree", "-r", "--name-only", result.state.branch).split()
    assert ".loops/skills/count_words.py" not in files
    updated = [e.payload.batch_id for e in of(result.log, EventName.PLAYBOOK_UPDATED)]
    assert updated == [f"{result.state.run_id}:run"]


HELPER = ".loops/skills/count_words.py"
# A helper the offline reflector accepts and whose check (`--self-test`) exits 0.
PASSING_HELPER = "import sys\n\nif __name__ == '__main__':\n    sys.exit(0)\n"
REWRITTEN = "# rewritten by the skill generator\n"


def generator_writes(*files: tuple[str, str]) -> OfflineModels:
    """The offline model, its skill generator writing `files` (path, content)."""
    answer = {"files": [{"path": p, "content": c} for p, c in files], "summary": "Wrote them."}
    return OfflineModels(script=OfflineScript.model_validate({"skill-generator": {"*": answer}}))


def starts_no_child(history: WorkflowHistory) -> bool:
    return not [
        e
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]


async def test_the_skill_generator_s_commit_holds_only_its_files_and_trajectory(
    harness: LoopHarness, repo: Path
) -> None:
    # The generator is an agent with every workspace tool: what it changed besides the
    # files it was asked for (a tracked file, a new one) is not the run's work.
    models = generator_writes(
        (HELPER, PASSING_HELPER), ("README.md", REWRITTEN), ("src/extra.py", "x = 1\n")
    )
    async with worker(harness, models):
        result = await run(harness, repo, task=f"{TASK} [skill:count_words]")
    assert result.state.status == RunStatus.COMPLETED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert done.payload.accepted == [HELPER] and done.payload.commit
    branch = result.state.branch
    assert git(repo, "show", f"{branch}:{HELPER}") == PASSING_HELPER
    assert git(repo, "show", f"{branch}:README.md") == "# a project\n"
    assert "src/extra.py" not in git(repo, "ls-tree", "-r", "--name-only", branch).split()
    # The sub-loop's commit changed its helper and its trajectory, nothing else.
    commit = done.payload.commit
    changed = git(repo, "diff", "--name-only", f"{commit}~1", commit).split()
    trajectory = next(path for path in changed if path.endswith("-skill.jsonl"))
    assert sorted(changed) == sorted([HELPER, trajectory])


async def test_a_skill_generator_that_writes_none_of_its_files_adds_no_commit(
    harness: LoopHarness, repo: Path
) -> None:
    models = generator_writes(("README.md", REWRITTEN))
    async with worker(harness, models):
        result = await run(harness, repo, task=f"{TASK} [skill:count_words]")
    assert result.state.status == RunStatus.COMPLETED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert done.payload.commit is None and not done.payload.accepted
    assert done.payload.rejected == {HELPER: "the generator did not write it"}
    branch = result.state.branch
    assert git(repo, "show", f"{branch}:README.md") == "# a project\n"
    messages = git(repo, "log", "--format=%s", branch).splitlines()
    assert not [m for m in messages if m.startswith("skill sub-loop")]


async def test_a_halted_run_starts_no_skill_sub_loop(harness: LoopHarness, repo: Path) -> None:
    # HALT: the run does nothing more. It still curates and sends what it learnt, but
    # its generator, an agent with every tool that no custodiet audits, never starts.
    script = {
        "critic": {"*": {"verdict": "HALT", "feedback": "This plan would delete user data."}},
        "skill-generator": {
            "*": {"files": [{"path": HELPER, "content": PASSING_HELPER}], "summary": "Wrote it."}
        },
    }
    async with worker(harness, OfflineModels(script=OfflineScript.model_validate(script))):
        handle = await harness.start(
            task=f"{TASK} [skill:count_words]", repo=str(repo), playbook=True
        )
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.state.status == RunStatus.HALTED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert not done.payload.accepted and done.payload.commit is None
    assert "halted" in done.payload.rejected[HELPER]
    assert starts_no_child(history)
    assert HELPER not in git(repo, "ls-tree", "-r", "--name-only", result.state.branch).split()
    (curated,) = of(result.log, EventName.CURATED)
    assert curated.payload.python_helpers == ["count_words"]


async def test_a_run_stopped_while_blocked_starts_no_skill_sub_loop(
    harness: LoopHarness, repo: Path
) -> None:
    block = {"verdict": "BLOCK", "reason": "the producer contacted an outside host"}
    script = {
        "custodiet": {"1": block},
        "skill-generator": {
            "*": {"files": [{"path": HELPER, "content": PASSING_HELPER}], "summary": "Wrote it."}
        },
    }
    async with worker(harness, OfflineModels(script=OfflineScript.model_validate(script))):
        handle = await harness.start(
            task=f"{TASK} [skill:count_words]",
            repo=str(repo),
            playbook=True,
            audit_probability=1.0,
        )

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        await handle.signal(LoopWorkflow.stop, "not worth it")
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.state.status == RunStatus.STOPPED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert not done.payload.accepted and done.payload.commit is None
    assert "custodiet block" in done.payload.rejected[HELPER]
    assert starts_no_child(history)
    assert HELPER not in git(repo, "ls-tree", "-r", "--name-only", result.state.branch).split()


async def test_every_hydration_round_is_given_the_version_the_run_records(
    harness: LoopHarness, repo: Path
) -> None:
    # The critic sends the plan back, slowly; meanwhile another run's batch makes a new
    # version. The second round must be given the first round's version, the one the
    # run's state and events name, not the newer one.
    name, origin = playbook_name(str(repo)), str(repo)
    first = DeltaBatch(
        batch_id="earlier-run:run",
        source="earlier-run",
        deltas=[AddDelta(kind=ItemKind.CONSTRAINT, section="docs", content=distinct(1))],
    )
    later = DeltaBatch(
        batch_id="other-run:run",
        source="other-run",
        deltas=[AddDelta(kind=ItemKind.CONSTRAINT, section="docs", content=distinct(2))],
    )
    script = {
        "critic": {
            "1": {
                "answer": {"verdict": "REVISE", "issues": ["vague"], "feedback": "sharpen"},
                "delay_ms": 3000,
            }
        }
    }
    models = RecordingModels()
    models.script = OfflineScript.model_validate(script)
    async with worker(harness, models):
        await writer.send_batch(harness.env.client, settings(harness), name, origin, first)
        handle = await harness.start(task=TASK, repo=origin, playbook=True)
        while EventName.PLAYBOOK_LOADED not in {e.event for e in await harness.events(handle)}:
            await asyncio.sleep(0.05)
        newer = await writer.send_batch(harness.env.client, settings(harness), name, origin, later)
        result = await handle.result()

    assert newer.version == 2
    assert result.state.playbook is not None and result.state.playbook.version == 1
    rounds = [[item["id"] for item in c["playbook_items"]] for c in models.hydrator_contexts]
    assert len(rounds) == 2
    assert rounds == [result.state.playbook.item_ids] * 2
