"""Benchmark: how fast one worker drives offline runs end to end, and what it costs.

    .venv/bin/python scripts/bench.py [--runs 10] [--concurrency 5] [--long-iterations 20]
                                      [--latency-ms 0] [--server-db memory|file]
                                      [--origin own|repository]

Runs on the Temporal dev server (real time: the time-skipping server would skip past
activity timeouts under load) with a real worker, real git and the offline model, and
prints figures (no pass/fail: targets belong here, not in timed tests). The server keeps
its SQLite database in memory, as the figures have always been taken; `--server-db file`
keeps it in a file, as `loops up` runs it (deploy/local.py). Runs push to the service's
own origin, the embedded default; `--origin repository` runs them on a repository of the
user's (a bare one on this machine), where what a run records is pushed, as on any origin
the service did not create.

Model figures: calls and tokens come from each finished run's status `usage`. The
offline model's token counts are pydantic-ai's estimates (words of the messages, plus 50
a request) and leave out what a real model also reads on every request: the agent's
prompt and the tool schemas. The bench counts those apart, at about 4 characters a
token, and counts each role's requests in this process.

Cost figures: CPU seconds per run of the worker (this process, which also runs the
client: a small share) and of its child processes (git, command checks), apart from the
Temporal dev server's; git processes per run by subcommand, counted where the worker
starts them (workspace/runner.py), and the git plumbing it asks in-process instead
(workspace/objects.py), by the git command each stands for. `--latency-ms N` makes each
model request wait N ms (waiting costs no CPU, as with a real model); the slowdown is the
median run of the batch against one run alone on the same worker. On a shared machine
every figure is noisy.

The worker takes its settings from the environment like any worker:
`LOOPS_WORKFLOW_SANDBOX=true` measures it with Temporal's workflow sandbox on (a worker
runs workflows outside it by default), and the first lines of figures say which.

Machine figures: the CPU a fixed piece of work costs now (a `git --version` spawn, a
loop of pydantic round trips). A shared machine's speed drifts; compare CPU figures
taken at different times only together with these.

Payload figures: one long run, scripted to keep failing until its iteration limit and
to continue-as-new every few iterations, shows the largest payload any of its histories
holds (inputs, results, the memory continue-as-new carries) against Temporal's limits.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import operator
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.histories import (
    activities_run,
    activity_batches,
    continued_inputs,
    executions,
    payload_sizes,
)
from loopworks.deploy.local import SQLITE_PRAGMAS, free_port
from loopworks.deploy.search_attributes import register_search_attributes
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.events import EventName
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunRequest, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import HISTORY_PATH
from loopworks.service.connect import connect
from loopworks.worker.build import build_worker, settle_heap
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.runner import GIT_IN_PROCESS, GIT_SPAWNS

# A sibling script, not a module of the package (python puts scripts/ on the path).
from bench_floor import floor_worker, run_floor  # type: ignore[import-not-found]  # isort: skip

# For the input the offline estimate leaves out: about 4 characters a token.
CHARS_PER_TOKEN = 4

# The long run's rules: a title it gets, a token it never writes, and a check that holds
# on odd iterations only, so its score moves and it never stops for stagnation.
FAILING_RULES = [
    {
        "id": "has-title",
        "description": "A title",
        "severity": "fail",
        "check": {"kind": "pattern", "pattern": "^# \\S"},
    },
    {
        "id": "impossible",
        "description": "A token nobody writes",
        "severity": "fail",
        "check": {"kind": "pattern", "pattern": "XYZZY-PLUGH"},
    },
    {
        "id": "alternating",
        "description": "Holds on odd iterations",
        "severity": "fail",
        "check": {
            "kind": "command",
            "command": "test $(( $(ls .loops/trajectory/*-produce.jsonl | wc -l) % 2 )) -eq 1",
        },
    },
]
# Continue-as-new after this many history events: every few iterations of the long run.
LONG_RUN_CONTINUE_AFTER = 200


class CountingModels(OfflineModels):
    """The offline model, counting by role the step attempts that ask for a model
    (`model`) and the requests made to it (`respond`: a repair or an agent's next turn is
    one more), and the characters of prompt and tool schemas each request carries."""

    def __init__(self, latency: float = 0.0) -> None:
        super().__init__()
        self.latency = latency
        self.attempts: Counter[Role] = Counter()
        self.requests: Counter[Role] = Counter()
        self.prompt_chars = 0

    def reset(self) -> None:
        self.attempts.clear()
        self.requests.clear()
        self.prompt_chars = 0

    def model(self, call: ModelCall) -> FunctionModel:
        self.attempts[call.role] += 1
        return super().model(call)

    async def respond(
        self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        self.requests[call.role] += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        tools = [*info.function_tools, *info.output_tools]
        self.prompt_chars += len(info.instructions or "") + sum(
            len(tool.description or "") + len(json.dumps(tool.parameters_json_schema))
            for tool in tools
        )
        return await super().respond(call, messages, info)


class CollectorClock:
    """The thread CPU this process's garbage collector took, pause by pause (a collection
    starts and ends in one thread, holding the GIL)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started


