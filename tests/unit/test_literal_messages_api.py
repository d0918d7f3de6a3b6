"""The literal Messages API stand-in: schema answers, repair, agent turns, its import boundary."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any, Literal

import anthropic
import pytest
from pydantic import BaseModel, Field, ValidationError

from tests.fakes.literal_messages_api import (
    LiteralMessagesAPI,
    answer_from_schema,
    files_to_write,
    inputs_cited,
)

pytestmark = pytest.mark.unit

MODULE = Path(__file__).parents[1] / "fakes" / "literal_messages_api.py"
PROJECT_PACKAGES = {"activities", "schemas", "workflows", "api", "worker", "deploy"}
MODEL = "claude-test"


# --- schema answers ------------------------------------------------------------------------


def test_enum_gives_its_first_value_and_const_itself() -> None:
    schema = {
        "type": "object",
        "properties": {
            "decision": {"enum": ["PROCEED", "REVISE", "HALT"], "type": "string"},
            "kind": {"const": "review"},
        },
        "required": ["decision", "kind"],
    }
    assert answer_from_schema(schema) == {"decision": "PROCEED", "kind": "review"}


def test_only_required_properties_are_filled() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "The title of the plan"},
            "note": {"type": "string", "default": "none"},
            "extra": {"type": "string"},
            "done": {"type": "boolean"},
            "count": {"type": "integer", "minimum": 3},
            "ratio": {"type": "number", "exclusiveMinimum": 0},
            "retries": {"type": "integer", "default": 2},
        },
        "required": ["title", "done", "count", "ratio", "retries"],
    }
    assert answer_from_schema(schema) == {
        "title": "The title of the plan.",
        "done": True,
        "count": 3,
        "ratio": 1,
        "retries": 2,
    }


def test_nested_refs_are_resolved_and_min_items_respected() -> None:
    schema = {
        "$defs": {
            "Step": {
                "type": "object",
                "properties": {"owner": {"$ref": "#/$defs/Owner"}, "next_step": {"type": "string"}},
                "required": ["owner", "next_step"],
            },
            "Owner": {"enum": ["human", "agent"], "type": "string"},
        },
        "type": "object",
        "properties": {
            "steps": {"type": "array", "items": {"$ref": "#/$defs/Step"}, "minItems": 2},
            "first": {"allOf": [{"$ref": "#/$defs/Step"}], "description": "The first step"},
        },
        "required": ["steps", "first"],
    }
    step = {"owner": "human", "next_step": "Next step."}
    assert answer_from_schema(schema) == {"steps": [step, step], "first": step}


def test_any_of_with_null_takes_the_other_option() -> None:
    schema = {
        "type": "object",
        "properties": {
            "reason": {"anyOf": [{"type": "null"}, {"type": "string", "description": "Why"}]},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        },
        "required": ["reason", "tags"],
    }
    assert answer_from_schema(schema) == {"reason": "Why.", "tags": ["Tags."]}


def test_discriminated_one_of_takes_the_first_variant() -> None:
    schema = {
        "$defs": {
            "Patch": {
                "type": "object",
                "properties": {"kind": {"const": "patch"}, "diff": {"type": "string"}},
                "required": ["kind", "diff"],
            },
            "Note": {
                "type": "object",
                "properties": {"kind": {"const": "note"}, "text": {"type": "string"}},
                "required": ["kind", "text"],
            },
        },
        "type": "object",
        "properties": {
            "change": {
                "oneOf": [{"$ref": "#/$defs/Patch"}, {"$ref": "#/$defs/Note"}],
                "discriminator": {"propertyName": "kind"},
            }
        },
        "required": ["change"],
    }
    assert answer_from_schema(schema) == {"change": {"kind": "patch", "diff": "Diff."}}


def test_strings_use_examples_patterns_and_length_bounds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "branch": {"type": "string", "examples": ["feature/x"]},
            "slug": {"type": "string", "pattern": "^[a-z]+-[0-9]+$"},
            "word": {"type": "string", "pattern": "^[a-z]+$", "description": "One word"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$", "examples": ["abc", "XYZ"]},
            "summary": {"type": "string", "description": "Short", "minLength": 12},
            "label": {"type": "string", "description": "A rather long label", "maxLength": 6},
        },
        "required": ["branch", "slug", "word", "code", "summary", "label"],
    }
    answer = answer_from_schema(schema)
    assert answer["branch"] == "feature/x"
    assert answer["slug"] == "slug-1"
    assert answer["word"] == "word"
    assert answer["code"] == "XYZ"
    assert len(answer["summary"]) == 12 and answer["summary"].startswith("Short.")
    assert answer["label"] == "A rath"
    assert answer_from_schema(schema) == answer  # deterministic


def test_a_list_asking_for_what_a_tool_was_given_lists_it() -> None:
    """A literal model told to list the commands it ran with a tool lists exactly those,
    once each, in order; a field naming no tool it used, or of another shape, is left."""
    schema = {
        "type": "object",
        "properties": {
            "evidence": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Each command exactly as you ran it with `run_command`.",
            },
            "read": {
                "type": "array",
                "items": {"type": "string"},
                "description": "What you read with `read_file`.",
            },
            "summary": {"type": "string", "description": "What `run_command` printed."},
        },
    }
    uses = [
        {"type": "tool_use", "name": "run_command", "input": {"command": "make test"}},
        {"type": "tool_use", "name": "search", "input": {"pattern": "x"}},
        {"type": "tool_use", "name": "run_command", "input": {"command": "make lint"}},
        {"type": "tool_use", "name": "run_command", "input": {"command": "make test"}},
    ]
    assert inputs_cited(schema, uses) == {"evidence": ["make test", "make lint"]}
    assert inputs_cited(schema, []) == {}


def test_files_to_write_are_the_backticked_paths_of_writing_sentences() -> None:
    text = (
        "Read `notes.md` with `read_file`; use `write_file` for outputs.\n"
        "Save the plan to `plan/out.json`, leave `/etc/x.md` and `../up.md` alone. "
        "Then update `CHANGELOG.md`. Mention `v1.2` nowhere."
    )
    assert files_to_write(text) == ["plan/out.json", "CHANGELOG.md"]


# --- over the wire, with the real SDK --------------------------------------------------------


class Finding(BaseModel):
    title: str = Field(description="What was found")
    severity: Literal["low", "high"]


class Verdict(BaseModel):
    decision: Literal["PROCEED", "REVISE", "HALT"] = Field(description="What the loop does next")
    findings: list[Finding] = Field(min_length=1)
    note: str | None = Field(default=None, description="Anything else")


VERDICT_TOOL = {
    "name": "submit_verdict",
    "description": "Submit the verdict.",
    "input_schema": Verdict.model_json_schema(),
}
FILE_TOOLS = [
    {
        "name": "write_file",
        "description": "Write a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
]
AGENT_SYSTEM = "You are the producer. Write the deliverable to `artifact.md` with `write_file`."
TASK = "Summarise the release notes\n\nKeep it under a page."


@pytest.fixture
def api() -> Any:
    with LiteralMessagesAPI() as server:
        yield server


def client_for(api: LiteralMessagesAPI) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=api.base_url, api_key="k", max_retries=0)


async def ask_verdict(
    api: LiteralMessagesAPI, messages: list[dict[str, Any]]
) -> anthropic.types.Message:
    return await client_for(api).messages.create(
        model=MODEL,
        max_tokens=1024,
        system="Review the draft and answer with `submit_verdict`.",
        messages=messages,  # type: ignore[arg-type]
        tools=[VERDICT_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "submit_verdict"},
    )


async def test_a_forced_answer_validates_against_the_tool_schema(api: LiteralMessagesAPI) -> None:
    reply = await ask_verdict(api, [{"role": "user", "content": "Review this draft."}])
    (block,) = reply.content
    assert block.type == "tool_use" and block.name == "submit_verdict"
    assert block.id.startswith("toolu_")
    assert reply.stop_reason == "tool_use" and reply.model == MODEL
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    verdict = Verdict.model_validate(block.input)
    assert verdict.decision == "PROCEED" and verdict.note is None
    assert block.input == {
        "decision": "PROCEED",
        "findings": [{"title": "What was found.", "severity": "low"}],
    }
    assert len(api.forced_requests()) == 1 and api.agent_requests() == []


async def test_any_with_several_tools_picks_the_one_the_system_prompt_names(
    api: LiteralMessagesAPI,
) -> None:
    reply = await client_for(api).messages.create(
        model=MODEL,
        max_tokens=1024,
        system="Answer with `submit_verdict`.",
        messages=[{"role": "user", "content": "Review."}],
        tools=[*FILE_TOOLS, VERDICT_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "any"},
    )
    (block,) = reply.content
    assert block.type == "tool_use" and block.name == "submit_verdict"


async def test_a_corrupt_answer_is_repaired_after_an_error_result(
    api: LiteralMessagesAPI,
) -> None:
    api.corrupt_answers = 1
    first = [{"role": "user", "content": "Review this draft."}]
    reply = await ask_verdict(api, first)
    (block,) = reply.content
    assert block.type == "tool_use"
    with pytest.raises(ValidationError) as invalid:
        Verdict.model_validate(block.input)
    assert api.corrupt_answers == 0 and api.requests_with_tool_error() == []

    repair = [
        *first,
        {"role": "assistant", "content": [block.model_dump()]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "is_error": True,
                    "content": f"{invalid.value}\nFix the errors and try again.",
                }
            ],
        },
    ]
    reply = await ask_verdict(api, repair)
    (block,) = reply.content
    assert block.type == "tool_use"
    Verdict.model_validate(block.input)
    (errored,) = api.requests_with_tool_error()
    assert "decision" in str(errored.body["messages"][-1]["content"][0]["content"])


async def converse(
    api: LiteralMessagesAPI, messages: list[dict[str, Any]]
) -> anthropic.types.Message:
    return await client_for(api).messages.create(
        model=MODEL,
        max_tokens=1024,
        system=AGENT_SYSTEM,
        messages=messages,  # type: ignore[arg-type]
        tools=FILE_TOOLS,  # type: ignore[arg-type]
    )


def results_for(reply: anthropic.types.Message) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": block.id, "content": "ok"}
            for block in reply.content
            if block.type == "tool_use"
        ],
    }


async def test_an_agent_writes_the_file_its_instructions_name(api: LiteralMessagesAPI) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    reply = await converse(api, messages)
    assert reply.stop_reason == "tool_use"
    (call,) = reply.content
    assert call.type == "tool_use" and call.name == "write_file"
    assert call.input == {
        "path": "artifact.md",
        "content": f"# Summarise the release notes\n\n{TASK}",
    }

    messages += [{"role": "assistant", "content": [call.model_dump()]}, results_for(reply)]
    reply = await converse(api, messages)
    assert reply.stop_reason == "end_turn"
    (text,) = reply.content
    assert text.type == "text" and text.text == "Done: wrote artifact.md."
    assert len(api.agent_requests()) == 2 and api.forced_requests() == []


async def test_a_lazy_agent_writes_once_nudged(api: LiteralMessagesAPI) -> None:
    api.lazy_agent_turns = 1
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    reply = await converse(api, messages)
    assert reply.stop_reason == "end_turn"
    assert [b.type for b in reply.content] == ["text"]
    assert api.lazy_agent_turns == 0

    nudge = "You ended your turn without writing `artifact.md`. Write it with `write_file`."
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {"role": "user", "content": nudge},
    ]
    reply = await converse(api, messages)
    assert reply.stop_reason == "tool_use"
    (call,) = reply.content
    assert call.type == "tool_use" and call.name == "write_file"
    assert call.input["path"] == "artifact.md"


async def test_the_nudge_alone_names_the_file_to_write(api: LiteralMessagesAPI) -> None:
    """A system prompt that names no file writes nothing until a user message does."""
    reply = await client_for(api).messages.create(
        model=MODEL,
        max_tokens=1024,
        system="You are the producer. Read `notes.md` first.",
        messages=[{"role": "user", "content": TASK}],
        tools=FILE_TOOLS,  # type: ignore[arg-type]
    )
    assert [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text == "Nothing to write."  # type: ignore[union-attr]


async def test_strict_tools_are_refused_when_asked(api: LiteralMessagesAPI) -> None:
    api.reject_strict = True
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client_for(api).messages.create(
            model=MODEL,
            max_tokens=1024,
            messages=[{"role": "user", "content": "Review."}],
            tools=[{**VERDICT_TOOL, "strict": True}],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": "submit_verdict"},
        )
    assert "tools.0.strict: Extra inputs are not permitted" in str(refused.value)
    assert api.strict_rejections == 1 and len(api.requests) == 1


async def test_streaming_is_refused(api: LiteralMessagesAPI) -> None:
    with pytest.raises(anthropic.BadRequestError, match="streaming is not supported"):
        await client_for(api).messages.create(
            model=MODEL,
            max_tokens=1024,
            messages=[{"role": "user", "content": "Hello."}],
            stream=True,
        )


# --- the import boundary ---------------------------------------------------------------------


def test_the_stand_in_imports_only_the_standard_library() -> None:
    tree = ast.parse(MODULE.read_text())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import from {node.module!r}"
            imported.append(node.module or "")
            imported += [f"{node.module}.{alias.name}" for alias in node.names]
    assert imported
    assert not [m for m in imported if m.split(".")[0] in PROJECT_PACKAGES]
    assert not [m for m in imported if re.match(r"tests\.fakes(\.messages_api)?\b", m)]
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    assert {m.split(".")[0] for m in imported} <= allowed
