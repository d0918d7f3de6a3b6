"""Workflow templates (seed 000) and agent definitions (seed 003) shipped with the service.

Templates are markdown files with YAML front matter; agents are markdown files in
seed 003's `# Title` / `## Description` / `## Prompt` / `## Tools` / `## Model`
format. Nothing here reads a file at import time.

Agent definitions quote the names the code relies on as `{{name}}` placeholders (the keys
of `loopworks.llm.facts.prompt_facts()`); loading an agent fills them in, and a name the
code does not know is an error, so no prompt can state a tool, file or field that is not
there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

TEMPLATES_DIR = Path(__file__).parent / "templates"
AGENTS_DIR = Path(__file__).parent / "agents"

TIERS: tuple[str, ...] = ("haiku", "sonnet", "opus")
# Seed 003: "## Model (optional, defaults to "sonnet")".
DEFAULT_MODEL = "sonnet"

FALLBACK_TEMPLATE = "minor-edit"
# Ties go to the more specific workflow, and to one that changes something over the
# info-only one, so a tie never turns a request for work into a mere answer.
TEMPLATE_PREFERENCE: tuple[str, ...] = (
    "debugging",
    "tdd-cycle",
    "qa-demo",
    "spec-review",
    "batch-processing",
    "feature-dev",
    "minor-edit",
    "direct-skill",
    "simple-question",
)

_WIKILINK = re.compile(r"^\[\[([^\[\]\s]+)\]\]$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]*$")
_HEADING = re.compile(r"^(#{1,2})\s+(.*?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*?)\s*$")
_AGENT_SECTIONS = ("description", "prompt", "tools", "model")
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")


class CatalogError(ValueError):
    """A template or agent file that cannot be used; the message names the file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        # The default reduce would call __init__ with the formatted message only.
        return (type(self), (self.path, self.problem))


class TemplateStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    workflow: str | None = None
    description: str = Field(min_length=1)

    @field_validator("workflow")
    @classmethod
    def _wikilink(cls, value: str | None) -> str | None:
        if value is not None and not _WIKILINK.match(value):
            raise ValueError(f'must be null or a wikilink like "[[spec-review]]", got {value!r}')
        return value

    @property
    def linked_template(self) -> str | None:
        """The id of the workflow this step composes, without the brackets."""
        if self.workflow is None:
            return None
        match = _WIKILINK.match(self.workflow)
        return match.group(1) if match else None


class WorkflowTemplate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    category: str = Field(min_length=1)
    dependencies: list[str] = Field(default_factory=list)
    steps: list[TemplateStep] = Field(min_length=1)
    keywords: list[str] = Field(default_factory=list)
    quality_gates: list[str] = Field(default_factory=list)
    body: str = ""

    @field_validator("keywords")
    @classmethod
    def _lowercase_keywords(cls, value: list[str]) -> list[str]:
        keywords = [keyword.strip().lower() for keyword in value]
        if any(not keyword for keyword in keywords):
            raise ValueError("keywords must not be empty strings")
        return keywords

    @field_validator("steps")
    @classmethod
    def _unique_step_ids(cls, value: list[TemplateStep]) -> list[TemplateStep]:
        seen: set[str] = set()
        for step in value:
            if step.id in seen:
                raise ValueError(f"duplicate step id {step.id!r}")
            seen.add(step.id)
        return value

    def linked_templates(self) -> list[str]:
        """Ids of the workflows this template composes, in step order."""
        return [step.linked_template for step in self.steps if step.linked_template]


