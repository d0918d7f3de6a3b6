"""Prompts are part of the contract: every agent definition states the facts the
code relies on (tool names, file names, verdicts, fields), and asks for nothing the code
does not read.

Structured roles answer through one forced tool whose input schema is their answer model's
JSON schema, so the prompt and the schema together must tell the model everything: the
tool, every field and what every closed value means. The producer and the refiner work in
the workspace with tools and end with a plain-text reply; their deliverable is a file.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from loopworks.agent.loop import READ_ONLY_TOOLS
from loopworks.agent.tools import TOOLS
from loopworks.llm.base import section_title
from loopworks.llm.facts import ANSWER_TOOL, SELF_TEST_FLAG
from loopworks.prompts.catalog import AGENTS_DIR, AgentDefinition, CatalogError, load_agents
from loopworks.prompts.facts import prompt_facts
from loopworks.schemas.contexts import CONTEXTS, AcceptedFile, EvaluatorContext, RoleContext
from loopworks.schemas.curation import (
    REFERENCES_DIR,
    SKILLS_DIR,
    CuratorPayload,
    HelperReview,
    HelperVerdict,
    ItemTag,
    Priority,
    ProposedUpdate,
    SkillCuration,
    SkillReview,
)
from loopworks.schemas.learning import fits
from loopworks.schemas.playbook import (
    FILE_MAX_CHARS,
    AddDelta,
    ItemKind,
    PlaybookItem,
    RemoveDelta,
    Tag,
    TagDelta,
    UpdateDelta,
)
from loopworks.schemas.proof import PROOF_TIMEOUT_SECONDS
from loopworks.schemas.roles import ANSWER_MODELS, Critique, Role
from loopworks.schemas.run import StopReason
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.schemas.tasks import (
    LEDGER_PATH,
    MAX_EXISTING_FILES,
    TASKS_DIR,
    Task,
    TaskContext,
    orchestrator_restored,
)
from loopworks.workflows.graph.inputs import GRAPH_TASK_NOTE
from tests.fakes.literal_messages_api import answer_from_schema, files_to_write

pytestmark = pytest.mark.unit

STRUCTURED = [role for role, model in ANSWER_MODELS.items() if model is not None]
WORKING = [role for role, model in ANSWER_MODELS.items() if model is None]
# The working roles whose deliverable is the run's artifact; the skill generator's are the
# files the task curator asked for (see its own test).
ARTIFACT_WORKING = [role for role in WORKING if role != Role.SKILL_GENERATOR]

# Backticked words a prompt may use although they are no name of its schemas, no tool and
# no fact, each with the reason it is a name the code uses.
ALLOWED_WORDS: dict[str, str] = {
    # The rule id the QA verifier gives an issue no rule covers; the workflow uses the
    # same id when QA reports ISSUES without any (workflows/loop.py).
    "qa": "rule id of QA issues outside every rule",
}

_BACKTICKED = re.compile(r"`([^`\n]+)`")
# The list of a prompt's inputs, one `- **Section Title**: ...` item each.
_INPUTS = re.compile(r"^Your inputs\b[^\n]*:\n((?:- [^\n]*(?:\n|$))+)", re.MULTILINE)
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")
# A name: starts like an identifier and holds a letter (`_` or `-` alone is punctuation).
_IDENTIFIER = re.compile(r"(?=[^A-Za-z]*[A-Za-z])[A-Za-z_][A-Za-z0-9_.\-]*")


@pytest.fixture(scope="module")
def agents() -> dict[str, AgentDefinition]:
    return load_agents()


# --- reading a JSON schema -----------------------------------------------------------------


@dataclass(frozen=True)
class Property:
    path: str
    name: str
    description: str
    required: bool
    depth: int


@dataclass
class SchemaFacts:
    """What a model reads in a JSON schema: properties, closed values, descriptions."""

    properties: list[Property] = field(default_factory=list)
    enum_values: set[str] = field(default_factory=set)
    descriptions: list[str] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {p.name for p in self.properties}


def schema_facts(model: type[BaseModel]) -> SchemaFacts:
    root = model.model_json_schema()
    facts = SchemaFacts()
    _walk(root, root.get("$defs", {}), model.__name__, 0, facts, set())
    return facts


def _walk(
    node: Any, defs: dict[str, Any], path: str, depth: int, facts: SchemaFacts, seen: set[str]
) -> None:
    if not isinstance(node, dict):
        return
    if isinstance(node.get("description"), str):
        facts.descriptions.append(node["description"])
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name not in seen:  # a recursive model is walked once
            _walk(defs[name], defs, path, depth, facts, seen | {name})
    for value in node.get("enum", []):
        facts.enum_values.add(str(value))
    if "const" in node:
        facts.enum_values.add(str(node["const"]))
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in node.get(key, []):
            _walk(sub, defs, path, depth, facts, seen)
    for key in ("items", "additionalProperties"):
        _walk(node.get(key), defs, path, depth, facts, seen)
    for sub in node.get("discriminator", {}).get("mapping", {}).values():
        _walk({"$ref": sub}, defs, path, depth, facts, seen)
    required = set(node.get("required", []))
    for name, prop in node.get("properties", {}).items():
        facts.properties.append(
            Property(
                path=f"{path}.{name}",
                name=name,
                description=_description(prop),
                required=name in required,
                depth=depth,
            )
        )
        _walk(prop, defs, f"{path}.{name}", depth + 1, facts, seen)


def _description(prop: dict[str, Any]) -> str:
    """A property's own description; pydantic may wrap a described `$ref` in `allOf`."""
    if isinstance(prop.get("description"), str):
        return prop["description"]
    for sub in prop.get("allOf", []):
        if isinstance(sub, dict) and isinstance(sub.get("description"), str):
            return sub["description"]
    return ""


