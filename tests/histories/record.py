"""Record workflow histories for the replay tests.

    python -m tests.histories.record [NAME ...]

The committed histories are what runs started by older code look like, and the replay
test proves the current code still reproduces them. So record only what is new (say,
`steered_run` for a new path through the workflow), and keep the old histories while runs
like them may be open: re-record one only once the patch that kept its path is removed
(docs/operations.md, "Upgrading with runs in flight").
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.local import free_port
from loopworks.deploy.search_attributes import register_search_attributes
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.playbook import writer
from loopworks.playbook.workflow import PlaybookWorkflow
from loopworks.schemas.admission import SlotInput
from loopworks.schemas.graph import GraphInput, GraphRequest
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.playbook import (
    AddDelta,
    DeltaBatch,
    ItemKind,
    playbook_name,
    workflow_id,
)
from loopworks.schemas.retention import RetentionInput
from loopworks.schemas.run import Approval, Budget, RunRequest, RunStatus, Step
from loopworks.schemas.settings import Settings
from loopworks.service.connect import CONVERTER, data_converter
from loopworks.worker.build import build_worker
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.retention import RetentionWorkflow
from loopworks.workflows.slot import SlotWorkflow
from tests.histories.notified import (
    record_handed_over_run,
    record_notification_deliveries,
    record_notified_run,
)
from tests.integration.stack import bare_remote
from tests.workflows.conftest import commit_all

HERE = Path(__file__).parent
# How many iterations a run's workspace shows: PRODUCE's trajectory is a file an iteration.
PRODUCED = "ls .loops/trajectory/*-produce.jsonl | wc -l"
log = logging.getLogger(__name__)

# Touches every branch a run can take in one history: a REVISE from the critic, a
# failed first evaluation with critique and refinement, the phase switch, an audit
# BLOCK cleared by an update, QA and the push.
FULL_RUN_SCRIPT = {
    "critic": {"1": {"verdict": "REVISE", "issues": ["too vague"], "feedback": "sharpen it"}},
    "custodiet": {"1": {"verdict": "BLOCK", "reason": "recorded block"}},
}


async def _start(
    client: Client,
    queue: str,
    run_id: str,
    continue_as_new_after_events: int | None = None,
    **request: object,
) -> WorkflowHandle:
    return await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="recorded",
            request=RunRequest(**request),  # type: ignore[arg-type]
            created_at="2026-01-01T00:00:00+00:00",
            continue_as_new_after_events=continue_as_new_after_events,
        ),
        id=run_id,
        task_queue=queue,
    )


async def _wait_status(handle: WorkflowHandle, status: RunStatus) -> None:
    while (await handle.query(LoopWorkflow.status)).status != status:
        await asyncio.sleep(0.1)


async def _record_full_run(client: Client, settings: Settings) -> WorkflowHistory:
    return await _record_blocked_run(client, settings, "recorded-full-run")


async def _record_blocked_run(
    client: Client, settings: Settings, run_id: str, **request: object
) -> WorkflowHistory:
    """A run on the full run's script, its audit BLOCK cleared by an update."""
    model = OfflineModels(script=OfflineScript.model_validate(FULL_RUN_SCRIPT))
    async with build_worker(client, settings, models=model):
        run = await _start(
            client,
            settings.task_queue,
            run_id,
            task="Write a guide to caching",
            audit_probability=1.0,
            **request,
        )
        await _wait_status(run, RunStatus.BLOCKED)
        await run.execute_update(LoopWorkflow.clear_block, "reviewed")
        await run.result()
        return await run.fetch_history()


async def _record_blocked_during_work_run(client: Client, settings: Settings) -> WorkflowHistory:
    """The custodiet audits before every tool call of the producer and blocks the first:
    the run is held, the block cleared by an update, and PRODUCE runs again from the
    committed work (docs/loop.md#steps)."""
    block = {"verdict": "BLOCK", "reason": "recorded block", "violations": ["recorded"]}
    model = OfflineModels(script=OfflineScript.model_validate({"custodiet": {"1": block}}))
    async with build_worker(client, settings, models=model):
        run = await _start(
            client,
            settings.task_queue,
            "recorded-blocked-during-work-run",
            task="Write a guide",
            audit_probability=0.0,
            tool_audit_probability=1.0,
            max_iterations=1,
        )
        await _wait_status(run, RunStatus.BLOCKED)
        await run.execute_update(LoopWorkflow.clear_block, "reviewed")
        await run.result()
        return await run.fetch_history()


