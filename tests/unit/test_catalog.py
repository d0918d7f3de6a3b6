from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from loopworks.llm.facts import ANSWER_TOOL
from loopworks.prompts.catalog import (
    AGENTS_DIR,
    TEMPLATES_DIR,
    CatalogError,
    WorkflowTemplate,
    choose_template,
    load_agents,
    load_templates,
    template_ids,
)
from loopworks.prompts.facts import prompt_facts
from loopworks.schemas.roles import ANSWER_MODELS, Role

pytestmark = pytest.mark.unit

DOCUMENTED_TEMPLATES = {
    "feature-dev": ["Critic review", "TDD", "Tests pass", "QA"],
    "minor-edit": ["TDD", "Tests pass"],
    "debugging": ["Reproducible test"],
    "tdd-cycle": ["Tests pass", "No regression"],
    "spec-review": ["Critic feedback", "Convergence"],
    "qa-demo": ["Functionality", "Quality", "Completeness"],
    "batch-processing": ["All items processed", "Verified"],
    "simple-question": [],
    "direct-skill": ["Delegated to skill"],
}

# docs/loop.md#roles: haiku for hydrator and custodiet, opus for critic and QA, sonnet elsewhere;
# opus for the task planner too, whose one answer shapes every loop of a graph (README).
# The playbook's task curator and skill generator, reflector and curator are sonnet, as there.
PLAYBOOK_ROLES = (Role.TASK_CURATOR, Role.SKILL_GENERATOR, Role.SKILL_REFLECTOR, Role.SKILL_CURATOR)
EXPECTED_TIERS = {role: "sonnet" for role in Role} | {
    Role.HYDRATOR: "haiku",
    Role.CUSTODIET: "haiku",
    Role.CRITIC: "opus",
    Role.QA_VERIFIER: "opus",
    Role.TASK_PLANNER: "opus",
}

GOOD_AGENT = """---
name: qa-verifier
title: Reviewer
description: Reviews things.
tools: [Read, Grep]
model: opus
---

First line.

Second paragraph.
"""


def _agent(name: str = "broken-agent", prompt: str = "P\n", **front: str) -> str:
    lines = [
        f"name: {name}",
        "description: D",
        *(f"{key}: {value}" for key, value in front.items()),
    ]
    return "---\n" + "\n".join(lines) + "\n---\n" + prompt


@pytest.fixture(scope="module")
def templates() -> dict[str, WorkflowTemplate]:
    return load_templates()


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- templates -------------------------------------------------------------------


def test_all_nine_templates_load_with_their_ids_and_steps(
    templates: dict[str, WorkflowTemplate],
) -> None:
    assert set(templates) == set(DOCUMENTED_TEMPLATES)
    for template_id, template in templates.items():
        assert template.id == template_id
        assert template.steps
        assert template.keywords
        assert all(keyword == keyword.lower() for keyword in template.keywords)
        assert template.quality_gates == DOCUMENTED_TEMPLATES[template_id]
        for heading in ("## Overview", "## When to Use", "## Steps", "## Success Metrics"):
            assert heading in template.body, (template_id, heading)


def test_feature_dev_composes_spec_review_at_step_four(
    templates: dict[str, WorkflowTemplate],
) -> None:
    feature = templates["feature-dev"]
    assert feature.steps[3].workflow == "[[spec-review]]"
    assert feature.steps[3].linked_template == "spec-review"
    assert set(feature.linked_templates()) <= set(feature.dependencies)


def test_template_ids_are_the_packaged_ones() -> None:
    assert template_ids() == frozenset(DOCUMENTED_TEMPLATES)
    assert template_ids() is template_ids()


def test_packaged_data_sits_next_to_the_module() -> None:
    assert TEMPLATES_DIR.is_dir()
    assert AGENTS_DIR.is_dir()


def _copy_templates(tmp_path: Path) -> Path:
    directory = tmp_path / "templates"
    shutil.copytree(TEMPLATES_DIR, directory)
    return directory


def _front(id_: str = "minor-edit", workflow: str = "null", with_steps: bool = True) -> str:
    steps = (
        f"\n  - {{id: a, name: A, workflow: {workflow}, description: d}}" if with_steps else " []"
    )
    return (
        f"---\nid: {id_}\ntitle: T\ntype: workflow\ncategory: development\n"
        f"dependencies: []\nsteps:{steps}\n---\nBody\n"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no front matter here\n", "front matter"),
        ("---\nid: minor-edit\nsteps: [unclosed\n---\nbody\n", "YAML"),
        ("---\nid: minor-edit\ntitle: x\n", "not closed"),
        ("---\n- a list\n---\n", "mapping"),
        (_front(with_steps=False), "steps"),
        (_front(id_="other-id"), "does not match the file name"),
        (_front(workflow="spec-review"), "wikilink"),
        (_front(workflow="'[[nowhere]]'"), "nowhere"),
        (_front().replace("type: workflow", "type: agent"), "'type'"),
        (_front().replace("title: T", "title: T\nkeyword: [x]"), "keyword"),
    ],
)
def test_malformed_template_names_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    directory = _copy_templates(tmp_path)
    _write(directory, "minor-edit.md", text)
    with pytest.raises(CatalogError) as caught:
        load_templates(directory)
    assert "minor-edit.md" in str(caught.value)
    assert fragment in str(caught.value)