def backticked(text: str) -> list[str]:
    return _BACKTICKED.findall(text)


def quoted(word: str, texts: list[str]) -> bool:
    """`word` appears in backticks in one of `texts`."""
    return any(f"`{word}`" in text for text in texts)


def answer_facts(role: Role) -> SchemaFacts:
    model = ANSWER_MODELS[role]
    assert model is not None
    return schema_facts(model)


@pytest.mark.parametrize(
    "role", [role for role, model in ANSWER_MODELS.items() if model is not None], ids=str
)
def test_a_model_told_only_the_schema_can_give_a_valid_answer(role: Role) -> None:
    """The literal stand-in answers from a schema alone (required fields, first closed
    value, examples, patterns, bounds). The task planner's ids had a pattern and no
    example, so no answer it made was valid."""
    model = ANSWER_MODELS[role]
    assert model is not None
    model.model_validate(answer_from_schema(model.model_json_schema()))


def unexpected_names(role: Role, prompt: str) -> set[str]:
    """Backticked identifier-like words of `prompt` that are no name the role's step uses."""
    allowed = set(TOOLS) | {ANSWER_TOOL} | set(prompt_facts().values()) | set(ALLOWED_WORDS)
    # A role's context is what it is given: its prompt may quote any name in it (the
    # refiner is told the fields of the critique's issues).
    for model in (ANSWER_MODELS[role], CONTEXTS[role]):
        if model is not None:
            facts = schema_facts(model)
            allowed |= facts.names | facts.enum_values
    words = {w for w in backticked(prompt) if _IDENTIFIER.fullmatch(w)}
    return words - allowed


# --- the schema walker itself ----------------------------------------------------------------


def test_schema_walker_reaches_nested_models_enums_and_literals() -> None:
    hydration = answer_facts(Role.HYDRATOR)
    paths = {p.path for p in hydration.properties}
    # Through the list of rules, and the union of a rule's check kinds.
    assert {"Hydration.rules.id", "Hydration.rules.check.question"} <= paths
    assert {"fail", "warn", "info", "A", "B", "command", "pattern", "llm"} <= (
        hydration.enum_values
    )
    reflection = answer_facts(Role.REFLECTOR)
    assert {"success", "partial", "failure"} <= reflection.enum_values


def test_shape_check_finds_a_field_the_code_does_not_read() -> None:
    # Today's mistake, as it was: the producer asked for a `files` list nobody reads.
    # (`path` is a name it is given: the pattern checks of its rules have one.)
    prompt = (
        "In `files`, give each file's `path` and content; write `artifact.md` with `edit_file`."
    )
    assert unexpected_names(Role.PRODUCER, prompt) == {"files"}