# The keys the encrypted history was recorded with: a test key, published beside the
# history so that the replay test can read it, and no deployment's.
RECORDING_KEYS = "recorded-1:" + base64.b64encode(b"loopworks recorded histories key").decode()


async def _record_encrypted_run(client: Client, settings: Settings) -> WorkflowHistory:
    """The full run's path with every payload encrypted (service/codec.py), as a deployment
    with LOOPS_PAYLOAD_KEYS writes it: a client and a worker on the codec's converter."""
    keyed = settings.model_copy(update={"payload_keys": RECORDING_KEYS})
    config = client.config()
    encrypted = Client(**{**config, "data_converter": data_converter(keyed)})
    return await _record_blocked_run(encrypted, keyed, "recorded-encrypted-run")


# Each kind of check, so that EVALUATE runs its two groups (exec; content with the
# judgement), and a command that fails the first iteration, so that the second reuses
# PREPARE's checks.
TWO_GROUP_RULES: list[dict[str, Any]] = [
    {
        "id": "title",
        "description": "A title",
        "severity": "fail",
        "check": {"kind": "pattern", "pattern": "^# \\S"},
    },
    {
        "id": "second-draft",
        "description": "Fails the first iteration",
        "severity": "fail",
        "check": {
            "kind": "command",
            "command": "test $(ls .loops/trajectory/*-produce.jsonl | wc -l) -ge 2",
        },
    },
    {
        "id": "reads-well",
        "description": "Reads well",
        "severity": "warn",
        "check": "Does it read well?",
    },
]


async def _record_two_group_run(client: Client, settings: Settings) -> WorkflowHistory:
    """Two evaluation groups (the judge with the patterns), PREPARE only when the active
    rules change, the phase switch re-running no check on the same commit, and the
    reflection in close's commit."""
    return await _record_with_rules(client, settings, "recorded-two-groups", TWO_GROUP_RULES)


async def _record_concrete_rules_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A run whose rules all carry their checks: PREPARE makes them without an activity,
    on the first iteration and at the phase switch."""
    rules = [rule for rule in TWO_GROUP_RULES if not isinstance(rule["check"], str)]
    rules.append(
        {
            "id": "has-body",
            "description": "A body",
            "severity": "warn",
            "phase": "B",
            "check": {"kind": "pattern", "pattern": "\\w+"},
        }
    )
    return await _record_with_rules(client, settings, "recorded-concrete-rules", rules)


async def _record_with_rules(
    client: Client, settings: Settings, run_id: str, rules: list[dict[str, Any]]
) -> WorkflowHistory:
    async with build_worker(client, settings, models=OfflineModels()):
        run = await _start(
            client,
            settings.task_queue,
            run_id,
            task="Write a guide to caching",
            rules=rules,
            playbook=False,
        )
        await run.result()
        return await run.fetch_history()


async def _record_unprepared_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A run whose workspace cannot be prepared (its base branch is not on origin): the
    local activity fails for good, about 15 s of real time, and the run ends `failed`,
    saying why (the workflow itself completes)."""
    async with build_worker(client, settings, models=OfflineModels()):
        handle = await _start(
            client,
            settings.task_queue,
            "recorded-unprepared-run",
            task="Write a guide",
            base_branch="no-such-branch",
        )
        await handle.result()
        return await handle.fetch_history()


async def _record_stopped_run(client: Client, settings: Settings) -> WorkflowHistory:
    slow = OfflineModels(
        script=OfflineScript.model_validate({"producer": {"1": {"delay_ms": 60_000}}})
    )
    async with build_worker(client, settings, models=slow):
        stopped = await _start(client, settings.task_queue, "recorded-stopped-run", task="Draft")
        while (await stopped.query(LoopWorkflow.status)).current_step != Step.PRODUCE_PREPARE:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        await stopped.signal(LoopWorkflow.stop, "recorded stop")
        await stopped.result()
        return await stopped.fetch_history()


