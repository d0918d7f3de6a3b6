"""The agent loop of PRODUCE and REFINE, driven by scripted turns in a plain directory."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from loopworks.agent.actions import commands_run
from loopworks.agent.loop import NUDGE, AgentOutcome, _execute, run_agent
from loopworks.agent.tools import TOOLS
from loopworks.agent.trajectory import RECORD_TEXT_CAP, from_jsonl, to_jsonl
from loopworks.checks import redaction
from loopworks.checks.redaction import REDACTED
from loopworks.deploy.local import free_port
from loopworks.llm.base import InvalidOutput, ModelCall, user_prompt
from loopworks.llm.errors import CUT_OFF
from loopworks.llm.offline.answers import closing_line, default_answer
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import ARTIFACT_PATH
from tests.unit.late_commands import LATE_COMMAND, cancelled_before_it_writes

pytestmark = pytest.mark.unit

INSTRUCTIONS = "You are the producer."
CONTEXT: dict[str, Any] = {"task": "Write the artifact."}


class ScriptedModels:
    """A ModelSource answering each request with the next of `turns`; keeps what every
    request was sent (the whole conversation so far) and what the agent offered."""

    strict_output = False

    def __init__(self, *turns: ModelResponse) -> None:
        self.turns = list(turns)
        self.seen: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> FunctionModel:
        return FunctionModel(self.respond, model_name="scripted")

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(copy.deepcopy(messages))
        self.infos.append(info)
        return self.turns.pop(0)


def calls(*uses: tuple[str, dict[str, Any]]) -> ModelResponse:
    parts: list[ModelResponsePart] = [
        ToolCallPart(name, args, tool_call_id=f"toolu_{n}") for n, (name, args) in enumerate(uses)
    ]
    return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=10))


def says(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], usage=RequestUsage(output_tokens=5))


def model_call(**overrides: Any) -> ModelCall:
    values: dict[str, Any] = {
        "role": Role.PRODUCER,
        "run_id": "run-1",
        "iteration": 2,
        "model": "claude-test",
        "context": CONTEXT,
    }
    return ModelCall(**{**values, **overrides})


async def run(
    source: Any, workspace: Path, max_turns: int = 12, step: Any = "produce", **overrides: Any
) -> AgentOutcome:
    return await run_agent(
        source, model_call(**overrides), INSTRUCTIONS, workspace, max_turns, step
    )


def tool_results(conversation: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results sent back in the last request of a conversation."""
    last = conversation[-1]
    assert isinstance(last, ModelRequest)
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


async def test_the_agent_is_offered_the_workspace_tools_and_answers_in_text(
    tmp_path: Path,
) -> None:
    model = ScriptedModels(
        calls(("write_file", {"path": ARTIFACT_PATH, "content": "#"})), says("ok")
    )
    await run(model, tmp_path)

    info = model.infos[0]
    assert [t.name for t in info.function_tools] == list(TOOLS)
    for tool in info.function_tools:
        spec = TOOLS[tool.name]
        assert tool.description == spec.description
        assert set(tool.parameters_json_schema["properties"]) == set(
            spec.input_schema["properties"]
        )
    assert info.output_tools == [] and info.allow_text_output
    assert info.instructions == INSTRUCTIONS
    # The first request is the step's inputs as the user prompt.
    [first] = model.seen[0]
    assert isinstance(first, ModelRequest)
    assert [p.content for p in first.parts] == [user_prompt(CONTEXT)]  # type: ignore[union-attr]