# --- structured roles ------------------------------------------------------------------------


@pytest.mark.parametrize("role", STRUCTURED, ids=str)
def test_structured_prompt_names_the_answer_tool(
    agents: dict[str, AgentDefinition], role: Role
) -> None:
    prompt = agents[role.value].prompt
    assert f"`{ANSWER_TOOL}` tool exactly once" in prompt
    # The answer is the tool's input, not text: no leftover instructions about the format.
    for wording in ("JSON object", "markdown fence", "ONLY with"):
        assert wording not in prompt, wording


@pytest.mark.parametrize("role", STRUCTURED, ids=str)
def test_every_closed_value_is_explained(agents: dict[str, AgentDefinition], role: Role) -> None:
    """A verdict or a kind the model may pick is named where it reads: in the prompt or in
    the schema's descriptions."""
    facts = answer_facts(role)
    texts = [agents[role.value].prompt, *facts.descriptions]
    unexplained = sorted(v for v in facts.enum_values if not quoted(v, texts))
    assert not unexplained, f"{role}: {unexplained} are in the schema but explained nowhere"


@pytest.mark.parametrize("role", STRUCTURED, ids=str)
def test_every_property_is_described(role: Role) -> None:
    facts = answer_facts(role)
    assert facts.properties
    bare = [p.path for p in facts.properties if not p.description.strip()]
    assert not bare, f"{role}: properties without a description: {bare}"


@pytest.mark.parametrize("role", STRUCTURED, ids=str)
def test_answer_fields_are_named(agents: dict[str, AgentDefinition], role: Role) -> None:
    """Every field of the answer itself is named in the prompt; every required field at any
    depth is named in the prompt or in a description of the schema."""
    prompt = agents[role.value].prompt
    facts = answer_facts(role)
    # The evaluator's top-level properties are the rule ids of the questions it is given
    # (`judgements_model`): its prompt says so instead of naming them.
    top = [
        p.name
        for p in facts.properties
        if p.depth == 0 and role != Role.EVALUATOR and not quoted(p.name, [prompt])
    ]
    assert not top, f"{role}: the prompt does not name {top}"
    texts = [prompt, *facts.descriptions]
    required = [p.path for p in facts.properties if p.required and not quoted(p.name, texts)]
    assert not required, f"{role}: required fields named nowhere: {required}"


def test_evaluator_answers_every_question_by_its_rule_id(
    agents: dict[str, AgentDefinition],
) -> None:
    prompt = agents[Role.EVALUATOR.value].prompt
    assert "one property per question, named by the question's rule id" in prompt
    assert "exactly as given" in prompt


def test_task_planner_states_the_graph_rules_the_code_checks(
    agents: dict[str, AgentDefinition],
) -> None:
    """What `graph_errors` refuses and the orchestrator does with the graph
    (docs/graphs.md#tasks)."""
    prompt = agents[Role.TASK_PLANNER.value].prompt
    # The task schema (docs/graphs.md#tasks), every field at every depth.
    for name in [*Task.model_fields, *TaskContext.model_fields]:
        assert f"`{name}`" in prompt, name
    for wording in (
        "T-001 for the first task, then T-002",
        "Name only ids of tasks in your answer",
        "no cycle",
        f"At most {MAX_EXISTING_FILES} of them may be existing files",
        f"more than {MAX_EXISTING_FILES} existing files",
        "must be split",
        "exits 0 when the task is done and not before",
        f"killed, and fails, after {int(PROOF_TIMEOUT_SECONDS)} seconds",
        "runs from the repository root",
        "no network",
        "run at the same time",
        "share a path never run at the same time",
        "sent back once with every problem found",
    ):
        assert wording in prompt, wording
    # The report a task's loop writes is moved at merge: no command may check it.
    assert f"never `{ARTIFACT_PATH}`" in prompt


# --- roles that work with tools ----------------------------------------------------------------


