"""The run's memory is one model carried whole through continue-as-new, and its events
live in git: the workflow's payloads stay small however long the run."""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio import workflow
from temporalio.worker import Worker

from loopworks.deploy.histories import continued_inputs, executions, payload_sizes
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.loop import EVENT_TAIL, LoopInput, LoopResult, RunMemory
from loopworks.schemas.run import RunRequest, StopReason
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import HISTORY_PATH, RUN_STATE_PATH
from loopworks.worker.build import activities_of, build_deps
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_control import IMPOSSIBLE_RULE, TITLE_RULE
from tests.workflows.test_production import CommandFirst

PAYLOAD_LIMIT = 64 * 1024
# Passes on odd iterations only (evaluation sees 2k-1 trajectory files at iteration k), so
# the score moves every iteration and the run never stagnates: with IMPOSSIBLE_RULE it
# fails until its iteration limit.
ALTERNATING_RULE = {
    "id": "alternating",
    "description": "Holds on odd iterations",
    "severity": "fail",
    "check": {
        "kind": "command",
        # PRODUCE's trajectory is a file an iteration (the calls' sit beside it).
        "command": "test $(( $(ls .loops/trajectory/*-produce.jsonl | wc -l) % 2 )) -eq 1",
    },
}


class ProbeMemory(RunMemory):
    """The run's memory with one field more, as a later change would add it."""

    probe: str = ""


class ProbeInput(LoopInput):
    memory: ProbeMemory | None = None


@workflow.defn(name="ProbeLoop", sandboxed=False)
class ProbeLoop(LoopWorkflow):
    """LoopWorkflow, unchanged but for the input type that names the wider memory."""

    @workflow.init
    def __init__(self, params: ProbeInput) -> None:
        super().__init__(params)

    @workflow.run
    async def run(self, params: ProbeInput) -> LoopResult:
        return await super().run(params)


async def test_a_field_added_to_the_memory_survives_continue_as_new(
    harness: LoopHarness,
) -> None:
    settings = Settings(LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue)
    params = ProbeInput(
        run_id="probe-1",
        alias="probe",
        request=RunRequest(
            task="Write a guide",
            rules=[TITLE_RULE, IMPOSSIBLE_RULE],
            max_iterations=3,
            audit_probability=0.0,
        ),
        created_at="2026-01-01T00:00:00+00:00",
        continue_as_new_after_events=20,
    )
    first = params.first_memory()
    params.memory = ProbeMemory(**first.model_dump(), probe="carried")
    deps = build_deps(settings, OfflineModels())
    async with Worker(
        harness.env.client,
        task_queue=harness.task_queue,
        workflows=[ProbeLoop],
        activities=activities_of(deps),
        activity_executor=ThreadPoolExecutor(max_workers=4),
    ):
        handle = await harness.env.client.start_workflow(
            ProbeLoop.run, params, id=params.run_id, task_queue=harness.task_queue
        )
        result = await handle.result()
        histories = await executions(harness.env.client, handle.id)

    assert result.state.stop_reason == StopReason.ITERATION_LIMIT
    continued = [carried for h in histories for carried in continued_inputs(h)]
    assert len(continued) == 2
    for carried in continued:
        assert carried["memory"]["probe"] == "carried"
        assert carried["memory"]["generation"] >= 2


async def test_twenty_iterations_carry_small_payloads_and_keep_the_whole_log_in_git(
    harness: LoopHarness,
) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide",
            rules=[TITLE_RULE, IMPOSSIBLE_RULE, ALTERNATING_RULE],
            max_iterations=20,
            continue_as_new_after_events=60,
        )
        result = await handle.result()
        histories = await executions(harness.env.client, handle.id)
        events = await harness.events(handle)

    state = result.state
    assert state.stop_reason == StopReason.ITERATION_LIMIT and state.iteration == 20
    assert sum(len(continued_inputs(h)) for h in histories) >= 5
    largest = max(size for h in histories for size in payload_sizes(h))
    assert largest < PAYLOAD_LIMIT, f"largest payload {largest} bytes"
    # The workflow keeps a bounded tail; the result carries no more than that.
    assert len(result.log) < result.events

    # The branch holds every event but the last (`pushed`, which follows the push).
    logged = harness.history_in_git(state.branch)
    assert [e.seq for e in logged] == list(range(1, result.events))
    assert names(events) == [*names(logged), "pushed"]
    assert names(logged).count("evaluation_done") == 20
    run_json = json.loads(_show(harness, state.branch, RUN_STATE_PATH))
    assert run_json["status"] == "stopped" and run_json["current_step"] == "DONE"


# A line of the run's own format numbered past any event it will emit, and a line that is
# no JSON: what a producer's command may append to the work tree's history.jsonl.
FORGED_EVENT = json.dumps(
    {
        "seq": 1_000_000,
        "ts": "2026-01-01T00:00:00+00:00",
        "run_id": "forged",
        "iteration": 1,
        "phase": "A",
        "step": "PRODUCE",
        "event": "run_started",
        "payload": {"task": "forged"},
    }
)


@pytest.mark.parametrize("line", [FORGED_EVENT, "not an event {"], ids=["huge-seq", "not-json"])
async def test_a_command_that_writes_the_runs_history_loses_no_event(
    harness: LoopHarness, line: str
) -> None:
    """The history is the worker's: what a PRODUCE's command appended to it is put back
    before the step commits, and the step appends to the history its commit holds, after
    the workflow's own mark. So the branch holds every event, those the workflow dropped
    from its tail as saved included, and nothing the command wrote."""
    forge = f"mkdir -p .loops && printf '%s\\n' {shlex.quote(line)} >> {HISTORY_PATH}"
    async with harness.worker(models=CommandFirst(forge)):
        handle = await harness.start(
            task="Write a guide",
            rules=[TITLE_RULE, IMPOSSIBLE_RULE, ALTERNATING_RULE],
            max_iterations=10,
        )
        result = await handle.result()
        events = await harness.events(handle)

    state = result.state
    assert state.stop_reason == StopReason.ITERATION_LIMIT and state.iteration == 10
    # Past the workflow's tail: the events before it are read from git alone.
    assert result.events > EVENT_TAIL and len(result.log) < result.events
    assert line not in _show(harness, state.branch, HISTORY_PATH)
    logged = harness.history_in_git(state.branch)
    assert [e.seq for e in logged] == list(range(1, result.events))
    assert {e.run_id for e in logged} == {handle.id}
    assert [e.seq for e in events] == list(range(1, result.events + 1))


# --- reading git --------------------------------------------------------------------


def _show(harness: LoopHarness, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(harness.origin), "show", f"{ref}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