async def test_a_denied_call_is_a_failed_result_and_the_loop_goes_on(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ScriptedModels(
        calls(("write_file", {"path": "../escape", "content": "out"})),
        calls(("write_file", {"path": ARTIFACT_PATH, "content": "# Title\n"})),
        says("Wrote the artifact."),
    )
    outcome = await run(model, workspace)

    assert not (tmp_path / "escape").exists()
    [denied] = tool_results(model.seen[1])
    assert denied.tool_call_id == "toolu_0" and denied.tool_name == "write_file"
    assert denied.outcome == "failed"
    assert isinstance(denied.content, str)
    assert "refusing" in denied.content and ".." in denied.content
    # The model saw its own turn before the results, as the Messages API requires.
    own_turn = model.seen[1][-2]
    assert isinstance(own_turn, ModelResponse)
    assert [(p.tool_name, p.args) for p in own_turn.parts if isinstance(p, ToolCallPart)] == [
        ("write_file", {"path": "../escape", "content": "out"})
    ]
    [written] = tool_results(model.seen[2])
    assert written.outcome == "success"
    assert (workspace / ARTIFACT_PATH).read_text() == "# Title\n"
    assert outcome.final_text == "Wrote the artifact."
    assert outcome.turns == 3 and not outcome.limit_reached
    assert outcome.files_written == [ARTIFACT_PATH]
    assert outcome.repairs == []
    assert outcome.usage == TokenUsage(input_tokens=20, output_tokens=5, calls=3)
    results = [(r.tool, r.ok) for r in outcome.records if r.kind == "tool_result"]
    assert results == [("write_file", False), ("write_file", True)]


async def test_edit_file_then_end_turn(tmp_path: Path) -> None:
    (tmp_path / ARTIFACT_PATH).write_text("# Guide\n\nTBD\n")
    model = ScriptedModels(
        calls(("edit_file", {"path": ARTIFACT_PATH, "old": "TBD", "new": "## Summary\n\nDone."})),
        says("Replaced the placeholder."),
    )
    outcome = await run(model, tmp_path, step="refine")

    assert (tmp_path / ARTIFACT_PATH).read_text() == "# Guide\n\n## Summary\n\nDone.\n"
    [result] = tool_results(model.seen[1])
    assert result.outcome == "success" and "replaced 1 occurrence" in str(result.content)
    assert outcome.files_written == [ARTIFACT_PATH]
    assert outcome.turns == 2
    kinds = [(r.turn, r.kind) for r in outcome.records]
    assert kinds == [
        (0, "system"),
        (0, "user"),
        (1, "assistant"),
        (1, "tool_call"),
        (1, "tool_result"),
        (2, "assistant"),
    ]


async def test_failed_bad_and_unknown_calls_are_not_counted_as_written(tmp_path: Path) -> None:
    (tmp_path / ARTIFACT_PATH).write_text("a a\n")
    model = ScriptedModels(
        calls(("edit_file", {"path": ARTIFACT_PATH, "old": "a", "new": "b"})),
        calls(("no_such_tool", {}), ("write_file", {"path": "x.md"})),
        says("Gave up."),
    )
    outcome = await run(model, tmp_path)

    [ambiguous] = tool_results(model.seen[1])
    assert ambiguous.outcome == "failed" and "2 times" in str(ambiguous.content)
    unknown, bad = tool_results(model.seen[2])
    assert unknown.outcome != "success" and "no_such_tool" in str(unknown.content)
    assert bad.outcome != "success" and "content" in str(bad.content)
    assert outcome.files_written == []
    assert not (tmp_path / "x.md").exists()
    assert (tmp_path / ARTIFACT_PATH).read_text() == "a a\n"
    assert [r.ok for r in outcome.records if r.kind == "tool_result"] == [False, False, False]


async def test_the_turn_limit_stops_the_loop_and_is_recorded(tmp_path: Path) -> None:
    model = ScriptedModels(*[calls(("list_files", {})) for _ in range(5)])
    outcome = await run(model, tmp_path, max_turns=3)

    assert len(model.seen) == 3
    assert outcome.limit_reached and outcome.turns == 3
    assert outcome.usage.calls == 3
    last = outcome.records[-1]
    assert (last.kind, last.turn) == ("limit", 3)
    assert last.output is not None and "turn limit (3 turns)" in last.output


async def test_the_turn_limit_keeps_the_last_text(tmp_path: Path) -> None:
    said = ModelResponse(
        parts=[TextPart("Listing first."), ToolCallPart("list_files", {}, tool_call_id="t1")]
    )
    model = ScriptedModels(said, calls(("list_files", {})))
    outcome = await run(model, tmp_path, max_turns=2)
    assert outcome.limit_reached and outcome.final_text == "Listing first."


async def test_several_calls_in_one_turn_all_get_results_in_order(tmp_path: Path) -> None:
    model = ScriptedModels(
        calls(
            ("write_file", {"path": ARTIFACT_PATH, "content": "a"}),
            ("run_command", {"command": "git push origin main"}),
            ("write_file", {"path": "b.md", "content": "b"}),
        ),
        says("done"),
    )
    outcome = await run(model, tmp_path)

    results = tool_results(model.seen[1])
    assert [r.tool_call_id for r in results] == ["toolu_0", "toolu_1", "toolu_2"]
    assert [r.outcome for r in results] == ["success", "failed", "success"]
    assert outcome.files_written == [ARTIFACT_PATH, "b.md"]


async def test_trajectory_records_are_tagged_and_round_trip_as_json_lines(tmp_path: Path) -> None:
    big = "x" * (RECORD_TEXT_CAP * 3)
    model = ScriptedModels(
        calls(("write_file", {"path": ARTIFACT_PATH, "content": big})),
        says("Wrote a long one."),
    )
    outcome = await run(model, tmp_path, step="refine", iteration=3, run_id="run-7")

    records = outcome.records
    assert {(r.run_id, r.step, r.iteration) for r in records} == {("run-7", "refine", 3)}
    assert records[0].kind == "system" and records[0].input == INSTRUCTIONS
    assert records[1].kind == "user" and records[1].input == user_prompt(CONTEXT)
    # The file is whole; its record is capped.
    assert (tmp_path / ARTIFACT_PATH).read_text() == big
    call = next(r for r in records if r.kind == "tool_call")
    assert call.tool == "write_file" and call.input["path"] == ARTIFACT_PATH
    assert call.tool_use_id == "toolu_0"
    assert len(call.input["content"]) < RECORD_TEXT_CAP + 100
    assert call.input["content"].endswith(f"[{len(big) - RECORD_TEXT_CAP} more characters]")
    result = next(r for r in records if r.kind == "tool_result")
    assert (result.tool, result.tool_use_id, result.ok) == ("write_file", "toolu_0", True)
    assert records[-1].kind == "assistant" and records[-1].output == "Wrote a long one."

    text = to_jsonl(records)
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == len(records)
    for line in lines:
        parsed = json.loads(line)
        assert (parsed["step"], parsed["iteration"]) == ("refine", 3)
        assert parsed["ts"].endswith("Z") or parsed["ts"].endswith("+00:00")
    assert from_jsonl(text) == records


async def test_a_trajectory_is_redacted_as_it_is_written_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-ant-api03-" + "q" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    model = ScriptedModels(
        calls(("write_file", {"path": ARTIFACT_PATH, "content": f"# Key\n{secret}\n"})),
        says(f"Wrote down {secret}."),
    )
    outcome = await run(model, tmp_path)
    looked_up: list[int] = []
    worker_secrets = redaction.worker_secrets
    monkeypatch.setattr(
        redaction, "worker_secrets", lambda: [looked_up.append(1), worker_secrets()][1]
    )

    text = to_jsonl(outcome.records)

    # The model's words and its tool call's arguments, as written: redacted, every line
    # of the call's file in one pass (the worker's secrets looked up once).
    assert secret not in text
    said = [json.loads(line) for line in text.splitlines()]
    assert any(r["kind"] == "assistant" and r["output"] == f"Wrote down {REDACTED}." for r in said)
    assert any(r["kind"] == "tool_call" and REDACTED in r["input"]["content"] for r in said)
    assert looked_up == [1]