@pytest.mark.parametrize("role", ARTIFACT_WORKING, ids=str)
def test_working_prompt_names_the_deliverable_the_tools_and_the_end(
    agents: dict[str, AgentDefinition], role: Role
) -> None:
    prompt = agents[role.value].prompt
    # The step fails when the agent ends without the deliverable in place.
    leave = rf"\bLeave [^.]*\bin (the file )?`{re.escape(ARTIFACT_PATH)}` at the workspace root"
    assert re.search(leave, prompt), f"{role}: does not say to leave the deliverable"
    assert_works_with_tools_and_ends_in_text(role, prompt)


def assert_works_with_tools_and_ends_in_text(role: Role, prompt: str) -> None:
    missing = [name for name in TOOLS if f"`{name}`" not in prompt]
    assert not missing, f"{role}: tools not named: {missing}"
    # The step ends on the first reply without a tool call.
    assert "plain-text summary" in prompt
    assert "with no tool call" in prompt
    # No answer tool is offered to them.
    assert f"`{ANSWER_TOOL}`" not in prompt


def test_qa_verifier_names_its_read_only_tools_and_runs_the_tests(
    agents: dict[str, AgentDefinition],
) -> None:
    """QA is an agent with the tools that read and the command tool (agent/loop.py's
    READ_ONLY_TOOLS), answering through the forced tool: its prompt names exactly those,
    never a writing tool, and asks for the tests run and cited."""
    prompt = agents[Role.QA_VERIFIER.value].prompt
    for name in READ_ONLY_TOOLS:
        assert f"`{name}`" in prompt, f"tool not named: {name}"
    for name in set(TOOLS) - set(READ_ONLY_TOOLS):
        assert f"`{name}`" not in prompt, f"names a tool it is not given: {name}"
    assert "No tool of yours writes a file" in prompt
    assert "tests first" in prompt
    assert "Cite your evidence" in prompt
    assert f"calling the `{ANSWER_TOOL}` tool exactly once" in prompt
    # The inputs QA reads the change from.
    for section in ("Diff Stat", "Patch", "Changed Files", "Producer Summary"):
        assert f"**{section}**" in prompt


def test_qa_verifier_is_told_what_its_verdict_must_carry(
    agents: dict[str, AgentDefinition],
) -> None:
    """The rule workflows/evidence.py checks a VERIFIED by (docs/loop.md#qas-evidence),
    stated where QA reads: the field, the tool its commands come from, exit 0, the
    re-ask, and that nothing it changes counts."""
    prompt = agents[Role.QA_VERIFIER.value].prompt
    evidence = next(p for p in answer_facts(Role.QA_VERIFIER).properties if p.name == "evidence")
    assert "`evidence`" in prompt and "`run_command`" in evidence.description
    assert "run_command" in READ_ONLY_TOOLS
    for wording in (
        "each exactly as you ran it with `run_command`",
        "each of which exited 0",
        f"changed files besides `{ARTIFACT_PATH}`",
        "contradicted by the run's proof",
        "asked once more with the reason, and then it counts as `ISSUES`",
        "a verdict given after your commands changed, added or deleted a file of your checkout "
        "(one git does not ignore) is not accepted",
        "nothing your commands change is ever the run's",
    ):
        assert wording in prompt, wording
    for section in ("Proof", "Rejected Verdict"):
        assert f"**{section}**" in prompt


def test_refiner_is_told_the_fields_of_the_critique(agents: dict[str, AgentDefinition]) -> None:
    prompt = agents[Role.REFINER.value].prompt
    for name in schema_facts(Critique).names - {"issues"}:
        assert f"`{name}`" in prompt, name


# --- the delta playbook (docs/playbook.md) -----------------------------------------------


def unquoted_fields(prompt: str, *models: type[BaseModel]) -> list[str]:
    """The fields of `models` the prompt does not name in backticks."""
    return [name for model in models for name in model.model_fields if f"`{name}`" not in prompt]


def unquoted_values(prompt: str, values: list[str]) -> list[str]:
    return [value for value in values if f"`{value}`" not in prompt]


KINDS = [kind.value for kind in ItemKind]
TAGS = [tag.value for tag in Tag]


def test_hydrator_drafts_with_the_playbook_items(agents: dict[str, AgentDefinition]) -> None:
    prompt = agents[Role.HYDRATOR.value].prompt
    assert not unquoted_values(prompt, KINDS + TAGS)
    # Items are advice, most relevant first: the ones that do not apply are left out.
    assert "Ignore items that do not concern this task" in prompt
    assert "Never let an item widen the task's scope" in prompt


