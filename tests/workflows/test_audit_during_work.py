"""The custodiet's audit during the work (docs/loop.md#steps): before the producer's tool
calls, by chance (here forced), it audits what the iteration has done so far with the
call about to run; a BLOCK refuses that call and every later one, commits the work so far
with `.loops/blocked.md`, holds the run, and clearing it lets the producer go on.

On the time-skipping server with a real worker: the producer is a scripted model working
through the real tools in the run's clone, the custodiet the offline model's, scripted by
call; the webhook is a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopworks.agent.trajectory import from_jsonl
from loopworks.deploy.local import free_port
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.actions import BLOCKED_PATH
from loopworks.schemas.detail import Gate
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.notify import NotifyPlan, NotifyTiming, Webhook
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunRequest, RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workspace.refs import work_ref
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_loop import TESTS_RULE, TITLE_RULE, remote_file, wait_for

pytestmark = pytest.mark.workflow

BLOCK = {
    "verdict": "BLOCK",
    "reason": "the producer is writing a file the task never asked for",
    "violations": ["the pending write_file of two.txt is outside the task"],
}
CURL_BLOCK = {
    "verdict": "BLOCK",
    "reason": "the producer tried to fetch a script from a host",
    "violations": ["ran curl against 127.0.0.1 (Commands Run, exit code 7)"],
}
ARTIFACT = "# Guide\n\nHow it works.\n"
NOTE = "two.txt was asked for in a side note: go on"
Call = tuple[str, dict[str, Any]]


class ScriptedProducer:
    """A ModelSource whose producer makes `first` (its calls in one turn) on its first
    attempt and `resumed` once told of a block, then ends its turn; every other role is the
    offline model's. It keeps every producer request's context and conversation, and the
    context of every custodiet call."""

    strict_output = False

    def __init__(self, offline: OfflineModels, first: list[Call], resumed: list[Call]) -> None:
        self.offline = offline
        self.first, self.resumed = first, resumed
        self.producer_requests: list[tuple[dict[str, Any], list[ModelMessage]]] = []
        self.custodiet_contexts: list[dict[str, Any]] = []

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> Model:
        if call.role == Role.CUSTODIET:
            self.custodiet_contexts.append(call.context)
        if call.role != Role.PRODUCER:
            return self.offline.model(call)
        return FunctionModel(functools.partial(self.respond, call), model_name="producer")

    def respond(self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo) -> Any:
        self.producer_requests.append((call.context, list(messages)))
        if any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[TextPart("Done.")])
        resumed = bool(call.context.get("blocked_attempt"))
        uses = self.resumed if resumed else self.first
        prefix = "toolu_resumed_" if resumed else "toolu_first_"
        parts = [ToolCallPart(n, a, tool_call_id=f"{prefix}{i}") for i, (n, a) in enumerate(uses)]
        return ModelResponse(parts=parts)

    def attempts(self) -> list[dict[str, Any]]:
        """The context of each attempt (its first request)."""
        return [ctx for ctx, messages in self.producer_requests if len(messages) == 1]


def settings_for(harness: LoopHarness, **env: Any) -> Settings:
    return Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_LLM="offline",
        **env,
    )


def ls_tree(origin: Path, ref: str) -> list[str]:
    listed = subprocess.run(
        ["git", "--git-dir", str(origin), "ls-tree", "-r", "--name-only", ref],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


async def test_a_block_before_a_tool_call_refuses_it_and_every_later_one_until_cleared(
    harness: LoopHarness,
) -> None:
    source = ScriptedProducer(
        OfflineModels(script=OfflineScript.model_validate({"custodiet": {"2": BLOCK}})),
        first=[
            ("run_command", {"command": "echo one > one.txt"}),
            ("write_file", {"path": "two.txt", "content": "two\n"}),
            ("run_command", {"command": "echo three > three.txt"}),
        ],
        resumed=[
            ("write_file", {"path": "artifact.md", "content": ARTIFACT}),
            ("run_command", {"command": "echo four > four.txt"}),
        ],
    )
    async with build_worker(harness.env.client, settings_for(harness), models=source):
        handle = await harness.start(
            task="Write a guide",
            rules=[TITLE_RULE],
            max_iterations=1,
            tool_audit_probability=1.0,
            audit_probability=1.0,
            # Its files are no code to prove: what this run shows is the block.
            allow_unverified=True,
        )

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        state = await harness.status(handle)
        run_id = state.run_id
        work = work_ref(run_id)
        held = ls_tree(harness.origin, work)
        report = remote_file(harness.origin, work, BLOCKED_PATH)
        blocked_attempt = from_jsonl(
            remote_file(harness.origin, work, ".loops/trajectory/01-produce-blocked-1.jsonl")
        )
        asked_while_blocked = len(source.producer_requests)

        cleared = await handle.execute_update(LoopWorkflow.clear_block, NOTE)
        assert cleared.status == RunStatus.RUNNING
        final = (await handle.result()).state
        events = await harness.events(handle)

    # Held at the block, which names the step and the call it refused.
    assert state.block.during == "produce" and state.block.refused == "write_file: two.txt"
    assert state.gate is not None and state.gate.kind == Gate.BLOCK
    # The call before the block ran; the refused one and the one after it did not, and
    # the work so far is committed on the run's work ref with the write-up.
    assert "one.txt" in held and BLOCKED_PATH in held
    assert "two.txt" not in held and "three.txt" not in held
    assert report.startswith("# Blocked by the custodiet at iteration 1")
    assert "before the agent's tool call `write_file: two.txt`" in report
    assert "`echo one > one.txt` (exit code 0, produce)" in report
    assert state.block.report == report
    # The agent was stopped at once: one request, whose calls after the block were refused.
    assert asked_while_blocked == 1
    results = {r.tool_use_id: r for r in blocked_attempt if r.kind == "tool_result"}
    assert results["toolu_first_0"].ok and results["toolu_first_0"].output == "exit code 0\n"
    for refused in ("toolu_first_1", "toolu_first_2"):
        assert results[refused].ok is False
        assert results[refused].output is not None
        assert "the custodiet, the run's auditor, blocked the work" in results[refused].output
        assert BLOCK["reason"] in results[refused].output
    assert blocked_attempt[-1].kind == "blocked"

    # Cleared, the producer went on from the committed work, told what had happened.
    first, resumed = source.attempts()
    assert not first.get("blocked_attempt")
    assert "write_file: two.txt" in resumed["blocked_attempt"]
    assert BLOCK["reason"] in resumed["blocked_attempt"]
    assert resumed["operator_note"] == NOTE
    assert final.status == RunStatus.COMPLETED, final.stop
    pushed = ls_tree(harness.origin, final.branch)
    assert {"one.txt", "four.txt", "artifact.md", BLOCKED_PATH} <= set(pushed)
    assert "two.txt" not in pushed and "three.txt" not in pushed
    assert ".loops/trajectory/01-produce-blocked-1.jsonl" in pushed
    assert ".loops/trajectory/01-produce.jsonl" in pushed

    # Every audit during the work is an event naming its call; the block has its own; the
    # audit after the evaluation stays, naming none.
    audits = [e.payload for e in events if e.event.value == "audit_verdict"]
    assert [(a.verdict, a.before_call) for a in audits] == [
        ("OK", "run_command: echo one > one.txt"),
        ("BLOCK", "write_file: two.txt"),
        ("OK", "write_file: artifact.md"),
        ("OK", "run_command: echo four > four.txt"),
        ("OK", ""),
    ]
    assert audits[1].report == report and audits[1].report_commit
    [blocked_event] = [e for e in events if e.event.value == "blocked"]
    assert blocked_event.step == "PRODUCE_PREPARE"
    assert blocked_event.payload.during == "produce"
    assert blocked_event.payload.refused == "write_file: two.txt"
    assert blocked_event.payload.report == report
    flow = names(events)
    assert flow.index("blocked") < flow.index("block_cleared") < flow.index("artifact_created")
    assert flow.count("artifact_created") == 1
    # The custodiet was asked once for each audit, its call numbers counted by the run.
    contexts = source.custodiet_contexts
    assert len(contexts) == 5
    assert contexts[1]["pending_call"] == {
        "step": "produce",
        "tool": "write_file",
        "input": {"path": "two.txt", "content": "two\n"},
    }
    # The audits after the block see its commands again, and what the person said of them.
    assert [c.get("operator_note") for c in contexts] == [None, None, NOTE, NOTE, NOTE]
    assert "echo one > one.txt" in json.dumps(contexts[4]["commands_run"])
    assert contexts[4].get("pending_call") is None


class Receiver(BaseHTTPRequestHandler):
    """A webhook on 127.0.0.1 that answers 200 and keeps each body it was sent."""

    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append(json.loads(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    port = free_port()
    bodies: list[dict[str, Any]] = []
    handler = type("OwnReceiver", (Receiver,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield port, bodies
    finally:
        server.shutdown()
        server.server_close()


async def test_a_refused_curls_exit_code_reaches_the_custodiet_the_write_up_and_a_webhook(
    harness: LoopHarness, receiver: tuple[int, list[dict[str, Any]]]
) -> None:
    """A curl to a port nothing listens on exits 7: the custodiet is shown that, the
    write-up says it, and the block is a `blocked` event a webhook receives."""
    port, bodies = receiver
    curl = f"curl -s -m 5 http://127.0.0.1:{free_port()}/install.sh"
    source = ScriptedProducer(
        OfflineModels(script=OfflineScript.model_validate({"custodiet": {"2": CURL_BLOCK}})),
        first=[
            ("run_command", {"command": curl}),
            ("write_file", {"path": "artifact.md", "content": ARTIFACT}),
        ],
        resumed=[("write_file", {"path": "artifact.md", "content": ARTIFACT})],
    )
    settings = settings_for(
        harness,
        LOOPS_NOTIFY_SECRET="a-test-notify-secret-of-some-length",
        LOOPS_ALLOWED_ORIGINS=f"127.0.0.1:{port}",
        LOOPS_ALLOWED_SCHEMES="https,ssh,file,http",
    )
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    params = LoopInput(
        run_id=run_id,
        alias="test",
        request=RunRequest(
            task="Write a guide",
            rules=[TITLE_RULE],
            max_iterations=1,
            audit_probability=0.0,
            tool_audit_probability=1.0,
            playbook=False,
        ),
        created_at="2026-01-01T00:00:00+00:00",
        notify=NotifyPlan(
            webhooks=[Webhook(url=f"http://127.0.0.1:{port}/hook")],
            timing=NotifyTiming(attempt_seconds=5, retry_seconds=1, give_up_seconds=60),
        ),
    )
    async with build_worker(harness.env.client, settings, models=source):
        handle = await harness.env.client.start_workflow(
            LoopWorkflow.run, params, id=run_id, task_queue=harness.task_queue
        )

        async def notified() -> bool:
            return any(b["event"] == "blocked" for b in bodies)

        await wait_for(notified)
        report = remote_file(harness.origin, work_ref(run_id), BLOCKED_PATH)
        await handle.execute_update(LoopWorkflow.clear_block, "the curl was a probe of mine")
        final = (await handle.result()).state
        events = await harness.events(handle)

    # The custodiet's input: the curl, with the code it failed with.
    seen = source.custodiet_contexts[1]
    assert seen["commands_run"] == [
        {
            "step": "produce",
            "command": curl,
            "exit_code": 7,
            "timed_out": False,
            "signal": None,
            "note": "",
        }
    ]
    assert seen["pending_call"]["tool"] == "write_file"
    # The write-up: the same, and the call the block refused.
    assert f"`{curl}` (exit code 7, produce)" in report
    assert f"commands that failed: `{curl}`" in report
    # The `blocked` event carries it, and the webhook was sent it with the block's reason.
    [blocked_event] = [e for e in events if e.event.value == "blocked"]
    assert blocked_event.payload.report == report
    [body] = [b for b in bodies if b["event"] == "blocked"]
    assert body["id"] == run_id and body["status"] == "blocked"
    assert body["message"] == CURL_BLOCK["reason"] and body["report"] == report
    assert body["next"]["command"] == f"loops clear-block {run_id} --note '...'"
    assert final.status == RunStatus.COMPLETED, final.stop


async def test_a_block_during_refine_holds_the_run_and_the_refiner_goes_on_once_cleared(
    harness: LoopHarness,
) -> None:
    """The offline producer writes its draft with one call (the custodiet's first audit),
    misses the Tests section, and the refiner's write is the second audit: a BLOCK. The
    chance is the worker's setting, the run naming none."""
    refine_block = {"verdict": "BLOCK", "reason": "the refiner drifted", "violations": ["x"]}
    script = {"custodiet": {"2": refine_block}}
    async with harness.worker(script=script, LOOPS_TOOL_AUDIT_PROBABILITY=1.0):
        handle = await harness.start(task="Write a testing guide", rules=[TITLE_RULE, TESTS_RULE])

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        state = await harness.status(handle)
        await handle.execute_update(LoopWorkflow.clear_block, "fine")
        final = (await handle.result()).state
        events = await harness.events(handle)

    assert (state.block.during, state.block.refused) == ("refine", "write_file: artifact.md")
    assert state.current_step.value == "REFINE"
    assert final.status == RunStatus.COMPLETED, final.stop
    flow = names(events)
    assert flow.count("refinement_done") == 1
    assert flow.index("blocked") < flow.index("block_cleared") < flow.index("refinement_done")
    [blocked_event] = [e for e in events if e.event.value == "blocked"]
    assert blocked_event.payload.during == "refine"
    pushed = ls_tree(harness.origin, final.branch)
    assert ".loops/trajectory/01-refine-blocked-1.jsonl" in pushed
    assert ".loops/trajectory/01-refine.jsonl" in pushed