# --- the nudge: the deliverable is artifact.md ------------------------------------------


async def test_an_answer_without_the_artifact_is_sent_back_once(tmp_path: Path) -> None:
    model = ScriptedModels(
        says("All done!"),
        calls(("write_file", {"path": ARTIFACT_PATH, "content": "# Title\n"})),
        says("Wrote it."),
    )
    outcome = await run(model, tmp_path)

    reminder = model.seen[1][-1]
    assert isinstance(reminder, ModelRequest)
    # The model reads the reminder as a user message.
    [feedback] = reminder.parts
    assert isinstance(feedback, UserPromptPart) and NUDGE in str(feedback.content)
    assert outcome.final_text == "Wrote it." and outcome.turns == 3
    assert [NUDGE in repair for repair in outcome.repairs] == [True]
    [retry] = [r for r in outcome.records if r.kind == "retry"]
    assert retry.turn == 1 and retry.output is not None and NUDGE in retry.output


async def test_an_agent_that_never_writes_the_artifact_is_invalid_output(tmp_path: Path) -> None:
    model = ScriptedModels(says("All done!"), says("Really, all done."))
    with pytest.raises(InvalidOutput) as raised:
        await run(model, tmp_path)
    assert raised.value.role == Role.PRODUCER
    assert raised.value.detail == "it ended without writing artifact.md, even when reminded"
    assert len(model.seen) == 2


async def test_an_existing_artifact_needs_no_nudge(tmp_path: Path) -> None:
    (tmp_path / ARTIFACT_PATH).write_text("# Kept\n")
    model = ScriptedModels(says("Nothing to change."))
    outcome = await run(model, tmp_path, step="refine")
    assert outcome.turns == 1 and outcome.repairs == [] and outcome.files_written == []


async def test_a_turn_cut_off_before_any_output_is_invalid_output(tmp_path: Path) -> None:
    (tmp_path / ARTIFACT_PATH).write_text("# Kept\n")
    model = ScriptedModels(ModelResponse(parts=[], finish_reason="length"))
    with pytest.raises(InvalidOutput) as raised:
        await run(model, tmp_path, step="refine")
    assert raised.value.detail == CUT_OFF
    assert len(model.seen) == 1