def test_front_matter_helper_is_valid(tmp_path: Path) -> None:
    directory = _copy_templates(tmp_path)
    _write(directory, "minor-edit.md", _front())
    assert load_templates(directory)["minor-edit"].body == "Body"


def test_template_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="not a directory"):
        load_templates(tmp_path / "missing")


# --- agents ----------------------------------------------------------------------


def test_every_role_has_an_agent_with_the_right_tier() -> None:
    agents = load_agents()
    assert set(agents) == {role.value for role in Role}
    for role in Role:
        agent = agents[role.value]
        assert agent.name == role.value
        assert agent.model == EXPECTED_TIERS[role], role
        assert agent.tier == EXPECTED_TIERS[role]
        assert agent.title and agent.description
        # Structured roles answer through the forced answer tool; the producer, the
        # refiner and the skill generator work with the workspace tools and answer in text.
        answers_by_tool = ANSWER_MODELS[role] is not None
        assert (f"`{ANSWER_TOOL}` tool" in agent.prompt) is answers_by_tool, role
        assert "JSON object" not in agent.prompt, role
        # The markdown body is the prompt, line breaks and all.
        assert "\n" in agent.prompt


def test_playbook_agents_are_sonnet_with_the_answer_tool_or_the_workspace_tools() -> None:
    agents = load_agents()
    for role in PLAYBOOK_ROLES:
        assert agents[role.value].model == "sonnet", role
    assert ANSWER_MODELS[Role.SKILL_GENERATOR] is None
    assert "`write_file`" in agents[Role.SKILL_GENERATOR.value].prompt


def test_override_replaces_one_agent_by_name(tmp_path: Path) -> None:
    packaged = load_agents()
    overrides = tmp_path / "overrides"
    _write(overrides, "qa-verifier.md", GOOD_AGENT)
    agents = load_agents(overrides=overrides)
    assert set(agents) == set(packaged)
    replaced = agents["qa-verifier"]
    assert replaced.name == "qa-verifier"
    assert replaced.title == "Reviewer"
    assert replaced.prompt == "First line.\n\nSecond paragraph."
    assert replaced.tools == ["Read", "Grep"]
    assert replaced.model == "opus"
    for name in set(packaged) - {"qa-verifier"}:
        assert agents[name] == packaged[name]


def test_agent_defaults_and_model_ids(tmp_path: Path) -> None:
    directory = tmp_path / "agents"
    _write(directory, "plain.md", _agent("plain"))
    _write(directory, "pinned.md", _agent("pinned", model="claude-sonnet-4-5", tools="[]"))
    _write(directory, "upper.md", _agent("upper", model="Haiku", title="Upper Case"))
    agents = load_agents(directory)
    assert agents["plain"].model == "sonnet"
    assert agents["plain"].tools == []
    assert agents["plain"].title == "plain"  # a Claude Code subagent file has no title
    assert agents["plain"].prompt == "P"
    assert agents["pinned"].model == "claude-sonnet-4-5"
    assert agents["pinned"].tier is None
    assert (agents["upper"].model, agents["upper"].title) == ("haiku", "Upper Case")


def test_tools_as_a_claude_code_comma_separated_string(tmp_path: Path) -> None:
    path = _write(tmp_path / "a", "tooled.md", _agent("tooled", tools="Read, Grep,Glob"))
    assert load_agents(path.parent)["tooled"].tools == ["Read", "Grep", "Glob"]


def test_markdown_headings_and_fences_stay_in_the_prompt(tmp_path: Path) -> None:
    prompt = (
        "# Reflector\n\nWrite this:\n\n```\n## Framework Reflection\n**Outcome**: ...\n```\n"
        "\n---\n\n## Model\nThen stop.\n"
    )
    agent = load_agents(_write(tmp_path / "a", "reflector.md", _agent("reflector", prompt)).parent)
    assert agent["reflector"].prompt == prompt.strip()
    assert agent["reflector"].model == "sonnet"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("# Broken\n\n## Description\nD\n\n## Prompt\nP\n", "no YAML front matter"),
        ("---\nname: broken-agent\ndescription: D\n", "not closed"),
        ("---\nname: broken-agent\ndescription: D: E\n---\nP\n", "not valid YAML"),
        ("---\nname: broken-agent\ndescription: {{artifact_path}} x\n---\nP\n", "quote"),
        ("---\n[broken-agent]\n---\nP\n", "mapping"),
        (_agent(prompt="\n\n"), "markdown body (the prompt)"),
        (_agent().replace("description: D\n", ""), "field 'description': Field required"),
        (_agent().replace("name: broken-agent\n", ""), "field 'name': Field required"),
        (_agent(name="other"), "name 'other' does not match the file name 'broken-agent'"),
        (_agent(modle="opus"), "field 'modle': Extra inputs are not permitted"),
        (_agent(model="opus haiku"), "field 'model'"),
        (_agent(model="[opus, haiku]"), "field 'model'"),
        (_agent(tools="Read, , Grep"), "field 'tools'"),
        (_agent(prompt="P {{answer_tools}}\n"), "unknown placeholder {{answer_tools}}"),
        (_agent().replace("D\n", "D\nprompt: x\n", 1), "must not define 'prompt'"),
        (
            _agent().replace("D\n", "D {{nope}}\n", 1),
            "{{nope}} in front matter field 'description'",
        ),
    ],
)
def test_malformed_agent_names_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    overrides = tmp_path / "overrides"
    _write(overrides, "broken-agent.md", text)
    with pytest.raises(CatalogError) as caught:
        load_agents(overrides=overrides)
    assert "broken-agent.md" in str(caught.value)
    assert fragment in str(caught.value)


