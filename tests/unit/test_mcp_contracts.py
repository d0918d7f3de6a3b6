"""The `loops mcp` tools are a contract with a model that knows nothing of loopworks, as the
agents' prompts are (test_prompt_contracts.py): every tool and every parameter is
described, every closed value a parameter or an answer may take is listed where the model
reads it, every tool a description names exists, and the facts the descriptions quote
(templates, statuses, gates, id formats) are the code's own."""

from __future__ import annotations

import re
from typing import Any, get_args

import anyio
import pytest
from mcp import Client
from mcp.types import Tool

from loopworks.agent.trajectory import AgentStep, CallStep, RecordKind
from loopworks.api.idempotency import RUN_ID_PREFIX
from loopworks.cli.client import ApiClient
from loopworks.cli.config import CliConfig
from loopworks.cli.mcp.facts import INSTRUCTIONS, TEMPLATES
from loopworks.cli.mcp.server import build_server
from loopworks.cli.mcp.views import GATE_MEANINGS, GRAPH_GATE_TOOLS, RUN_GATE_TOOLS, Gate
from loopworks.prompts.catalog import load_templates
from loopworks.schemas.events import EventName
from loopworks.schemas.graph import GraphStatus
from loopworks.schemas.notify import NotifyEvent, WebhookFormat
from loopworks.schemas.run import Mode, RunStatus, StopReason
from loopworks.schemas.tasks import TaskStatus

pytestmark = pytest.mark.unit


def listed_tools() -> list[Tool]:
    async def listing() -> list[Tool]:
        server = build_server(ApiClient(CliConfig("http://127.0.0.1:9", None)))
        async with Client(server) as client:
            return list((await client.list_tools()).tools)

    return anyio.run(listing)


TOOLS = listed_tools()
BY_NAME = {tool.name: tool for tool in TOOLS}
# What this server wrote (the nested models' own descriptions are schemas/' and are
# checked where they are defined).
OUR_TEXT = " ".join(
    [INSTRUCTIONS, *(tool.description or "" for tool in TOOLS)]
    + [
        str(node.get("description", ""))
        for tool in TOOLS
        for node in (tool.input_schema.get("properties") or {}).values()
    ]
)