async def test_a_refusal_is_invalid_output_and_not_nudged(tmp_path: Path) -> None:
    said = TextPart("I can't help with that.")
    model = ScriptedModels(ModelResponse(parts=[said], finish_reason="content_filter"))
    with pytest.raises(InvalidOutput) as raised:
        await run(model, tmp_path)
    assert raised.value.detail == "the model refused to go on: I can't help with that."
    assert len(model.seen) == 1


async def test_a_stop_cancels_the_agent_while_it_waits_for_the_model(tmp_path: Path) -> None:
    asked = asyncio.Event()

    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.set()
        await asyncio.sleep(30)
        return says("too late")

    class Slow(ScriptedModels):
        def model(self, call: ModelCall) -> FunctionModel:
            return FunctionModel(slow, model_name="slow")

    task = asyncio.create_task(run(Slow(), tmp_path))
    await asked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)


async def test_the_tool_calls_of_the_last_turn_run_before_the_limit_stops_the_loop(
    tmp_path: Path,
) -> None:
    model = ScriptedModels(calls(("write_file", {"path": ARTIFACT_PATH, "content": "# T\n"})))
    outcome = await run(model, tmp_path, max_turns=1)
    assert outcome.limit_reached and outcome.turns == 1
    assert (tmp_path / ARTIFACT_PATH).read_text() == "# T\n"
    assert [r.kind for r in outcome.records][-2:] == ["tool_result", "limit"]


# --- the offline model as an agent --------------------------------------------------------

PRODUCE_CONTEXT: dict[str, Any] = {
    "task": "Write a testing guide",
    "intent": "A guide to testing",
    "acceptance_criteria": ["has a title"],
    "rules": [],
    "plan": {"focus": "first draft", "steps": ["Draft it"]},
    "current_artifact": None,
}


async def test_the_offline_model_writes_its_draft_through_tools(tmp_path: Path) -> None:
    outcome = await run(OfflineModels(), tmp_path, context=PRODUCE_CONTEXT)

    draft = default_answer(Role.PRODUCER, PRODUCE_CONTEXT)
    artifact = (tmp_path / ARTIFACT_PATH).read_text()
    assert artifact == draft["files"][0]["content"]
    assert artifact.startswith("# Write a testing guide\n")
    assert outcome.turns == 2 and outcome.files_written == [ARTIFACT_PATH]
    assert outcome.final_text == closing_line(draft) == "first draft: initial generation"
    assert [r.tool for r in outcome.records if r.kind == "tool_call"] == ["write_file"]
    assert outcome.usage.calls == 2 and outcome.usage.input_tokens > 0


async def test_the_offline_model_follows_its_script(tmp_path: Path) -> None:
    files = [{"path": ARTIFACT_PATH, "content": "A"}, {"path": "b.md", "content": "B"}]
    script = OfflineScript.model_validate({"producer": {"1": {"files": files}}})
    outcome = await run(OfflineModels(script=script), tmp_path, context=PRODUCE_CONTEXT)
    assert outcome.files_written == [ARTIFACT_PATH, "b.md"]
    assert (tmp_path / ARTIFACT_PATH).read_text() == "A"
    # Both writes in one turn, then the closing line of a draft without a summary.
    assert outcome.turns == 2
    assert outcome.final_text == "No changes were needed."


async def test_the_offline_model_nudged_after_raw_text_writes_its_draft(tmp_path: Path) -> None:
    # One answer per request of the call: prose first, then (an entry without an answer)
    # the default draft.
    script = OfflineScript.model_validate(
        {"producer": {"1": ["I will not use tools.", {"delay_ms": 0}]}}
    )
    outcome = await run(OfflineModels(script=script), tmp_path, context=PRODUCE_CONTEXT)

    assert (tmp_path / ARTIFACT_PATH).read_text().startswith("# Write a testing guide")
    assert outcome.turns == 3 and outcome.files_written == [ARTIFACT_PATH]
    assert [NUDGE in repair for repair in outcome.repairs] == [True]
    kinds = [r.kind for r in outcome.records]
    assert kinds == [
        "system",
        "user",
        "assistant",
        "retry",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
    ]


async def test_the_offline_model_that_only_talks_is_invalid_output(tmp_path: Path) -> None:
    script = OfflineScript.model_validate({"producer": {"2": "I will not use tools."}})
    with pytest.raises(InvalidOutput, match=r"artifact\.md"):
        await run(OfflineModels(script=script), tmp_path, context=PRODUCE_CONTEXT, call_index=2)
    assert not (tmp_path / ARTIFACT_PATH).exists()