COLLECTOR = CollectorClock()
gc.callbacks.append(COLLECTOR)


# How long the server's counters must stay still to count as settled, and how many such
# looks at most (Costs.settled).
SETTLE_SECONDS = 1.0
SETTLE_CHECKS = 10


@dataclass(frozen=True)
class Costs:
    """CPU seconds so far of this process, its reaped children and the dev server, the
    git processes the worker started and the git plumbing it asked in-process, each by
    the git command."""

    worker: float
    collecting: float  # of the worker's: its garbage collector's
    children: float
    server: float
    git: Counter[str]
    git_in_process: Counter[str]
    # What the dev server was asked and wrote: counts, steadier than its CPU seconds.
    server_requests: Counter[str]

    @classmethod
    async def settled(cls, server_pid: int | None, metrics_url: str) -> Costs:
        """`now`, once the dev server has nothing left to do: its request counters publish
        a batch's last calls up to a second late, and it finishes a closed workflow's
        tasks after the workflow's result is out. Read at once, the end of one batch
        (the floor's, the runs') is counted with the next."""
        counted = _server_requests(metrics_url)
        for _ in range(SETTLE_CHECKS):
            await asyncio.sleep(SETTLE_SECONDS)
            counted, previous = _server_requests(metrics_url), counted
            if counted == previous:
                break
        return cls.now(server_pid, metrics_url)

    @classmethod
    def now(cls, server_pid: int | None, metrics_url: str) -> Costs:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            worker=own.ru_utime + own.ru_stime,
            collecting=COLLECTOR.seconds,
            children=children.ru_utime + children.ru_stime,
            server=_process_cpu(server_pid) if server_pid else 0.0,
            git=GIT_SPAWNS.snapshot(),
            git_in_process=GIT_IN_PROCESS.snapshot(),
            server_requests=_server_requests(metrics_url),
        )

    def __sub__(self, other: Costs) -> Costs:
        return self._with(other, operator.sub)

    def __add__(self, other: Costs) -> Costs:
        return self._with(other, operator.add)

    def _with(self, other: Costs, op: Callable[[Any, Any], Any]) -> Costs:
        """Each figure of this and `other` combined by `op`."""
        return Costs(
            **{f.name: op(getattr(self, f.name), getattr(other, f.name)) for f in fields(Costs)}
        )


# The dev server's request counters: the calls clients made of its frontend, and its
# history service's writes of a workflow's state (one database transaction each).
_FRONTEND_CALL = re.compile(r'^service_requests\{.*service_name="frontend".*\} (\S+)$')
_STATE_WRITE = re.compile(
    r'^persistence_requests\{.*operation="(?:Create|Update)WorkflowExecution".*'
    r'service_name="history".*\} (\S+)$'
)