def properties(schema: dict[str, Any], defs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every property of the schema and of every model it refers to, by dotted path."""
    found: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in seen:
                    seen.add(name)
                    walk(defs[name], name)
            for key, value in (node.get("properties") or {}).items():
                found.append((f"{path}.{key}", value))
                walk(value, f"{path}.{key}")
            for key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties"):
                if key in node:
                    walk(node[key], path)
        elif isinstance(node, list):
            for item in node:
                walk(item, path)

    walk(schema, "")
    return found


def enum_values(node: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    values: list[str] = []
    for option in [node, *node.get("anyOf", [])]:
        ref = option.get("$ref")
        target = defs[ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else option
        values += [str(value) for value in target.get("enum", [])]
    return values


def test_every_tool_has_a_description_that_says_what_it_does() -> None:
    for tool in TOOLS:
        assert tool.description and len(tool.description) > 40, tool.name


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_every_parameter_is_described(tool: Tool) -> None:
    defs = tool.input_schema.get("$defs", {})
    missing = [
        path
        for path, node in properties(tool.input_schema, defs)
        if not node.get("description") and "$ref" not in node and "const" not in node
    ]
    assert not missing, f"{tool.name}: parameters without a description: {missing}"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_no_tool_takes_an_argument_outside_its_schema(tool: Tool) -> None:
    """The schema says so (`additionalProperties: false`), as the server refuses such a
    call: a misspelt argument is the model's mistake to hear of, not one to drop."""
    assert tool.input_schema.get("type") == "object", tool.name
    assert tool.input_schema.get("additionalProperties") is False, tool.name


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_every_enum_value_is_named_in_the_description(tool: Tool) -> None:
    """A closed parameter's values are in its schema; the model is also told what each
    means, so each is quoted in the parameter's or the tool's description."""
    defs = tool.input_schema.get("$defs", {})
    for name, node in (tool.input_schema.get("properties") or {}).items():
        values = enum_values(node, defs)
        said = f"{node.get('description', '')} {tool.description}"
        unnamed = [value for value in values if f"`{value}`" not in said]
        assert not unnamed, f"{tool.name}.{name}: {unnamed} not explained"


def test_every_tool_a_description_names_exists() -> None:
    """Every snake_case word the descriptions use is a tool, a field of a tool's input or
    answer, or an event's name: a tool renamed or removed leaves no dangling mention."""
    fields: set[str] = set()
    for tool in TOOLS:
        for schema in (tool.input_schema, tool.output_schema or {}):
            fields |= {
                path.rsplit(".", 1)[-1] for path, _ in properties(schema, schema.get("$defs", {}))
            }
    words = set(re.findall(r"\b([a-z]+(?:_[a-z]+)+)\b", OUR_TEXT))
    unknown = words - set(BY_NAME) - fields - {name.value for name in EventName}
    unknown -= {value.value for value in [*RunStatus, *StopReason]}
    unknown -= TRAJECTORY_WORDS
    assert not unknown, f"descriptions name tools that do not exist: {sorted(unknown)}"
    # And the gates' releasing tools are real tools.
    assert set(RUN_GATE_TOOLS.values()) | set(GRAPH_GATE_TOOLS.values()) <= set(BY_NAME)


def test_the_templates_are_the_catalogs() -> None:
    assert sorted(TEMPLATES) == sorted(load_templates())
    for template in TEMPLATES:
        assert (
            f"`{template}`"
            in BY_NAME["start_run"].input_schema["properties"]["template"]["description"]
        )


def test_statuses_modes_and_gates_are_all_stated() -> None:
    run_status = BY_NAME["run_status"].description or ""
    for status in RunStatus:
        assert f"`{status.value}`" in run_status, status
    graph_status = BY_NAME["graph_status"].description or ""
    for graph_state in GraphStatus:
        assert f"`{graph_state.value}`" in graph_status, graph_state
    for task_state in TaskStatus:
        assert f"`{task_state.value}`" in graph_status, task_state
    for gate in Gate:
        assert f"`{gate.value}`" in run_status and f"`{gate.value}`" in graph_status
        assert f"`{gate.value}`" in INSTRUCTIONS and GATE_MEANINGS[gate]
    for mode in Mode:
        assert f"`{mode.value}`" in str(BY_NAME["start_run"].input_schema["properties"]["mode"])
        assert f"`{mode.value}`" in str(BY_NAME["start_graph"].input_schema["properties"]["mode"])


def test_id_formats_are_stated_where_ids_are_asked_for() -> None:
    for tool in TOOLS:
        schema = tool.input_schema.get("properties", {})
        if "run_id" in schema:
            said = schema["run_id"]["description"]
            assert "<YYYYMMDD>-<HHMMSS>" in said and f"`{RUN_ID_PREFIX}" in said, tool.name
            assert "<graph_id>/<task_id>/<attempt>" in said, tool.name
        if "graph_id" in schema:
            assert "`graph-<alias>-" in schema["graph_id"]["description"], tool.name


def test_the_cursor_is_explained() -> None:
    after = BY_NAME["run_events"].input_schema["properties"]["after"]["description"]
    assert "`seq`" in after and "next_cursor" in after and "0" in after


# The trajectory's steps and line kinds (agent/trajectory.py), which run_trajectory names.
TRAJECTORY_STEPS = {*get_args(AgentStep), *get_args(CallStep)}
TRAJECTORY_KINDS = set(get_args(RecordKind))
TRAJECTORY_WORDS = TRAJECTORY_STEPS | TRAJECTORY_KINDS


def test_run_trajectory_names_every_step_and_kind_of_a_line() -> None:
    tool = BY_NAME["run_trajectory"]
    step = tool.input_schema["properties"]["step"]["description"]
    # A graph's task planner (`plan_graph`) is in the graph's trajectory, not a run's.
    assert set(re.findall(r"[a-z_]+", step.split(":", 1)[1])) == TRAJECTORY_STEPS - {"plan_graph"}
    for kind in TRAJECTORY_KINDS:
        assert f"`{kind}`" in (tool.description or ""), kind


def test_aliases_are_taken_wherever_a_run_id_is() -> None:
    for tool in TOOLS:
        run_id = (tool.input_schema.get("properties") or {}).get("run_id")
        if run_id is not None:
            assert "alias" in run_id["description"], tool.name


def test_reads_are_marked_read_only_and_stops_destructive() -> None:
    for tool in TOOLS:
        assert tool.annotations is not None, tool.name
        reads = tool.name in {
            "list_runs",
            "run_status",
            "run_events",
            "run_artifact",
            "graph_status",
            "list_graphs",
            "wait_for_run",
            "run_trajectory",
            "playbook",
        }
        assert tool.annotations.read_only_hint is reads, tool.name
        if tool.name.startswith("stop_"):
            assert tool.annotations.destructive_hint is True, tool.name


@pytest.mark.parametrize("tool", ["start_run", "start_graph"])
def test_notify_names_every_event_and_format(tool: str) -> None:
    """`notify` is optional, and its description says each event a model may ask for
    and each webhook format, with what it means."""
    schema = BY_NAME[tool].input_schema
    assert "notify" not in schema.get("required", [])
    said = schema["properties"]["notify"]["description"]
    for value in [*NotifyEvent, *WebhookFormat]:
        assert f"`{value.value}`" in said, (tool, value)
    assert "HTTP 422" in said and "`webhooks`" in said and "`events`" in said


@pytest.mark.parametrize("tool", ["start_run", "start_graph"])
def test_the_iteration_limit_says_what_omitting_it_means(tool: str) -> None:
    """The API's rule (docs/api.md#the-run-request): 4, or a prep package's own limit
    (10 when it names none) when the plan comes from one."""
    schema = BY_NAME[tool].input_schema
    assert "max_iterations" not in schema.get("required", [])
    node = schema["properties"]["max_iterations"]
    assert "default" not in node or node["default"] is None, node
    said = node["description"]
    assert "Omitted: 4" in said and "prep package" in said and "10 when" in said, said


@pytest.mark.parametrize(
    ("tool", "field", "settings"),
    [
        ("start_run", "budget", "LOOPS_RUN_BUDGET_TOKENS, LOOPS_RUN_BUDGET_USD"),
        ("start_graph", "budget", "LOOPS_RUN_BUDGET_TOKENS, LOOPS_RUN_BUDGET_USD"),
        ("start_graph", "total_budget", "LOOPS_GRAPH_BUDGET_TOKENS, LOOPS_GRAPH_BUDGET_USD"),
    ],
)
def test_budgets_say_their_limits_the_default_and_the_refusal(
    tool: str, field: str, settings: str
) -> None:
    """A budget is optional; its description names both limits with their units, what
    reaching one does, the operator's caps it defaults to, and the 422 above them."""
    schema = BY_NAME[tool].input_schema
    assert field not in schema.get("required", [])
    said = schema["properties"][field]["description"]
    for words in ("`max_tokens` (input + output tokens)", "`max_cost_usd` (US dollars)"):
        assert words in said, (tool, field)
    assert settings in said and "HTTP 422" in said, (tool, field)
    assert "`budget_exhausted`" in said or "`failed`" in said, (tool, field)


def test_the_status_tools_say_what_was_spent_of_what_may_be() -> None:
    for tool, limit in (("run_status", "budget"), ("graph_status", "total_budget")):
        said = BY_NAME[tool].description or ""
        assert "`usage`" in said and f"`{limit}`" in said, tool
        answer = (BY_NAME[tool].output_schema or {}).get("properties", {})
        assert {"usage", limit} <= set(answer), tool