PLACEHOLDER_AGENT = """---
name: writer
title: Writer
description: Writes {{artifact_path}}.
model: sonnet
---

Write `{{artifact_path}}` with {{ write_file }}, then call `{{answer_tool}}`.
Tools: {{workspace_tools}}. Braces that are no placeholder stay: {"a": {"b": 1}} and {{ open.
"""


def test_placeholders_filled_from_the_prompt_facts(tmp_path: Path) -> None:
    overrides = tmp_path / "overrides"
    _write(overrides, "writer.md", PLACEHOLDER_AGENT)
    agent = load_agents(overrides=overrides)["writer"]
    facts = prompt_facts()
    assert agent.description == f"Writes {facts['artifact_path']}."
    assert agent.prompt.splitlines() == [
        f"Write `{facts['artifact_path']}` with {facts['write_file']}, then call "
        f"`{facts['answer_tool']}`.",
        f"Tools: {facts['workspace_tools']}. Braces that are no placeholder stay: "
        '{"a": {"b": 1}} and {{ open.',
    ]


def test_placeholders_filled_from_given_facts(tmp_path: Path) -> None:
    directory = tmp_path / "agents"
    _write(directory, "plain.md", "---\nname: plain\ndescription: D {{x}}\n---\nP {{x}}{{y}}\n")
    agent = load_agents(directory, facts={"x": "1", "y": "\\2"})["plain"]
    assert (agent.description, agent.prompt) == ("D 1", "P 1\\2")


@pytest.mark.parametrize(
    ("line", "placeholder"),
    [("Use {{artefact_path}}.", "{{artefact_path}}"), ("{{ }}", "{{ }}"), ("{{a b}}", "{{a b}}")],
)
def test_unknown_placeholder_names_the_file_and_the_placeholder(
    tmp_path: Path, line: str, placeholder: str
) -> None:
    overrides = tmp_path / "overrides"
    _write(overrides, "typo.md", f"---\nname: typo\ndescription: D\n---\nP\n{line}\n")
    with pytest.raises(CatalogError) as caught:
        load_agents(overrides=overrides)
    assert caught.value.path.name == "typo.md"
    assert placeholder in caught.value.problem
    assert "in the markdown body" in caught.value.problem
    assert "artifact_path" in caught.value.problem  # the known names, to fix a typo


def test_catalog_error_survives_pickling(tmp_path: Path) -> None:
    error = CatalogError(tmp_path / "x.md", "is wrong")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error)
    assert copy.path == error.path


# --- choosing a template ---------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("fix the crash bug in the parser", "debugging"),
        ("Use a red-green-refactor cycle to add a slugify function", "tdd-cycle"),
        ("Write the tests first (TDD), then refactor the cache", "tdd-cycle"),
        ("What is a reflex loop?", "simple-question"),
        ("what is the difference between a bug and a crash?", "simple-question"),
        ("How does the scheduler decide what runs next?", "simple-question"),
        ("Add a REST endpoint that lists users", "feature-dev"),
        ("rename the config flag", "minor-edit"),
        ("review the design proposal for caching", "spec-review"),
        ("convert every csv file in data/ to parquet", "batch-processing"),
        ("zzz qqq", "minor-edit"),
    ],
)
def test_choose_template(templates: dict[str, WorkflowTemplate], task: str, expected: str) -> None:
    assert choose_template(task, templates) == expected


def test_choose_template_is_deterministic(templates: dict[str, WorkflowTemplate]) -> None:
    reordered = dict(reversed(list(templates.items())))
    for task in ["fix the test", "add a retry when the connection drops", "run it", ""]:
        first = choose_template(task, templates)
        assert all(choose_template(task, templates) == first for _ in range(5))
        assert choose_template(task, reordered) == first


def test_choose_template_matches_whole_words(templates: dict[str, WorkflowTemplate]) -> None:
    # "required" contains "red", "latest" contains "test": neither is a TDD hint.
    assert choose_template("the latest required value", templates) == "minor-edit"


def test_choose_template_needs_templates() -> None:
    with pytest.raises(ValueError, match="no templates"):
        choose_template("anything", {})
