"""The QA verifier's agent: the loop's read-only tools, ending with the forced answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolReturnPart

from loopworks.agent.loop import READ_ONLY_TOOLS, run_answering_agent
from loopworks.agent.trajectory import RECORD_TEXT_CAP
from loopworks.checks.redaction import REDACTED
from loopworks.llm.base import InvalidOutput
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.schemas.actions import CommandRun
from loopworks.schemas.roles import QAReport, QAVerdict, Role
from tests.unit.test_agent_loop import INSTRUCTIONS, ScriptedModels, calls, model_call, says

pytestmark = pytest.mark.unit

ISSUES = {
    "verdict": "ISSUES",
    "issues": [{"rule_id": "qa", "problem": "p", "fix": "f"}],
    "summary": "the tests fail",
}


async def answer(source: ScriptedModels, workspace: Path, max_turns: int = 6) -> Any:
    return await run_answering_agent(
        source,
        model_call(role=Role.QA_VERIFIER),
        INSTRUCTIONS,
        workspace,
        max_turns,
        "qa",
        QAReport,
    )


async def test_a_write_is_refused_with_the_tools_it_has_and_the_answer_is_structured(
    tmp_path: Path,
) -> None:
    (tmp_path / "code.py").write_text("x = 1\n")
    model = ScriptedModels(
        calls(("write_file", {"path": "code.py", "content": "x = 2\n"})),
        calls(("edit_file", {"path": "code.py", "old": "1", "new": "2"})),
        calls(("read_file", {"path": "code.py"})),
        calls((ANSWER_TOOL, ISSUES)),
    )
    outcome = await answer(model, tmp_path)

    offered = {tool.name for tool in model.infos[0].function_tools}
    assert offered == set(READ_ONLY_TOOLS)
    assert [tool.name for tool in model.infos[0].output_tools] == [ANSWER_TOOL]
    assert not model.infos[0].allow_text_output
    # Neither writing tool exists for it: the call comes back failed, naming the tools it
    # has, so the model can go on reading; the file is untouched.
    for turn, tool in ((1, "write_file"), (2, "edit_file")):
        last = model.seen[turn][-1]
        assert isinstance(last, ModelRequest)
        (result,) = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        said = result.model_response_str()
        assert result.outcome != "success"
        assert f"Unknown tool name: '{tool}'" in said
        assert all(name in said for name in READ_ONLY_TOOLS)
    assert (tmp_path / "code.py").read_text() == "x = 1\n"
    assert outcome.answer.verdict == QAVerdict.ISSUES
    assert outcome.answer.summary == "the tests fail"
    assert outcome.turns == 4
    assert {r.step for r in outcome.records} == {"qa"}
    assert ("tool_call", "read_file") in {(r.kind, r.tool) for r in outcome.records}
    assert outcome.repairs == []


async def test_an_invalid_answer_is_repaired_once_then_invalid_output(tmp_path: Path) -> None:
    bad = calls((ANSWER_TOOL, {"verdict": "MAYBE"}))
    repaired = await answer(ScriptedModels(bad, calls((ANSWER_TOOL, ISSUES))), tmp_path)
    assert repaired.answer.verdict == QAVerdict.ISSUES
    assert len(repaired.repairs) == 1 and "verdict" in repaired.repairs[0]

    with pytest.raises(InvalidOutput):
        await answer(ScriptedModels(bad, bad, bad), tmp_path)


async def test_no_answer_within_the_turns_is_invalid_output(tmp_path: Path) -> None:
    reading = calls(("list_files", {}))
    with pytest.raises(InvalidOutput, match="within 2 turns"):
        await answer(ScriptedModels(reading, reading, reading), tmp_path, max_turns=2)


async def test_prose_is_sent_back_to_use_the_answer_tool(tmp_path: Path) -> None:
    outcome = await answer(
        ScriptedModels(says("Looks fine."), calls((ANSWER_TOOL, ISSUES))), tmp_path
    )
    assert outcome.answer.verdict == QAVerdict.ISSUES


async def test_a_refusal_ends_the_run_at_once(tmp_path: Path) -> None:
    # As a single-shot answer's: asked again, a model refuses again.
    refused = ModelResponse(
        parts=[TextPart("I won't review this.")],
        finish_reason="content_filter",
        provider_details={"finish_reason": "refusal"},
    )
    model = ScriptedModels(refused, calls((ANSWER_TOOL, ISSUES)))
    with pytest.raises(InvalidOutput, match="the model refused to answer"):
        await answer(model, tmp_path)
    assert len(model.seen) == 1


async def test_the_commands_it_ran_are_kept_whole_and_redacted_with_how_they_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verifier's evidence is checked against the commands it ran exactly as it ran
    them: an inline script longer than a trajectory keeps of a call's arguments is kept
    whole by the tool, with its exit code, and redacted as the trajectory is."""
    secret = "sk-ant-api03-" + "q" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    script = f"echo checked # {secret} " + "x" * RECORD_TEXT_CAP
    model = ScriptedModels(
        calls(("run_command", {"command": script}), ("run_command", {"command": "exit 3"})),
        calls((ANSWER_TOOL, ISSUES)),
    )
    outcome = await answer(model, tmp_path)

    whole = script.replace(secret, REDACTED)
    assert outcome.commands == [
        CommandRun(step="qa", command=whole, exit_code=0),
        CommandRun(step="qa", command="exit 3", exit_code=3),
    ]
    # What its trajectory keeps of the same call is cut.
    [first, _] = [r for r in outcome.records if r.kind == "tool_call" and r.tool == "run_command"]
    assert first.input["command"] != script and len(first.input["command"]) < len(script)