def _server_requests(metrics_url: str) -> Counter[str]:
    """The dev server's request counters now, from its Prometheus endpoint."""
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        for name, pattern in (("calls", _FRONTEND_CALL), ("state writes", _STATE_WRITE)):
            matched = pattern.match(line)
            if matched:
                counts[name] += int(float(matched.group(1)))
    return counts


def _process_cpu(pid: int) -> float:
    """utime + stime (and its waited-for children's) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 14-17 of proc(5), counted from 1 with pid and comm: here from 0 after comm.
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _server_pid(binary: Path) -> int | None:
    """The dev server: the child process of this one running the temporal binary."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and Path(exe) == binary.resolve():
            return int(entry.name)
    return None


@dataclass(frozen=True)
class MachineSpeed:
    """CPU a fixed piece of work costs on this machine now: on a shared machine the same
    run costs more or less from one minute to the next, so figures taken at different
    times compare only next to these."""

    git_spawn_ms: float
    python_ms: float

    @classmethod
    def measure(cls, spawns: int = 100) -> MachineSpeed:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(spawns):
            subprocess.run(["git", "--version"], capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spawned = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        started = time.process_time()
        for n in range(20_000):
            RunRequest.model_validate_json(RunRequest(task=f"task {n}").model_dump_json())
        return cls(git_spawn_ms=spawned / spawns * 1000, python_ms=time.process_time() - started)


@dataclass
class RunFigures:
    run_id: str
    latency: float
    loop_events: int
    iterations: int
    calls: int
    input_tokens: int
    output_tokens: int
    repairs: int
    qa_commands: int = 0  # the commands the QA verifier's agent ran


async def one_run(client: Client, queue: str, repo: str | None = None) -> RunFigures:
    """One run, on `repo` (None: the service's own origin), to its end."""
    run_id = f"bench-{uuid.uuid4().hex[:10]}"
    started = time.perf_counter()
    handle = await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="bench",
            request=RunRequest(
                task="Write a guide to caching",
                repo=repo,
                audit_probability=0,
                tool_audit_probability=0,
            ),
            created_at="2026-01-01T00:00:00+00:00",
        ),
        id=run_id,
        task_queue=queue,
    )
    result = await handle.result()
    elapsed = time.perf_counter() - started
    state = result.state  # the run's final status, as `GET /runs/{id}` shows it
    assert state.status == RunStatus.COMPLETED, state.stop
    return RunFigures(
        run_id=run_id,
        latency=elapsed,
        loop_events=result.events,
        iterations=state.iteration,
        calls=state.usage.calls,
        input_tokens=state.usage.input_tokens,
        output_tokens=state.usage.output_tokens,
        repairs=sum(e.event == EventName.OUTPUT_REPAIRED for e in result.log),
        qa_commands=sum(
            getattr(e.payload, "commands", 0) for e in result.log if e.event == EventName.QA_VERDICT
        ),
    )


@dataclass
class HistoryFigures:
    events: int
    size: int  # bytes of its events as the server stores them (payloads as encoded)
    activities: Counter[str]  # activities run, by type
    local: Counter[str]  # those of them run as local activities


async def read_history(client: Client, run_id: str) -> HistoryFigures:
    history = await client.get_workflow_handle(run_id).fetch_history()
    ran = activities_run(history)
    return HistoryFigures(
        events=len(history.events),
        size=sum(event.ByteSize() for event in history.events),
        activities=Counter(name for name, _ in ran),
        local=Counter(name for name, local in ran if local),
    )


@dataclass
class LongRunFigures:
    iterations: int
    executions: int
    events: int
    logged_events: int
    largest_payload: int
    largest_carry: int