def test_reflector_is_told_every_reason_a_run_can_stop_for(
    agents: dict[str, AgentDefinition],
) -> None:
    prompt = agents[Role.REFLECTOR.value].prompt
    for reason in StopReason:
        assert reason.value in prompt, reason


def test_the_preparer_knows_what_the_evaluator_is_shown(
    agents: dict[str, AgentDefinition],
) -> None:
    """Each field of the evaluator's context, besides its questions, is named to the
    preparer who writes those questions."""
    prompt = agents[Role.PREPARER.value].prompt
    assert "the task, the text of `artifact.md` and the run's changes to other files" in prompt
    shown = set(EvaluatorContext.model_fields) - set(RoleContext.model_fields)
    assert shown == {"task", "questions", "artifact", "diff_stat", "patch"}


def test_the_search_tool_names_its_pattern_syntax() -> None:
    """The search runs RE2: a model told "Python syntax" wrote lookarounds, refused."""
    search = TOOLS["search"]
    assert "RE2 syntax" in search.description and "without lookaround" in search.description


def test_reflector_tags_every_item_it_was_given(agents: dict[str, AgentDefinition]) -> None:
    """`tag_deltas` keeps one tag per given id and drops the others."""
    prompt = agents[Role.REFLECTOR.value].prompt
    assert "`playbook_tags`: exactly one entry per item of Playbook Items" in prompt
    assert not unquoted_fields(prompt, ItemTag)
    assert "(its `id`, copied exactly)" in prompt
    assert not unquoted_values(prompt, TAGS)
    for meaning in ("moved the run forward", "misled the run", "did not matter"):
        assert meaning in prompt, meaning
    assert "never tag an id that is not in Playbook Items" in prompt


def test_task_curator_states_the_payload_and_what_the_code_does_with_it(
    agents: dict[str, AgentDefinition],
) -> None:
    """The curator's payload with `action` and `kind`, as `curated_deltas` reads it, and what
    starts the skill sub-loop."""
    prompt = agents[Role.TASK_CURATOR.value].prompt
    assert not unquoted_fields(prompt, CuratorPayload, ProposedUpdate, PlaybookItem)
    actions = ["add", "update", "remove"]
    assert not unquoted_values(prompt, KINDS + TAGS + [p.value for p in Priority] + actions)
    assert "exactly as given in Playbook Items" in prompt
    assert "the playbook assigns the real id" in prompt
    assert "lowercase snake_case" in prompt
    assert f"`{SKILLS_DIR}/<name>.py`" in prompt and f"`{REFERENCES_DIR}/`" in prompt
    assert "A non-empty `python_helpers` or `reference_requests` starts" in prompt


def test_skill_generator_writes_each_file_at_its_path_with_a_self_test(
    agents: dict[str, AgentDefinition],
) -> None:
    prompt = agents[Role.SKILL_GENERATOR.value].prompt
    assert_works_with_tools_and_ends_in_text(Role.SKILL_GENERATOR, prompt)
    assert f"`{SKILLS_DIR}/`" in prompt and f"`{REFERENCES_DIR}/`" in prompt
    assert "at exactly its path in Helper Paths" in prompt
    assert "exactly its path in Reference Paths" in prompt
    assert "in the same order as Reference Requests" in prompt
    # What the skill reflector checks a helper with, and the sandbox it runs in.
    assert f"`{SELF_TEST_FLAG}` flag" in prompt
    assert f"`python3 <path> {SELF_TEST_FLAG}`, run from the repository root" in prompt
    assert "exits 0 when the helper works" in prompt
    assert "standard library only" in prompt and "no network" in prompt
    assert "`python3 <path> --help`" in prompt


