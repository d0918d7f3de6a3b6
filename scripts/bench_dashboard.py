"""Benchmark: how long the dashboard's pages take the server at scale.

    .venv/bin/python scripts/bench_dashboard.py [--runs 1000] [--tasks 50] [--repeat 10]

On the Temporal dev server with a real worker and the offline model: one real run is
driven to its end, then `--runs` more runs are made from it: workflows of the loop's type
(`LoopWorkflow`) whose result is that run's result, under ids and search attributes of
their own, started and completed at once by a recorder workflow on a queue of its own
(what `GET /runs/{id}` and the run list read of a finished run is its result and its
search attributes, so a page cannot tell them from runs that ran; driving a thousand
runs would take the machine most of an hour). A graph of `--tasks` tasks (each needing
one or two earlier ones) is started in interactive mode and waits for its approval with
every task pending: its page draws all of them.

Each page is asked in-process (the API's ASGI app, no network): the server's time. The
first request of each page is shown apart: the run list reads every row's run state
then (Temporal answers from history) and keeps finished runs' states afterwards. Figures
only, no pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from loopworks.api.main import create_app
from loopworks.deploy.binaries import find_binary
from loopworks.deploy.search_attributes import register_search_attributes
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.loop import LoopInput, LoopResult
from loopworks.schemas.run import RunRequest, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.search_attributes import (
    LOOP_ALIAS,
    LOOP_ITERATION,
    LOOP_PHASE,
    LOOP_SCORE,
    LOOP_STARTED_BY,
    LOOP_STATUS,
)


@workflow.defn(name="LoopWorkflow", sandboxed=False)
class RecordedRun:
    """A finished run again: its result is the one given (the benchmark's copies)."""

    @workflow.run
    async def run(self, result: LoopResult) -> LoopResult:
        return result


async def real_run(client: Client, queue: str) -> LoopResult:
    run_id = f"bench-real-{uuid.uuid4().hex[:6]}"
    handle = await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="write-a-guide-to-caching",
            request=RunRequest(task="Write a guide to caching", audit_probability=0),
            created_at="2026-01-01T00:00:00+00:00",
        ),
        id=run_id,
        task_queue=queue,
    )
    result = await handle.result()
    assert result.state.status == RunStatus.COMPLETED, result.state.stop
    return result


async def copies(client: Client, model: LoopResult, count: int) -> None:
    queue = f"bench-recorded-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[RecordedRun]):
        gate = asyncio.Semaphore(32)

        async def one(n: int) -> None:
            run_id = f"copy-{n:04d}-20260101-000000-{uuid.uuid4().hex[:6]}"
            state = model.state.model_copy(update={"run_id": run_id, "alias": f"copy-{n:04d}"})
            result = model.model_copy(update={"state": state})
            attributes = TypedSearchAttributes(
                [
                    SearchAttributePair(LOOP_STATUS, state.status.value),
                    SearchAttributePair(LOOP_ALIAS, state.alias),
                    SearchAttributePair(LOOP_ITERATION, state.iteration),
                    SearchAttributePair(LOOP_PHASE, state.phase.value),
                    SearchAttributePair(LOOP_SCORE, state.last_score),
                    SearchAttributePair(LOOP_STARTED_BY, "bench"),
                ]
            )
            async with gate:
                handle = await client.start_workflow(
                    RecordedRun.run,
                    result,
                    id=run_id,
                    task_queue=queue,
                    search_attributes=attributes,
                    execution_timeout=timedelta(minutes=10),
                )
                await handle.result()

        await asyncio.gather(*(one(n) for n in range(count)))


def graph_tasks(count: int) -> list[dict[str, object]]:
    """Task n needs task n-1 and task n/2: a graph of many layers, edges across them."""
    tasks = []
    for n in range(1, count + 1):
        needs = sorted({m for m in (n - 1, n // 2) if m >= 1})
        tasks.append(
            {
                "id": f"T-{n:03d}",
                "title": f"Part {n} of the guide",
                "description": f"Write part {n} of a guide to caching",
                "requires": [f"T-{m:03d}" for m in needs],
                "acceptance_criteria": [f"part {n} exists"],
                "verification_command": "true",
            }
        )
    return tasks


async def timed(http: httpx.AsyncClient, path: str, repeat: int) -> tuple[float, float, int]:
    """The first answer's time, the median of `repeat` more, and the page's size."""
    times = []
    size = 0
    for _ in range(repeat + 1):
        started = time.perf_counter()
        response = await http.get(path)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (path, response.status_code, response.text[:500])
        size = len(response.content)
    return times[0], statistics.median(times[1:]), size


async def wait_for_visibility(client: Client, query: str, count: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (await client.count_workflows(query)).count >= count:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"visibility never counted {count} for {query}")


async def main(runs: int, tasks: int, repeat: int) -> None:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=find_binary("temporal"),
    )
    try:
        await register_search_attributes(env.client, "default")
        with tempfile.TemporaryDirectory() as data:
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            settings = Settings(
                LOOPS_DATA_DIR=Path(data),
                LOOPS_TASK_QUEUE=queue,
                LOOPS_SANDBOX="off",
                TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
            )
            client = await connect(settings, interceptors=[])
            async with build_worker(client, settings, models=OfflineModels()):
                model = await real_run(client, queue)
                started = time.perf_counter()
                await copies(client, model, runs - 1)
                made = time.perf_counter() - started
                await wait_for_visibility(client, 'WorkflowType = "LoopWorkflow"', runs)
                app = create_app(settings, client=client)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://127.0.0.1", timeout=120
                ) as http:
                    created = await http.post(
                        "/graphs",
                        json={
                            "goal": "Write a guide to caching",
                            "tasks": graph_tasks(tasks),
                            "mode": "interactive",
                        },
                    )
                    assert created.status_code == 201, created.text
                    graph_id = created.json()["graph_id"]
                    await wait_for_graph(http, graph_id)
                    figures = {
                        f"runs page ({runs} runs)": await timed(http, "/ui/runs", repeat),
                        "runs page, live rows": await timed(http, "/ui/runs?part=live", repeat),
                        "runs page, filtered": await timed(
                            http, "/ui/runs?status=completed", repeat
                        ),
                        "a run's page": await timed(http, f"/ui/runs/{model.state.run_id}", repeat),
                        f"graph page ({tasks} tasks)": await timed(
                            http, f"/ui/graphs/{graph_id}", repeat
                        ),
                    }
    finally:
        await env.shutdown()
    print(f"runs                 {runs} (1 driven to its end, {runs - 1} copies in {made:.1f} s)")
    print(f"graph                {tasks} tasks, waiting for approval")
    print("page                          first    then (median)   size")
    for name, (first, then, size) in figures.items():
        times = f"{first * 1000:>6.0f} ms {then * 1000:>7.0f} ms"
        print(f"  {name:<26} {times}   {size / 1024:>5.0f} KiB")


async def wait_for_graph(http: httpx.AsyncClient, graph_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = (await http.get(f"/graphs/{graph_id}")).json()
        if state.get("status") == "awaiting_approval":
            return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"graph {graph_id} never waited for approval")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=10, help="requests of each page timed")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.tasks, args.repeat))