async def _record_steered_run(client: Client, settings: Settings) -> WorkflowHistory:
    """Interactive approval, a pause and a resume, then continue-as-new: the first
    execution of the chain, ending in its ContinuedAsNew event."""
    async with build_worker(client, settings, models=OfflineModels(latency_ms=100)):
        steered = await _start(
            client,
            settings.task_queue,
            "recorded-steered-run",
            continue_as_new_after_events=20,
            task="Write a guide",
            mode="interactive",
            max_iterations=3,
            audit_probability=0.0,
            rules=[
                {
                    "id": "title",
                    "description": "a title",
                    "check": {"kind": "pattern", "pattern": "^# "},
                },
                {
                    "id": "never",
                    "description": "never",
                    "check": {"kind": "pattern", "pattern": "ZQX"},
                },
            ],
        )
        await _wait_status(steered, RunStatus.AWAITING_APPROVAL)
        await steered.execute_update(LoopWorkflow.approve, Approval(note="recorded approval"))
        await steered.execute_update(LoopWorkflow.pause)
        await _wait_status(steered, RunStatus.PAUSED)
        await steered.execute_update(LoopWorkflow.resume)
        await steered.result()
        first = client.get_workflow_handle(steered.id, run_id=steered.result_run_id)
        return await first.fetch_history()


async def _record_continued_run(client: Client, settings: Settings) -> WorkflowHistory:
    """The last execution of a long failing run: it starts from a carried memory whose
    tail git has partly taken over, and ends with the push."""
    async with build_worker(client, settings, models=OfflineModels()):
        continued = await _start(
            client,
            settings.task_queue,
            "recorded-continued-run",
            continue_as_new_after_events=60,
            task="Write a guide",
            max_iterations=9,
            audit_probability=0.0,
            rules=[
                {
                    "id": "title",
                    "description": "a title",
                    "check": {"kind": "pattern", "pattern": "^# "},
                },
                {
                    "id": "never",
                    "description": "never",
                    "check": {"kind": "pattern", "pattern": "ZQX"},
                },
                {
                    "id": "alternating",
                    "description": "holds on odd iterations",
                    "check": {
                        "kind": "command",
                        "command": f"test $(( $({PRODUCED}) % 2 )) -eq 1",
                    },
                },
            ],
        )
        await continued.result()
        return await continued.fetch_history()


def _graph_task(task_id: str, *requires: str) -> dict[str, object]:
    return {
        "id": task_id,
        "title": f"Write part {task_id}",
        "description": f"Write a short section for part {task_id}.",
        "requires": list(requires),
        "acceptance_criteria": [f"Part {task_id} is written"],
        "verification_command": f"test -f artifact.md || test -f docs/tasks/{task_id}/artifact.md",
    }


async def _record_graph_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A diamond task graph: child loops, the merge queue and the ledger."""
    tasks = [
        _graph_task("T-001"),
        _graph_task("T-002", "T-001"),
        _graph_task("T-003", "T-001"),
        _graph_task("T-004", "T-002", "T-003"),
    ]
    async with build_worker(client, settings, models=OfflineModels(latency_ms=100)):
        graph = await client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id="recorded-graph-run",
                request=GraphRequest(
                    goal="Write a guide in parts",
                    tasks=tasks,  # type: ignore[arg-type]
                    max_iterations=2,
                    audit_probability=0.0,
                ),
                created_at="2026-01-01T00:00:00+00:00",
            ),
            id="recorded-graph-run",
            task_queue=settings.task_queue,
        )
        await graph.result()
        return await graph.fetch_history()


async def _record_budget_graph_run(client: Client, settings: Settings) -> WorkflowHistory:
    """Three tasks in a row and a total budget of about a loop and a half: the first loop
    completes, the second gets what is left and runs out, the third never starts
    (docs/graphs.md#budget)."""
    tasks = [_graph_task("T-001"), _graph_task("T-002", "T-001"), _graph_task("T-003", "T-002")]
    async with build_worker(client, settings, models=OfflineModels(latency_ms=100)):
        graph = await client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id="recorded-budget-graph-run",
                request=GraphRequest(
                    goal="Write a guide in parts",
                    tasks=tasks,  # type: ignore[arg-type]
                    max_iterations=2,
                    audit_probability=0.0,
                    budget=Budget(max_tokens=3000),
                    total_budget=Budget(max_tokens=4000),
                ),
                created_at="2026-01-01T00:00:00+00:00",
            ),
            id="recorded-budget-graph-run",
            task_queue=settings.task_queue,
        )
        result = await graph.result()
        assert result.state.message.startswith("the graph's budget is spent"), result.state
        return await graph.fetch_history()