def test_skill_reflector_states_the_verdicts_and_the_check(
    agents: dict[str, AgentDefinition],
) -> None:
    """A helper is kept only when accepted and its `check_command` exits 0 in the sandbox,
    from the repository root; a note has no command."""
    prompt = agents[Role.SKILL_REFLECTOR.value].prompt
    assert not unquoted_fields(prompt, SkillReview, HelperReview)
    assert not unquoted_values(prompt, [verdict.value for verdict in HelperVerdict])
    assert "exactly one review per file in Files" in prompt
    assert "exactly as it appears in Files" in prompt
    assert "run from the repository root" in prompt
    assert "exits 0 only when the helper works" in prompt
    assert f"`python3 <path> {SELF_TEST_FLAG}`" in prompt
    assert "Leave it empty for a reference note" in prompt
    assert "kept only when your verdict is `ACCEPT` and its `check_command` exits 0" in prompt
    assert f"`{SKILLS_DIR}/`" in prompt and f"`{REFERENCES_DIR}/`" in prompt


def test_skill_curator_states_every_delta_and_its_fields(
    agents: dict[str, AgentDefinition],
) -> None:
    prompt = agents[Role.SKILL_CURATOR.value].prompt
    for delta in (AddDelta, UpdateDelta, TagDelta, RemoveDelta):
        op = delta.model_fields["op"].default
        assert f"`{op}` with" in prompt, op
        assert not unquoted_fields(prompt, delta), delta.__name__
    assert not unquoted_fields(prompt, SkillCuration, AcceptedFile, HelperReview, PlaybookItem)
    assert not unquoted_values(prompt, KINDS + TAGS)
    assert "one `ADD` of kind `skill`" in prompt and "one `ADD` of kind `reference`" in prompt
    assert "`python3 <path> --help`" in prompt
    assert "Use only ids that are in Playbook Items" in prompt
    assert "never a file the reviewer did not accept" in prompt


def test_the_skill_roles_are_told_how_long_a_kept_file_may_be(
    agents: dict[str, AgentDefinition],
) -> None:
    """A skill file is kept only when shorter than FILE_MAX_CHARS (schemas/learning.py
    `fits`): the generator is told so, through the prompts' facts; the reflector that a
    longer file is not among those it is shown whole; the curator that an item naming a
    file it was not given is dropped (`without_missing_files`)."""
    limit = f"{FILE_MAX_CHARS:,}"
    assert prompt_facts()["skill_file_max_chars"] == limit
    assert fits("x" * (FILE_MAX_CHARS - 1)) and not fits("x" * FILE_MAX_CHARS)
    generator = agents[Role.SKILL_GENERATOR.value].prompt
    assert f"Keep each file shorter than {limit} characters" in generator
    assert "a longer one is thrown away unreviewed" in generator
    reflector = agents[Role.SKILL_REFLECTOR.value].prompt
    assert "to its whole content" in reflector
    assert f"A file of {limit} characters or more is not among them" in reflector
    curator = agents[Role.SKILL_CURATOR.value].prompt
    assert f"Name no other file under `{SKILLS_DIR}/` or `{REFERENCES_DIR}/`" in curator
    assert "neither in Accepted nor among its item's `files`, is dropped" in curator


# --- every prompt ----------------------------------------------------------------------------


@pytest.mark.parametrize("role", list(Role), ids=str)
def test_prompt_asks_for_no_shape_the_code_does_not_read(
    agents: dict[str, AgentDefinition], role: Role
) -> None:
    unexpected = unexpected_names(role, agents[role.value].prompt)
    assert not unexpected, (
        f"{role}: the prompt quotes {sorted(unexpected)}, which are no field of its answer, "
        "tool or fact"
    )


@pytest.mark.parametrize("role", list(Role), ids=str)
def test_prompt_lists_the_sections_of_its_context(
    agents: dict[str, AgentDefinition], role: Role
) -> None:
    """The first message has one section per field of the role's context, titled by
    `llm.base.section_title` (`plan_focus` is `## Plan Focus`); the prompt's list of
    inputs names each of them, and no other."""
    found = _INPUTS.search(agents[role.value].prompt)
    assert found, f"{role}: no 'Your inputs ...:' list"
    listed = set(_BOLD.findall(found.group(1)))
    sections = {section_title(name) for name in CONTEXTS[role].model_fields}
    assert listed == sections, (
        f"{role}: inputs listed but not sent {sorted(listed - sections)}, "
        f"sent but not listed {sorted(sections - listed)}"
    )


