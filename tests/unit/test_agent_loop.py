"""The agent loop of PRODUCE and REFINE, driven by scripted turns in a plain directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from activities.agent_loop import (
    RECORD_TEXT_CAP,
    AgentOutcome,
    from_jsonl,
    run_agent,
    to_jsonl,
)
from activities.llm.base import Conversation, TextBlock, ToolUse, Turn
from activities.llm.offline import OfflineModels, OfflineScript
from activities.tools import tool_definitions
from schemas.roles import Role
from schemas.run import TokenUsage
from schemas.steps import ARTIFACT_PATH

pytestmark = pytest.mark.unit


class ScriptedModel:
    """Answers each turn with the next of `turns`; keeps every conversation it was sent."""

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.seen: list[Conversation] = []

    async def answer(self, call: Any) -> Any:
        raise AssertionError("the agent loop only converses")

    async def converse(self, conversation: Conversation) -> Turn:
        self.seen.append(conversation)
        return self.turns.pop(0)


def calls(*uses: tuple[str, dict[str, Any]]) -> Turn:
    blocks: list[TextBlock | ToolUse] = [
        ToolUse(id=f"toolu_{n}", name=name, input=args) for n, (name, args) in enumerate(uses)
    ]
    return Turn(content=blocks, stop_reason="tool_use", usage=TokenUsage(input_tokens=10, calls=1))


def says(text: str) -> Turn:
    return Turn(
        content=[TextBlock(text=text)],
        stop_reason="end_turn",
        usage=TokenUsage(output_tokens=5, calls=1),
    )


def conversation(**overrides: Any) -> Conversation:
    values: dict[str, Any] = {
        "role": Role.PRODUCER,
        "run_id": "run-1",
        "iteration": 2,
        "model": "claude-test",
        "system": "You are the producer.",
        "messages": [{"role": "user", "content": "Write the artifact."}],
        "tools": tool_definitions(),
    }
    return Conversation(**{**values, **overrides})


async def run(
    model: Any, workspace: Path, max_turns: int = 12, step: Any = "produce", **overrides: Any
) -> AgentOutcome:
    return await run_agent(model, conversation(**overrides), workspace, max_turns, step)


def tool_results(conversation: Conversation) -> list[dict[str, Any]]:
    content = conversation.messages[-1]["content"]
    assert conversation.messages[-1]["role"] == "user" and isinstance(content, list)
    return content


async def test_a_denied_call_is_an_error_result_and_the_loop_goes_on(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ScriptedModel(
        calls(("write_file", {"path": "../escape", "content": "out"})),
        calls(("write_file", {"path": ARTIFACT_PATH, "content": "# Title\n"})),
        says("Wrote the artifact."),
    )
    outcome = await run(model, workspace)

    assert not (tmp_path / "escape").exists()
    [denied] = tool_results(model.seen[1])
    assert denied["tool_use_id"] == "toolu_0"
    assert denied["is_error"] is True
    assert "refusing" in denied["content"] and ".." in denied["content"]
    # The model saw its own turn before the results, as the Messages API requires.
    assert model.seen[1].messages[-2] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_0",
                "name": "write_file",
                "input": {"path": "../escape", "content": "out"},
            }
        ],
    }
    [written] = tool_results(model.seen[2])
    assert "is_error" not in written
    assert (workspace / ARTIFACT_PATH).read_text() == "# Title\n"
    assert outcome.final_text == "Wrote the artifact."
    assert outcome.turns == 3 and not outcome.limit_reached
    assert outcome.files_written == [ARTIFACT_PATH]
    assert outcome.usage == TokenUsage(input_tokens=20, output_tokens=5, calls=3)
    results = [(r.tool, r.ok) for r in outcome.records if r.kind == "tool_result"]
    assert results == [("write_file", False), ("write_file", True)]


async def test_edit_file_then_end_turn(tmp_path: Path) -> None:
    (tmp_path / ARTIFACT_PATH).write_text("# Guide\n\nTBD\n")
    model = ScriptedModel(
        calls(("edit_file", {"path": ARTIFACT_PATH, "old": "TBD", "new": "## Summary\n\nDone."})),
        says("Replaced the placeholder."),
    )
    outcome = await run(model, tmp_path, step="refine")

    assert (tmp_path / ARTIFACT_PATH).read_text() == "# Guide\n\n## Summary\n\nDone.\n"
    [result] = tool_results(model.seen[1])
    assert "is_error" not in result and "replaced 1 occurrence" in result["content"]
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


async def test_a_failed_edit_is_not_counted_as_written(tmp_path: Path) -> None:
    (tmp_path / ARTIFACT_PATH).write_text("a a\n")
    model = ScriptedModel(
        calls(("edit_file", {"path": ARTIFACT_PATH, "old": "a", "new": "b"})),
        calls(("no_such_tool", {})),
        says("Gave up."),
    )
    outcome = await run(model, tmp_path)

    [ambiguous] = tool_results(model.seen[1])
    assert ambiguous["is_error"] is True and "2 times" in ambiguous["content"]
    [unknown] = tool_results(model.seen[2])
    assert unknown["is_error"] is True and "unknown tool" in unknown["content"]
    assert outcome.files_written == []
    assert (tmp_path / ARTIFACT_PATH).read_text() == "a a\n"


async def test_the_turn_limit_stops_the_loop_and_is_recorded(tmp_path: Path) -> None:
    model = ScriptedModel(*[calls(("list_files", {})) for _ in range(5)])
    outcome = await run(model, tmp_path, max_turns=3)

    assert len(model.seen) == 3
    assert outcome.limit_reached and outcome.turns == 3
    last = outcome.records[-1]
    assert (last.kind, last.turn) == ("limit", 3)
    assert last.output is not None and "turn limit (3 turns)" in last.output


async def test_several_calls_in_one_turn_all_get_results_in_order(tmp_path: Path) -> None:
    model = ScriptedModel(
        calls(
            ("write_file", {"path": "a.md", "content": "a"}),
            ("run_command", {"command": "env"}),
            ("write_file", {"path": "b.md", "content": "b"}),
        ),
        says("done"),
    )
    outcome = await run(model, tmp_path)

    results = tool_results(model.seen[1])
    assert [r["tool_use_id"] for r in results] == ["toolu_0", "toolu_1", "toolu_2"]
    assert [r.get("is_error", False) for r in results] == [False, True, False]
    assert outcome.files_written == ["a.md", "b.md"]


async def test_trajectory_records_are_tagged_and_round_trip_as_json_lines(tmp_path: Path) -> None:
    big = "x" * (RECORD_TEXT_CAP * 3)
    model = ScriptedModel(
        calls(("write_file", {"path": ARTIFACT_PATH, "content": big})),
        says("Wrote a long one."),
    )
    outcome = await run(model, tmp_path, step="refine", iteration=3, run_id="run-7")

    records = outcome.records
    assert {(r.run_id, r.step, r.iteration) for r in records} == {("run-7", "refine", 3)}
    assert records[0].kind == "system" and records[0].input == "You are the producer."
    assert records[1].kind == "user" and records[1].input == "Write the artifact."
    # The file is whole; its record is capped.
    assert (tmp_path / ARTIFACT_PATH).read_text() == big
    call = next(r for r in records if r.kind == "tool_call")
    assert call.tool == "write_file" and call.input["path"] == ARTIFACT_PATH
    assert len(call.input["content"]) < RECORD_TEXT_CAP + 100
    assert call.input["content"].endswith(f"[{len(big) - RECORD_TEXT_CAP} more characters]")

    text = to_jsonl(records)
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == len(records)
    for line in lines:
        parsed = json.loads(line)
        assert (parsed["step"], parsed["iteration"]) == ("refine", 3)
        assert parsed["ts"].endswith("Z") or parsed["ts"].endswith("+00:00")
    assert from_jsonl(text) == records


# --- the offline model as an agent --------------------------------------------------------------

PRODUCE_CONTEXT: dict[str, Any] = {
    "task": "Write a testing guide",
    "intent": "A guide to testing",
    "acceptance_criteria": ["has a title"],
    "rules": [],
    "plan": {"focus": "first draft", "steps": ["Draft it"]},
    "current_artifact": None,
}


async def test_the_offline_model_writes_its_draft_through_tools(tmp_path: Path) -> None:
    model = OfflineModels()
    outcome = await run(model, tmp_path, context=PRODUCE_CONTEXT)

    artifact = (tmp_path / ARTIFACT_PATH).read_text()
    assert artifact.startswith("# Write a testing guide\n")
    assert outcome.turns == 2 and outcome.files_written == [ARTIFACT_PATH]
    assert outcome.final_text == "first draft: initial generation"
    calls_made = [r.tool for r in outcome.records if r.kind == "tool_call"]
    assert calls_made == ["write_file"]
    assert outcome.usage.calls == 2 and outcome.usage.input_tokens > 0


async def test_the_offline_model_follows_its_script(tmp_path: Path) -> None:
    script = OfflineScript.model_validate(
        {
            "producer": {
                "1": {
                    "files": [{"path": "a.md", "content": "A"}, {"path": "b.md", "content": "B"}]
                },
                "2": "I will not use tools.",
            }
        }
    )
    first = await run(OfflineModels(script=script), tmp_path, context=PRODUCE_CONTEXT)
    assert first.files_written == ["a.md", "b.md"]
    assert first.final_text == "No changes were needed."

    second = await run(
        OfflineModels(script=script), tmp_path / "none", context=PRODUCE_CONTEXT, call_index=2
    )
    assert second.turns == 1 and second.files_written == []
    assert second.final_text == "I will not use tools."