PREP_FIXTURES = HERE.parent / "fixtures" / "prep"


def _prep_upload(settings: Settings) -> dict[str, str]:
    """The preparation tool's files (tests/fixtures/prep/), the package's project root
    the service's origin and its time now, as the tool would have written them here."""
    package = json.loads((PREP_FIXTURES / "prep-package.json").read_bytes())
    package["environment"]["project_root"] = str(settings.default_origin.resolve())
    package["generated_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    tasks = (PREP_FIXTURES / "prep-tasks.jsonl").read_bytes().decode()
    return {"package": json.dumps(package, indent=2), "tasks": tasks}


async def _record_prep_graph_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A graph taking a `ccw-loop` prep package with two unreadable lines: the
    `prep-package-as-written` marker, its two tasks, a fix task (the tasks' commands fail
    in this origin)."""
    async with build_worker(client, settings, models=OfflineModels(latency_ms=100)):
        graph = await client.start_workflow(
            TaskGraphWorkflow.run,
            GraphInput(
                graph_id="recorded-prep-graph-run",
                request=GraphRequest(
                    goal="Add a Markdown export",
                    prep_package=_prep_upload(settings),  # type: ignore[arg-type]
                    max_iterations=1,
                    audit_probability=0.0,
                ),
                created_at="2026-01-01T00:00:00+00:00",
            ),
            id="recorded-prep-graph-run",
            task_queue=settings.task_queue,
        )
        result = await graph.result()
        assert result.state.source.startswith("prep package"), result.state.prep_rejected
        return await graph.fetch_history()


async def _record_prep_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A run given a prep package: its tasks as its plan, rules and criteria."""
    async with build_worker(client, settings, models=OfflineModels()):
        run = await _start(
            client,
            settings.task_queue,
            "recorded-prep-run",
            task="Add a Markdown export",
            prep_package=_prep_upload(settings),
            max_iterations=1,
            audit_probability=0.0,
            playbook=False,
        )
        result = await run.result()
        assert result.state.prep.startswith("prep package"), result.state.prep_rejected
        return await run.fetch_history()


async def _record_playbook_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A run that reads its playbook, curates, runs the skill sub-loop and sends both
    batches (the sub-loop's and the playbook writer's own histories are separate)."""
    async with build_worker(client, settings, models=OfflineModels()):
        run = await _start(
            client,
            settings.task_queue,
            "recorded-playbook-run",
            task="Write a guide to caching [skill:count_words]",
            audit_probability=0.0,
        )
        await run.result()
        return await run.fetch_history()


async def _record_halted_skill_run(client: Client, settings: Settings) -> WorkflowHistory:
    """A run the critic halted whose curator asked for a helper: recorded when a halted
    run still started the skill sub-loop, as a run from then replays."""
    halt = {"verdict": "HALT", "feedback": "This plan would delete user data."}
    script = OfflineScript.model_validate({"critic": {"*": halt}})
    async with build_worker(client, settings, models=OfflineModels(script=script)):
        run = await _start(
            client,
            settings.task_queue,
            "recorded-halted-skill-run",
            task="Write a guide to caching [skill:count_words]",
            audit_probability=0.0,
        )
        await run.result()
        return await run.fetch_history()


async def _record_skill_loop_writing_nothing(client: Client, settings: Settings) -> WorkflowHistory:
    """The skill sub-loop of a run whose generator wrote none of the files it was asked
    for: recorded when the sub-loop answered the generator's commit all the same."""
    notes = {"path": "notes.md", "content": "# Notes\n"}
    answer = {"files": [notes], "summary": "Wrote notes instead."}
    script = OfflineScript.model_validate({"skill-generator": {"*": answer}})
    async with build_worker(client, settings, models=OfflineModels(script=script)):
        run = await _start(
            client,
            settings.task_queue,
            "recorded-skill-loop-writing-nothing",
            task="Write a guide to caching [skill:count_words]",
            audit_probability=0.0,
        )
        await run.result()
        return await client.get_workflow_handle(f"{run.id}/skills").fetch_history()


async def _record_playbook_writer(client: Client, settings: Settings) -> WorkflowHistory:
    """The playbook's writer after two runs delivered their batches (signals): loaded,
    applied, committed, then one batch sent again by hand (an update)."""
    async with build_worker(client, settings, models=OfflineModels()):
        for n in (1, 2):
            run = await _start(
                client, settings.task_queue, f"recorded-writer-{n}", task="Write a guide"
            )
            await run.result()
        state = await run.query(LoopWorkflow.status)
        name = playbook_name(state.origin)
        batch = DeltaBatch(batch_id="recorded-writer-1:run", source="again")
        await writer.send_batch(client, settings, name, state.origin, batch)
        return await client.get_workflow_handle(workflow_id(name)).fetch_history()


async def _record_playbook_unreadable_origin(client: Client, settings: Settings) -> WorkflowHistory:
    """The playbook's writer started by a batch for an origin nobody serves: the batch's
    read and the writer's own first read fail for good; the sender is told why and the
    writer lives on."""
    port = free_port()
    origin = f"http://127.0.0.1:{port}/nobody.git"
    # Admitted, as an operator would admit their own git server: the reads reach git
    # and fail there, not at the origin policy.
    settings = settings.model_copy(
        update={"allowed_schemes": "https,ssh,http", "allowed_origins": f"127.0.0.1:{port}"}
    )
    name = playbook_name(origin)
    handle = client.get_workflow_handle(workflow_id(name))
    async with build_worker(client, settings, models=OfflineModels()):
        batch = DeltaBatch(batch_id="recorded-unreadable-1", source="by hand")
        with contextlib.suppress(WorkflowUpdateFailedError):
            await writer.send_batch(client, settings, name, origin, batch)
        return await _once_both_reads_failed(handle)


async def _once_both_reads_failed(handle: WorkflowHandle[Any, Any]) -> WorkflowHistory:
    """The writer's history once the batch's read and the writer's own have failed, and
    the writer lived on."""
    for _ in range(300):
        events = (await handle.fetch_history()).events
        failed = [e for e in events if e.HasField("activity_task_failed_event_attributes")]
        if len(failed) == 2 and events[-1].HasField("workflow_task_completed_event_attributes"):
            break
        await asyncio.sleep(0.1)
    return await handle.fetch_history()


async def _record_playbook_failed_delivery(client: Client, settings: Settings) -> WorkflowHistory:
    """The playbook's writer started by a run's batch (a signal) for an origin nobody
    serves: the batch's read and the writer's own fail for good; the writer records the
    batch's failure for its sender's query and lives on."""
    port = free_port()
    origin = f"http://127.0.0.1:{port}/nobody.git"
    settings = settings.model_copy(
        update={"allowed_schemes": "https,ssh,http", "allowed_origins": f"127.0.0.1:{port}"}
    )
    name = playbook_name(origin)
    handle = client.get_workflow_handle(workflow_id(name))
    async with build_worker(client, settings, models=OfflineModels()):
        batch = DeltaBatch(batch_id="recorded-failed-delivery-1", source="recorder")
        try:
            await writer.deliver_batch(client, settings, name, origin, batch)
        except ApplicationError:
            pass  # told why, at once
        else:
            raise AssertionError("a batch for an origin nobody serves was applied")
        return await _once_both_reads_failed(handle)


async def _record_playbook_merged(client: Client, settings: Settings) -> WorkflowHistory:
    """The playbook's writer given one lesson by eight sources (updates, by hand): merged
    into one item, which names the first two and latest three and counts the rest."""
    with tempfile.TemporaryDirectory() as repos:
        origin = str(bare_remote(Path(repos)))
        settings = settings.model_copy(update={"local_roots": os.path.realpath(repos)})
        name = playbook_name(origin)
        async with build_worker(client, settings, models=OfflineModels()):
            for n in range(1, 9):
                lesson = AddDelta(kind=ItemKind.CONSTRAINT, section="style", content="Use tabs")
                batch = DeltaBatch(
                    batch_id=f"recorded-merged-{n}", source=f"recorder-{n}", deltas=[lesson]
                )
                await writer.send_batch(client, settings, name, origin, batch)
            handle = client.get_workflow_handle(workflow_id(name))
            playbook = await handle.query(PlaybookWorkflow.current)
            assert playbook is not None and playbook.items[0].more_sources == 3
            return await handle.fetch_history()


async def _record_playbook_grouped(client: Client, settings: Settings) -> WorkflowHistory:
    """The playbook's writer given six batches at once after a run's (signals): those that
    waited while a push ran are committed together."""
    async with build_worker(client, settings, models=OfflineModels()):
        run = await _start(client, settings.task_queue, "recorded-grouped", task="Write a guide")
        await run.result()
        origin = (await run.query(LoopWorkflow.status)).origin
        name = playbook_name(origin)
        batches = [
            DeltaBatch(
                batch_id=f"recorded-grouped-{n}",
                source="recorder",
                deltas=[AddDelta(kind=ItemKind.REFERENCE, section="docs", content=f"doc {n} " * n)],
            )
            for n in range(1, 7)
        ]
        await asyncio.gather(
            *(writer.deliver_batch(client, settings, name, origin, b) for b in batches)
        )
        return await client.get_workflow_handle(workflow_id(name)).fetch_history()


# A repository with a test of its own, and a producer that changes its code: the run's
# proof is detected, runs in phase B and passes; QA's first VERIFIED cites nothing, is
# not accepted, and QA asked once more cites the proof it ran.
PROVEN_RUN_SCRIPT = {
    "producer": {
        "*": {
            "files": [
                {
                    "path": "calc.py",
                    "content": "def add(a, b):\n    return a + b\n\n\n"
                    "def mul(a, b):\n    return a * b\n",
                },
                {"path": "artifact.md", "content": "# Multiplication\n\nAdded mul beside add.\n"},
            ],
            "summary": "added mul",
        }
    },
    "qa-verifier": {"1": {"verdict": "VERIFIED", "summary": "looks right"}},
}


async def _record_proven_run(client: Client, settings: Settings) -> WorkflowHistory:
    """The run's proof and QA's evidence (docs/loop.md#the-runs-proof): detected from the
    repository, run on the work, a VERIFIED without evidence asked again."""
    # Beside the data directory: an origin inside it is refused.
    repo = settings.data_dir.parent / f"{settings.data_dir.name}-calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    (repo / ".gitignore").write_text("__pycache__/\n")
    commit_all(repo)
    # Admitted, as an operator admits the local repositories under a root.
    settings = settings.model_copy(update={"local_roots": str(repo.parent)})
    model = OfflineModels(script=OfflineScript.model_validate(PROVEN_RUN_SCRIPT))
    async with build_worker(client, settings, models=model):
        run = await _start(
            client,
            settings.task_queue,
            "recorded-proven-run",
            task="Add mul",
            repo=str(repo),
            rules=[TWO_GROUP_RULES[0]],
            audit_probability=0.0,
            playbook=False,
        )
        result = await run.result()
        proof = result.state.proof
        assert result.state.status == RunStatus.COMPLETED, result.state.stop
        assert proof is not None and proof.status.value == "passed", proof
        history = await run.fetch_history()
    shutil.rmtree(repo)
    return history


async def _record_retention_gc(client: Client, settings: Settings) -> WorkflowHistory:
    """The gc of one origin, asked by name (`POST /gc` with `repo`), with retention at 0
    days: a finished run's work ref, call refs and clone removed."""
    with tempfile.TemporaryDirectory() as repos:
        remote = bare_remote(Path(repos))
        # The origin admitted as an operator admits a local repository.
        settings = settings.model_copy(
            update={"retention_days": 0.0, "local_roots": os.path.realpath(repos)}
        )
        async with build_worker(client, settings, models=OfflineModels()):
            queue = settings.task_queue
            run = await _start(client, queue, "recorded-expired", task="Write", repo=str(remote))
            await run.result()
            gc = await client.start_workflow(
                RetentionWorkflow.run,
                RetentionInput(repo=str(remote)),
                id="recorded-retention",
                task_queue=settings.task_queue,
            )
            report = await gc.result()
            assert report.totals.runs == 1, report
            return await gc.fetch_history()


async def _admitted(client: Client, settings: Settings) -> tuple[WorkflowHandle, WorkflowHandle]:
    """A run admitted through a cap's slot (api/admission.py): it gives the slot back and
    says what it spent as it closes. Its handle and the slot's, both closed."""
    run_id, queue = "recorded-admitted-run", settings.task_queue
    slot = await client.start_workflow(
        SlotWorkflow.run,
        SlotInput(holder=run_id),
        id=f"slot/{queue}/runs/all/0",
        task_queue=queue,
    )
    async with build_worker(client, settings, models=OfflineModels()):
        run = await client.start_workflow(
            LoopWorkflow.run,
            LoopInput(
                run_id=run_id,
                alias="recorded",
                request=RunRequest(task="Write a guide", audit_probability=0),
                created_at="2026-01-01T00:00:00+00:00",
                slots=[slot.id],
            ),
            id=run_id,
            task_queue=queue,
        )
        await run.result()
        await slot.result()
    return run, slot


async def _record_carried_calls_run(client: Client, settings: Settings) -> WorkflowHistory:
    """The full run on a user's repository: its single-shot calls' records come back in
    their steps' results and go with the run's next commits."""
    with tempfile.TemporaryDirectory() as repos:
        remote = bare_remote(Path(repos))
        # The origin admitted as an operator admits a local repository.
        settings = settings.model_copy(update={"local_roots": os.path.realpath(repos)})
        return await _record_blocked_run(
            client, settings, "recorded-carried-calls", repo=str(remote)
        )


async def _record_admitted_run(client: Client, settings: Settings) -> WorkflowHistory:
    run, _ = await _admitted(client, settings)
    return await run.fetch_history()


async def _record_admission_slot(client: Client, settings: Settings) -> WorkflowHistory:
    _, slot = await _admitted(client, settings)
    return await slot.fetch_history()


RECORDERS = {
    "full_run": _record_full_run,
    "stopped_run": _record_stopped_run,
    "steered_run": _record_steered_run,
    "continued_run": _record_continued_run,
    "graph_run": _record_graph_run,
    "budget_graph_run": _record_budget_graph_run,
    "playbook_run": _record_playbook_run,
    "playbook_writer": _record_playbook_writer,
    "playbook_grouped": _record_playbook_grouped,
    "playbook_unreadable_origin": _record_playbook_unreadable_origin,
    "playbook_failed_delivery": _record_playbook_failed_delivery,
    "playbook_merged": _record_playbook_merged,
    "two_group_run": _record_two_group_run,
    "concrete_rules_run": _record_concrete_rules_run,
    "unprepared_run": _record_unprepared_run,
    "prep_graph_run": _record_prep_graph_run,
    "prep_run": _record_prep_run,
    "notified_run": record_notified_run,
    "blocked_during_work_run": _record_blocked_during_work_run,
    "encrypted_run": _record_encrypted_run,
    "proven_run": _record_proven_run,
    "retention_gc": _record_retention_gc,
    "carried_calls_run": _record_carried_calls_run,
    "admitted_run": _record_admitted_run,
    "admission_slot": _record_admission_slot,
    "halted_skill_run": _record_halted_skill_run,
    "skill_loop_writing_nothing": _record_skill_loop_writing_nothing,
    # Last: on the test server, time skipping stops once a workflow has signalled another.
    "handed_over_run": record_handed_over_run,
    "notification_deliveries": record_notification_deliveries,
}


async def record(names: list[str]) -> None:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=CONVERTER,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    try:
        await register_search_attributes(env.client, "default")
        for name in names:
            with tempfile.TemporaryDirectory() as data:
                queue = f"record-{uuid.uuid4().hex[:6]}"
                # Unsandboxed, as the tests' workers: a temporary directory is out of the
                # sandbox user's reach when this runs as root (tests/conftest.py).
                settings = Settings(
                    LOOPS_DATA_DIR=Path(data), LOOPS_TASK_QUEUE=queue, LOOPS_SANDBOX="off"
                )
                _save(f"{name}.json", await RECORDERS[name](env.client, settings))
    finally:
        await env.shutdown()


def _save(name: str, history: object) -> None:
    text = history.to_json()  # type: ignore[attr-defined]
    (HERE / name).write_text(json.dumps(json.loads(text), indent=1) + "\n")
    log.info("wrote %s", HERE / name)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="default: all")
    names = parser.parse_args().names
    unknown = set(names) - set(RECORDERS)
    if unknown:
        parser.error(f"unknown histories {sorted(unknown)}; known: {sorted(RECORDERS)}")
    asyncio.run(record(names or list(RECORDERS)))