async def long_run(client: Client, queue: str, iterations: int, origin: Path) -> LongRunFigures:
    run_id = f"bench-long-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        LoopWorkflow.run,
        LoopInput(
            run_id=run_id,
            alias="bench-long",
            request=RunRequest(
                task="Write a guide to caching",
                rules=FAILING_RULES,
                max_iterations=iterations,
                audit_probability=0,
                tool_audit_probability=0,
            ),
            created_at="2026-01-01T00:00:00+00:00",
            continue_as_new_after_events=LONG_RUN_CONTINUE_AFTER,
        ),
        id=run_id,
        task_queue=queue,
    )
    result = await handle.result()
    histories = await executions(client, run_id)
    carried = [
        len(json.dumps(c, separators=(",", ":"))) for h in histories for c in continued_inputs(h)
    ]
    shown = await asyncio.create_subprocess_exec(
        "git",
        "--git-dir",
        str(origin),
        "show",
        f"{result.state.branch}:{HISTORY_PATH}",
        stdout=asyncio.subprocess.PIPE,
    )
    logged, _ = await shown.communicate()
    return LongRunFigures(
        iterations=result.state.iteration,
        executions=len(histories),
        events=result.events,
        logged_events=len(logged.splitlines()),
        largest_payload=max(size for h in histories for size in payload_sizes(h)),
        largest_carry=max(carried, default=0),
    )


