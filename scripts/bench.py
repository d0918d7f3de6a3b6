"""Benchmark: how fast one worker drives offline runs end to end, and what it costs.

    .venv/bin/python scripts/bench.py [--runs 10] [--concurrency 5]

Runs on the Temporal dev server (real time: the time-skipping server would skip past
activity timeouts under load) with a real worker, real git and the offline model, and
prints figures (no pass/fail: targets belong here, not in timed tests).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from deploy.binaries import find_binary
from deploy.search_attributes import register_search_attributes
from schemas.loop import LoopInput
from schemas.run import RunRequest, RunStatus
from schemas.settings import Settings
from worker.build import build_worker
from workflows.loop import LoopWorkflow


async def one_run(env: WorkflowEnvironment, queue: str) -> tuple[float, int, int]:
    run_id = f"bench-{uuid.uuid4().hex[:10]}"
    started = time.perf_counter()
    handle = await env.client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="bench",
            request=RunRequest(task="Write a guide to caching", audit_probability=0),
            created_at="2026-01-01T00:00:00+00:00",
        ),
        id=run_id,
        task_queue=queue,
    )
    result = await handle.result()
    elapsed = time.perf_counter() - started
    assert result.state.status == RunStatus.COMPLETED, result.state.stop
    history = await handle.fetch_history()
    return elapsed, len(history.events), result.events


async def main(runs: int, concurrency: int) -> None:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=find_binary("temporal"),
    )
    try:
        await register_search_attributes(env.client, "default")
        with tempfile.TemporaryDirectory() as data:
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            settings = Settings(LOOPS_DATA_DIR=Path(data), LOOPS_TASK_QUEUE=queue)
            async with build_worker(env.client, settings):
                await one_run(env, queue)  # warm-up: imports, first clone
                limit = asyncio.Semaphore(concurrency)

                async def bounded() -> tuple[float, int, int]:
                    async with limit:
                        return await one_run(env, queue)

                started = time.perf_counter()
                results = await asyncio.gather(*(bounded() for _ in range(runs)))
                total = time.perf_counter() - started
    finally:
        await env.shutdown()

    latencies = sorted(r[0] for r in results)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"runs                 {runs} (concurrency {concurrency})")
    print(f"wall time            {total:.2f} s")
    print(f"throughput           {runs / total:.2f} runs/s")
    print(f"run latency median   {statistics.median(latencies):.2f} s")
    print(f"run latency max      {latencies[-1]:.2f} s")
    print(f"history events/run   {statistics.mean(r[1] for r in results):.0f}")
    print(f"loop events/run      {statistics.mean(r[2] for r in results):.0f}")
    print(f"peak RSS (process)   {peak_mib:.0f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.concurrency))