async def test_a_commands_ending_is_recorded_as_the_tool_gave_it_and_read_back(
    tmp_path: Path,
) -> None:
    """The model reads a failed command wrapped as an error, but the trajectory keeps the
    tool's own words, so the gates read each command's real ending back: a curl refused
    by a closed port exits 7, a signal and a timeout are said as such."""
    closed = free_port()
    curl = f"curl -s -m 5 http://127.0.0.1:{closed}/install.sh"
    model = ScriptedModels(
        calls(
            ("run_command", {"command": curl}),
            ("run_command", {"command": "kill -9 $$"}),
            ("run_command", {"command": "sleep 30", "timeout_seconds": 0.5}),
            ("run_command", {"command": "true"}),
            ("write_file", {"path": ARTIFACT_PATH, "content": "#"}),
        ),
        says("done"),
    )
    outcome = await run(model, tmp_path)

    failed = [p for p in tool_results(model.seen[1]) if p.outcome == "failed"]
    assert len(failed) == 3  # the model is told each failed
    results = [r for r in outcome.records if r.kind == "tool_result"]
    assert results[0].output == "exit code 7\n" and results[0].ok is False
    assert results[1].output == "killed by signal 9 (SIGKILL)\n"
    assert [(c.exit_code, c.signal, c.timed_out) for c in commands_run(outcome.records)] == [
        (7, None, False),
        (None, "SIGKILL", False),
        (None, None, True),
        (0, None, False),
    ]


class RefusingFrom:
    """A tool gate that lets calls run until the `n`th, then refuses it and every later
    one; it keeps what it was shown had been done before each call."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.asked: list[tuple[str, list[str]]] = []

    @property
    def closed(self) -> bool:
        return len(self.asked) >= self.n

    async def before(self, tool: str, arguments: dict[str, Any], done: Any) -> str | None:
        self.asked.append((tool, [r.output or "" for r in done if r.kind == "tool_result"]))
        return "refused: blocked" if self.closed else None


async def test_a_gate_that_closes_refuses_the_rest_of_the_turn_and_stops_the_agent(
    tmp_path: Path,
) -> None:
    model = ScriptedModels(
        calls(
            ("run_command", {"command": "echo one > one.txt"}),
            ("write_file", {"path": "two.txt", "content": "2"}),
            ("run_command", {"command": "echo three > three.txt"}),
        ),
        says("never asked"),
    )
    gate = RefusingFrom(2)
    outcome = await run_agent(model, model_call(), INSTRUCTIONS, tmp_path, 12, "produce", gate=gate)

    assert (tmp_path / "one.txt").exists()
    assert not (tmp_path / "two.txt").exists() and not (tmp_path / "three.txt").exists()
    # Asked before every call, shown what had run; the model was not asked again.
    assert gate.asked == [
        ("run_command", []),
        ("write_file", ["exit code 0\n"]),
        ("run_command", ["exit code 0\n", "refused: blocked"]),
    ]
    assert len(model.seen) == 1
    assert outcome.stopped_by_gate and not outcome.limit_reached
    results = [(r.tool_use_id, r.ok, r.output) for r in outcome.records if r.kind == "tool_result"]
    assert results == [
        ("toolu_0", True, "exit code 0\n"),
        ("toolu_1", False, "refused: blocked"),
        ("toolu_2", False, "refused: blocked"),
    ]
    assert outcome.records[-1].kind == "blocked"
    assert outcome.records[-1].output == "refused: blocked"


async def test_a_gate_that_fails_fails_the_step(tmp_path: Path) -> None:
    class Failing(RefusingFrom):
        async def before(self, tool: str, arguments: dict[str, Any], done: Any) -> str | None:
            raise InvalidOutput(Role.CUSTODIET, "no valid answer after a repair")

    model = ScriptedModels(calls(("run_command", {"command": "touch x"})), says("done"))
    with pytest.raises(InvalidOutput) as raised:
        await run_agent(model, model_call(), INSTRUCTIONS, tmp_path, 12, "produce", gate=Failing(9))
    assert raised.value.role == Role.CUSTODIET
    assert not (tmp_path / "x").exists()


async def test_a_step_cancelled_while_its_command_runs_ends_with_the_command(
    tmp_path: Path,
) -> None:
    """A stop cancels PRODUCE while the agent's command runs: the step must not end
    (and the run's close start in the same clone) while that command still writes there."""
    call = asyncio.create_task(_execute(tmp_path, "run_command", {"command": LATE_COMMAND}))
    assert not await cancelled_before_it_writes(call, tmp_path)