def user_repository(root: Path) -> Path:
    """A bare repository with one commit, as a user's repository the service did not
    create: a run on it pushes what it writes there (workspace/call_records.py)."""
    bare, scratch = root / "project.git", root / "scratch"
    name, email = "bench", "bench@example.com"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }

    def git(*args: str) -> None:
        subprocess.run(["git", *args], env=env, check=True, capture_output=True)

    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("init", "--quiet", "--initial-branch=main", str(scratch))
    (scratch / "README.md").write_text("# a project\n")
    git("-C", str(scratch), "add", "README.md")
    git("-C", str(scratch), "-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "Start")
    git("-C", str(scratch), "push", "--quiet", str(bare), "HEAD:refs/heads/main")
    return bare


async def main(
    runs: int,
    concurrency: int,
    long_iterations: int,
    latency_ms: int,
    server_db: str,
    origin: str = "own",
) -> None:
    speed = MachineSpeed.measure()
    models = CountingModels(latency_ms / 1000)
    binary = find_binary("temporal")
    database = tempfile.TemporaryDirectory()
    projects = tempfile.TemporaryDirectory()  # the user's repository, with --origin repository
    on_disk = ["--db-filename", f"{database.name}/temporal.db", *SQLITE_PRAGMAS]
    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=binary,
        dev_server_extra_args=[
            "--metrics-port",
            str(metrics_port),
            *(on_disk if server_db == "file" else []),
        ],
    )
    server_pid = _server_pid(Path(binary))
    try:
        await register_search_attributes(env.client, "default")
        with tempfile.TemporaryDirectory() as data:
            # Traversable (not listable) by others: with the sandbox on, a worker running
            # as root runs agent commands as an unprivileged uid, which must reach the
            # workspaces inside (worker/sandboxing.py refuses to start otherwise).
            os.chmod(data, 0o711)
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            repo = str(user_repository(Path(projects.name))) if origin == "repository" else None
            settings = Settings(
                LOOPS_DATA_DIR=Path(data),
                LOOPS_TASK_QUEUE=queue,
                TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
                # A user's repository on this machine is admitted as a deployment admits it.
                LOOPS_LOCAL_ROOTS=projects.name if repo else None,
            )
            # Connected as the worker and the API connect (compression included).
            client = await connect(settings, interceptors=[])
            worker = build_worker(client, settings, models=models)
            settle_heap()  # as `python -m loopworks.worker` does before it polls
            floor_queue = f"{queue}-floor"
            async with worker, floor_worker(client, floor_queue, settings.workflow_sandbox):
                await one_run(client, queue, repo)  # warm-up: imports, first clone
                alone = await one_run(client, queue, repo)
                models.reset()
                # The floor: the same activity shape with nothing in it, same server, same
                # process, same concurrency (scripts/bench_floor.py).
                shape = activity_batches(
                    await client.get_workflow_handle(alone.run_id).fetch_history()
                )
                await run_floor(client, floor_queue, shape, 1, 1)  # warm-up
                # The floor just before the runs and just after, both counted: the machine's
                # speed drifts within the minute, and so meets the runs and the floor alike.
                # Each batch is read from the settled end of the one before it.
                floor_start = await Costs.settled(server_pid, metrics_url)
                await run_floor(client, floor_queue, shape, runs, concurrency)
                before = await Costs.settled(server_pid, metrics_url)
                limit = asyncio.Semaphore(concurrency)

                async def bounded() -> RunFigures:
                    async with limit:
                        return await one_run(client, queue, repo)

                started = time.perf_counter()
                results = await asyncio.gather(*(bounded() for _ in range(runs)))
                total = time.perf_counter() - started
                after = await Costs.settled(server_pid, metrics_url)
                costs = after - before
                await run_floor(client, floor_queue, shape, runs, concurrency)
                floor = (before - floor_start) + (
                    await Costs.settled(server_pid, metrics_url) - after
                )
                # Read after the batch: reading a history is the benchmark's work, not the
                # service's, and must not slow down or be counted with the runs.
                histories = [await read_history(client, r.run_id) for r in results]
                # The model figures are the short runs'; the long run only adds payloads.
                counted = (models.requests.copy(), models.attempts.copy(), models.prompt_chars)
                long = (
                    await long_run(client, queue, long_iterations, settings.default_origin)
                    if long_iterations
                    else None
                )
                models.requests, models.attempts, models.prompt_chars = counted
    finally:
        await env.shutdown()
        database.cleanup()
        projects.cleanup()

    def per_run(amount: float) -> float:
        return amount / runs

    latencies = sorted(r.latency for r in results)
    iterations = sum(r.iterations for r in results)
    calls = sum(r.calls for r in results)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    unseen_tokens = models.prompt_chars / CHARS_PER_TOKEN
    print(
        f"machine now          git spawn {speed.git_spawn_ms:.2f} ms CPU,"
        f" reference Python work {speed.python_ms * 1000:.0f} ms"
    )
    guard = "on (LOOPS_WORKFLOW_SANDBOX=true)" if settings.workflow_sandbox else "off"
    print(f"workflow sandbox     {guard}")
    where = "a repository of the user's (--origin repository)" if repo else "the service's own"
    print(f"runs' origin         {where}")
    print(f"gRPC compression     {settings.temporal_compression} (LOOPS_TEMPORAL_COMPRESSION)")
    print(
        f"server database      {server_db}"
        + (f" {' '.join(SQLITE_PRAGMAS)}" if server_db == "file" else "")
    )
    print(f"runs                 {runs} (concurrency {concurrency})")
    print(f"wall time            {total:.2f} s")
    print(f"throughput           {runs / total:.2f} runs/s")
    print(f"run latency median   {statistics.median(latencies):.2f} s")
    print(f"run latency max      {latencies[-1]:.2f} s")
    print(f"history events/run   {statistics.mean(h.events for h in histories):.0f}")
    print(f"history size/run     {statistics.mean(h.size for h in histories) / 1024:.0f} KiB")
    activities = sum((h.activities for h in histories), Counter[str]())
    local = sum((h.local for h in histories), Counter[str]()).total() / runs
    print(
        f"activities/run       {activities.total() / runs:.1f} ({local:.1f} of them local;"
        " the playbook's writer apart)"
    )
    by_type = ", ".join(f"{name} {count / runs:.1f}" for name, count in activities.most_common())
    print(f"  by type            {by_type}")
    print(f"loop events/run      {statistics.mean(r.loop_events for r in results):.0f}")
    print(f"peak RSS (process)   {peak_mib:.0f} MiB")
    print()
    median = statistics.median(latencies)
    print(f"model latency        {latency_ms} ms a request")
    print(f"one run alone        {alone.latency:.2f} s")
    print(f"slowdown (median)    {median / alone.latency:.2f}x one run alone")
    cpu = costs.worker + costs.children + costs.server
    print(f"CPU/run              {per_run(cpu):.2f} s (all below; noisy: shared machine)")
    print(f"  worker             {per_run(costs.worker):.2f} s (this process)")
    print(f"    garbage collector{per_run(costs.collecting):7.3f} s (of the worker's)")
    print(f"  worker's children  {per_run(costs.children):.2f} s (git, command checks)")
    server = f"{per_run(costs.server):.2f} s" if server_pid else "not found"
    print(f"  temporal server    {server}")

    def per_floor_run(amount: float) -> float:
        return amount / (2 * runs)  # two batches of `runs`: before the runs and after

    floor_cpu = per_floor_run(floor.worker + floor.children + floor.server)
    print(
        f"floor CPU/run        {floor_cpu:.2f} s (the same {sum(map(len, shape))} activities"
        f" in {len(shape)} batches doing nothing: scripts/bench_floor.py)"
    )
    print(
        f"  worker, server     {per_floor_run(floor.worker):.2f} s,"
        f" {per_floor_run(floor.server):.2f} s (before the runs and after)"
    )
    print(f"CPU/run vs floor     {per_run(cpu) / floor_cpu:.2f}x")
    asked = costs.server_requests
    print(
        f"server requests/run  {per_run(asked['calls']):.1f} calls,"
        f" {per_run(asked['state writes']):.1f} state writes (counts: steadier than CPU)"
    )
    print(f"git processes/run    {per_run(costs.git.total()):.1f}")
    shown = ", ".join(f"{cmd} {per_run(n):.1f}" for cmd, n in costs.git.most_common())
    print(f"  by subcommand      {shown}")
    asked = costs.git_in_process
    print(f"git in-process/run   {per_run(asked.total()):.1f} (plumbing through libgit2)")
    shown = ", ".join(f"{cmd} {per_run(n):.1f}" for cmd, n in asked.most_common())
    print(f"  by command         {shown}")
    print()
    print(f"iterations/run       {per_run(iterations):.1f}")
    print(f"model calls/run      {per_run(calls):.1f}")
    print(f"model calls/iter     {calls / max(iterations, 1):.1f}")
    print(f"repairs/run          {per_run(sum(r.repairs for r in results)):.1f}")
    # QA's model calls are its row in the table below.
    print(f"QA commands/run      {per_run(sum(r.qa_commands for r in results)):.1f}")
    print(f"input tokens/run     {per_run(sum(r.input_tokens for r in results)):.0f} (estimate)")
    print(f"output tokens/run    {per_run(sum(r.output_tokens for r in results)):.0f} (estimate)")
    print(f"prompts+tools/run    {per_run(unseen_tokens):.0f} tokens more input (not in usage)")
    print()
    print("per role, per run    requests  step attempts")
    for role in Role:
        if models.requests[role] or models.attempts[role]:
            requests, attempts = per_run(models.requests[role]), per_run(models.attempts[role])
            print(f"  {role.value:<18} {requests:>8.1f}  {attempts:>13.1f}")
    requests, attempts = per_run(models.requests.total()), per_run(models.attempts.total())
    print(f"  {'all':<18} {requests:>8.1f}  {attempts:>13.1f}")
    if long is None:  # --long-iterations 0
        return
    print()
    print(
        f"long run             {long.iterations} iterations, failing, {long.executions} executions"
    )
    print(f"events               {long.events} ({long.logged_events} in git's history.jsonl)")
    print(f"largest payload      {long.largest_payload / 1024:.1f} KiB (any input or result)")
    print(f"largest carry        {long.largest_carry / 1024:.1f} KiB (continue-as-new input)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument(
        "--long-iterations", type=int, default=20, help="0: no long run (no payload figures)"
    )
    parser.add_argument("--latency-ms", type=int, default=0, help="each model request waits")
    parser.add_argument(
        "--server-db", choices=["memory", "file"], default="memory", help="the dev server's SQLite"
    )
    parser.add_argument(
        "--origin",
        choices=["own", "repository"],
        default="own",
        help="where runs push: the service's own origin, or a user's repository",
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.runs,
            args.concurrency,
            args.long_iterations,
            args.latency_ms,
            args.server_db,
            args.origin,
        )
    )