class AgentDefinition(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    title: str = Field(min_length=1)
    description: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    tools: list[str] = Field(default_factory=list)
    model: str = DEFAULT_MODEL

    @property
    def tier(self) -> str | None:
        """The model tier, or None when the definition names a concrete model id."""
        return self.model if self.model in TIERS else None


# --- templates -------------------------------------------------------------------


def load_templates(directory: Path | None = None) -> dict[str, WorkflowTemplate]:
    """Every `*.md` template in `directory` (default: the packaged ones), keyed by id."""
    root = TEMPLATES_DIR if directory is None else directory
    templates: dict[str, WorkflowTemplate] = {}
    paths: dict[str, Path] = {}
    for path in _markdown_files(root):
        template = _parse_template(path)
        templates[template.id] = template
        paths[template.id] = path
    for template_id, template in templates.items():
        for target in [*template.dependencies, *template.linked_templates()]:
            if target not in templates:
                raise CatalogError(
                    paths[template_id],
                    f"refers to workflow {target!r}, which is not in {root}",
                )
    return templates


@functools.cache
def template_ids() -> frozenset[str]:
    """Ids of the packaged templates, read once per process."""
    return frozenset(load_templates())


def _parse_template(path: Path) -> WorkflowTemplate:
    front, body = _split_front_matter(path, _read(path))
    kind = front.pop("type", "workflow")
    if kind != "workflow":
        raise CatalogError(path, f"front matter 'type' must be 'workflow', got {kind!r}")
    if "body" in front:
        raise CatalogError(path, "front matter must not define 'body' (the markdown is the body)")
    try:
        template = WorkflowTemplate.model_validate({**front, "body": body})
    except ValidationError as exc:
        raise CatalogError(path, f"invalid front matter: {_describe(exc)}") from exc
    if template.id != path.stem:
        raise CatalogError(path, f"id {template.id!r} does not match the file name {path.stem!r}")
    return template


def _split_front_matter(path: Path, text: str) -> tuple[dict[str, Any], str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise CatalogError(path, "no YAML front matter: the file must start with a '---' line")
    closing = [index for index, line in enumerate(lines) if index and line.strip() == "---"]
    if not closing:
        raise CatalogError(path, "front matter is not closed by a '---' line")
    end = closing[0]
    try:
        front = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise CatalogError(path, f"front matter is not valid YAML: {exc}") from exc
    if not isinstance(front, dict):
        raise CatalogError(path, "front matter must be a YAML mapping")
    return front, "".join(lines[end + 1 :]).strip() + "\n"


def choose_template(task: str, templates: Mapping[str, WorkflowTemplate]) -> str:
    """The template whose keywords the task mentions most; deterministic, no I/O.

    Each distinct keyword counts once, matched as a whole word or phrase, so that
    repeating a word does not outvote a better fit. Ties follow TEMPLATE_PREFERENCE;
    a task that mentions no keyword gets FALLBACK_TEMPLATE.
    """
    if not templates:
        raise ValueError("no templates to choose from")
    text = task.lower()
    scores = {
        template_id: sum(1 for keyword in set(template.keywords) if _mentions(text, keyword))
        for template_id, template in templates.items()
    }
    best = max(scores.values())
    if best == 0 and FALLBACK_TEMPLATE in templates:
        return FALLBACK_TEMPLATE
    return min((tid for tid, score in scores.items() if score == best), key=_preference)


def _mentions(text: str, keyword: str) -> bool:
    return _keyword_pattern(keyword).search(text) is not None


@functools.lru_cache(maxsize=1024)
def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    # Whole words only: "red" must not match "required", "test" must not match "latest".
    return re.compile(rf"(?<![a-z0-9]){re.escape(keyword.lower())}(?![a-z0-9])")


def _preference(template_id: str) -> tuple[int, str]:
    try:
        return (TEMPLATE_PREFERENCE.index(template_id), template_id)
    except ValueError:
        return (len(TEMPLATE_PREFERENCE), template_id)


# --- agents ----------------------------------------------------------------------


def load_agents(
    directory: Path | None = None,
    overrides: Path | None = None,
    facts: Mapping[str, str] | None = None,
) -> dict[str, AgentDefinition]:
    """Agent definitions keyed by file stem: the packaged ones, then `overrides` by name.

    An override file may also add an agent that is not packaged. Every `{{name}}` in a
    description or prompt is replaced by `facts[name]` (default: the code's prompt facts);
    an unknown name is a CatalogError naming the file and the placeholder.
    """
    if facts is None:
        # Imported here: the facts come from the model layer and the tools, which must be
        # free to import this module.
        from loopworks.llm.facts import prompt_facts

        facts = prompt_facts()
    root = AGENTS_DIR if directory is None else directory
    agents = {path.stem: _parse_agent(path, facts) for path in _markdown_files(root)}
    if overrides is not None:
        agents.update({path.stem: _parse_agent(path, facts) for path in _markdown_files(overrides)})
    return agents


def _parse_agent(path: Path, facts: Mapping[str, str]) -> AgentDefinition:
    title: str | None = None
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_fence = False
    for number, line in enumerate(_read(path).splitlines(), start=1):
        # A fenced block may show markdown (e.g. the reflection's "## Framework
        # Reflection"); its headings belong to the prompt, not to the file's structure.
        heading = None if in_fence else _HEADING.match(line)
        if _FENCE.match(line):
            in_fence = not in_fence
        if heading and len(heading.group(1)) == 1:
            if title is not None:
                raise CatalogError(
                    path, f"line {number}: a second '# ' heading; only the title may use '#'"
                )
            title = heading.group(2)
            continue
        if title is None:
            if line.strip():
                raise CatalogError(path, "must start with a '# Title' line")
            continue
        if heading:
            name = heading.group(2).lower()
            if name not in _AGENT_SECTIONS:
                allowed = ", ".join(f"'## {s.title()}'" for s in _AGENT_SECTIONS)
                problem = f"unknown section '## {heading.group(2)}' (allowed: {allowed})"
                raise CatalogError(path, f"line {number}: {problem}")
            if name in sections:
                raise CatalogError(path, f"line {number}: section '## {name.title()}' repeated")
            current = sections[name] = []
            continue
        if current is None:
            if line.strip():
                raise CatalogError(path, f"line {number}: text before the first '## ' section")
            continue
        current.append(line)
    if in_fence:
        raise CatalogError(path, "a ``` code fence is never closed")
    if not title:
        raise CatalogError(path, "must start with a '# Title' line")
    for required in ("description", "prompt"):
        if required not in sections:
            raise CatalogError(path, f"missing '## {required.title()}' section")
        if not _block(sections[required]):
            raise CatalogError(path, f"'## {required.title()}' section is empty")
    return AgentDefinition(
        name=path.stem,
        title=title,
        description=_fill(path, "Description", _block(sections["description"]), facts),
        prompt=_fill(path, "Prompt", _block(sections["prompt"]), facts),
        tools=_tools(path, sections.get("tools", [])),
        model=_model(path, sections.get("model")),
    )


def _fill(path: Path, section: str, text: str, facts: Mapping[str, str]) -> str:
    """`text` with every `{{name}}` replaced by its fact; an unknown name names the file."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name not in facts:
            raise CatalogError(
                path,
                f"unknown placeholder {match.group(0)} in '## {section}' "
                f"(known: {', '.join(sorted(facts))})",
            )
        return facts[name]

    return _PLACEHOLDER.sub(value, text)


def _block(lines: list[str]) -> str:
    # Keep inner line breaks and indentation: prompts are written as markdown.
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(line.rstrip() for line in lines[start:end])


def _tools(path: Path, lines: list[str]) -> list[str]:
    tools: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        bullet = _BULLET.match(line)
        if not bullet or not bullet.group(1):
            raise CatalogError(path, f"'## Tools' must be a bullet list, got {line.strip()!r}")
        tools.append(bullet.group(1))
    return tools


def _model(path: Path, lines: list[str] | None) -> str:
    if lines is None:
        return DEFAULT_MODEL
    values = [line.strip() for line in lines if line.strip()]
    if len(values) != 1:
        raise CatalogError(
            path, f"'## Model' must hold exactly one tier ({', '.join(TIERS)}) or model id"
        )
    value = values[0]
    if value.lower() in TIERS:
        return value.lower()
    if not _MODEL_NAME.match(value):
        raise CatalogError(path, f"'## Model' {value!r} is neither a tier nor a model id")
    return value


# --- shared ----------------------------------------------------------------------


def _markdown_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise CatalogError(directory, "not a directory")
    # Sorted, so that loading (and which file's error surfaces first) is deterministic.
    return sorted(path for path in directory.glob("*.md") if path.is_file())


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").removeprefix("\ufeff")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(path, f"cannot be read: {exc}") from exc


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}"
        for error in exc.errors()
    )