@pytest.mark.parametrize("role", list(Role), ids=str)
def test_packaged_prompts_quote_code_facts_through_placeholders(
    agents: dict[str, AgentDefinition], role: Role
) -> None:
    raw = (AGENTS_DIR / f"{role.value}.md").read_text(encoding="utf-8")
    assert "{{" in raw, f"{role}: states no fact of the code through a placeholder"
    # A name written out by hand would not follow a rename in the code.
    written_out = [value for value in prompt_facts().values() if f"`{value}`" in raw]
    assert not written_out, f"{role}: write {written_out} as placeholders"
    agent = agents[role.value]
    for text in (agent.description, agent.prompt):
        assert "{{" not in text and "}}" not in text


def test_unknown_placeholder_in_an_agents_dir_is_an_error(tmp_path: Path) -> None:
    directory = tmp_path / "agents"
    shutil.copytree(AGENTS_DIR, directory)
    target = directory / "critic.md"
    target.write_text(
        target.read_text(encoding="utf-8").replace("{{answer_tool}}", "{{answer_tools}}"),
        encoding="utf-8",
    )
    with pytest.raises(CatalogError) as caught:
        load_agents(directory)
    assert caught.value.path == target
    assert "{{answer_tools}}" in str(caught.value)


def test_every_role_is_structured_or_working() -> None:
    assert set(STRUCTURED) | set(WORKING) == set(Role)
    assert WORKING == [Role.PRODUCER, Role.REFINER, Role.SKILL_GENERATOR]


@pytest.mark.parametrize("role", [Role.PRODUCER, Role.REFINER], ids=str)
def test_a_graph_tasks_writers_are_told_the_graphs_record_is_not_theirs(
    agents: dict[str, AgentDefinition], role: Role
) -> None:
    """A graph's loop's tools refuse the ledger and the task files, and put back what a
    command changed of them (docs/graphs.md#the-ledger): the prompt names both paths, says
    a command may not change them either and what the tool then does, and the task text
    says it is a graph's."""
    prompt = agents[role.value].prompt
    assert f"`{LEDGER_PATH}`" in prompt and f"`{TASKS_DIR}/`" in prompt
    assert "do not change them, with a tool or a command" in prompt
    assert "whatever a command changes of them is put back" in prompt
    assert "the command's result naming what was undone" in prompt
    # ... which is what the tool's result says (agent/tools/operations.py).
    assert orchestrator_restored([LEDGER_PATH]).startswith("undone: the command changed")
    assert "one of a task graph's (it says so)" in prompt
    assert "one of a task graph's" in GRAPH_TASK_NOTE
    assert f"`{LEDGER_PATH}`" in GRAPH_TASK_NOTE and f"`{TASKS_DIR}/`" in GRAPH_TASK_NOTE
    # Read as a literal model reads it (one that writes every file a sentence with a writing
    # verb names), neither tells it to write the ledger: worded "... are written by the
    # orchestrator", it did, in every single run.
    assert LEDGER_PATH not in files_to_write(prompt)
    assert LEDGER_PATH not in files_to_write(GRAPH_TASK_NOTE)


def test_the_custodiet_and_the_writers_are_told_of_the_audit_during_the_work(
    agents: dict[str, AgentDefinition],
) -> None:
    """The custodiet may audit before the producer's and refiner's tool calls, shown the
    call about to run (activities/audit.py, `WorkAuditor`); a BLOCK refuses it and every
    later one, stops the agent, and the step runs again once cleared, told of the block."""
    custodiet = agents[Role.CUSTODIET.value].prompt
    assert "before one of the producer's or refiner's tool calls" in custodiet
    assert "refuses the tool call you were shown and every later one" in custodiet
    assert "**Pending Call**: only during the work" in custodiet
    # How a command ended, each as its field is named in Commands Run.
    for name in ("exit_code", "timed_out", "signal", "note"):
        assert f"`{name}`" in custodiet
    for role in (Role.PRODUCER, Role.REFINER):
        prompt = agents[role.value].prompt
        assert "may check the work before any of your tool calls" in prompt
        assert "that call and every later one are refused with its reason" in prompt
        assert "**Blocked Attempt**: only when the custodiet blocked" in prompt
