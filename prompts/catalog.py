"""Workflow templates and agent definitions (docs/loop.md#roles) shipped with the service.

Both are markdown files with YAML front matter, read by one loader (`_load`) on
python-frontmatter and validated by the pydantic models below. A template's front matter
holds its steps and its markdown is `body`; an agent's front matter holds `name`, `title`,
`description`, `model` and `tools`, like Claude Code's subagents, and its markdown is the
system prompt. The front-matter key `id` (templates) or `name` (agents) must match the file
name. Nothing here reads a file at import time.

Agent definitions quote the names the code relies on as `{{name}}` placeholders (the keys
of `loopworks.prompts.facts.prompt_facts()`); loading an agent fills them in, and a name the
code does not know is an error, so no prompt can state a tool, file or field that is not
there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from frontmatter.default_handlers import YAMLHandler
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from loopworks.prompts.facts import prompt_facts

TEMPLATES_DIR = Path(__file__).parent / "templates"
AGENTS_DIR = Path(__file__).parent / "agents"

TIERS: tuple[str, ...] = ("haiku", "sonnet", "opus")
# An agent definition need not name a model: it then gets the middle tier.
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
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
# YAML only: python-frontmatter's own detection would also accept JSON or TOML front matter.
_YAML = YAMLHandler()


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
    # For `_load`: the key the file name must match, and the field the markdown fills.
    KEY: ClassVar[str] = "id"
    BODY: ClassVar[str] = "body"

    id: str = Field(min_length=1)
    type: Literal["workflow"] = "workflow"
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
    """An agent file: front matter like a Claude Code subagent's, the markdown is `prompt`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    KEY: ClassVar[str] = "name"
    BODY: ClassVar[str] = "prompt"

    name: str = Field(min_length=1)
    # Defaults to the name, so that a Claude Code subagent file (which has no title) loads.
    title: str = Field(min_length=1)
    description: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    # A YAML list, or Claude Code's comma-separated string ("Read, Grep"). Kept for the
    # format; nothing restricts a role by it (PRODUCE and REFINE get the workspace tools).
    tools: list[str] = Field(default_factory=list)
    # A tier (haiku, sonnet, opus; any case) or a concrete model id.
    model: str = DEFAULT_MODEL

    @model_validator(mode="before")
    @classmethod
    def _title_defaults_to_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "title" not in data and "name" in data:
            return {**data, "title": data["name"]}
        return data

    @field_validator("tools", mode="before")
    @classmethod
    def _comma_separated_tools(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [tool.strip() for tool in value.split(",")]
        return value

    @field_validator("tools")
    @classmethod
    def _no_empty_tool(cls, value: list[str]) -> list[str]:
        if any(not tool.strip() for tool in value):
            raise ValueError("tool names must not be empty")
        return [tool.strip() for tool in value]

    @field_validator("model")
    @classmethod
    def _tier_or_model_id(cls, value: str) -> str:
        value = value.strip()
        if value.lower() in TIERS:
            return value.lower()
        if not _MODEL_NAME.match(value):
            raise ValueError(f"must be a tier ({', '.join(TIERS)}) or a model id, got {value!r}")
        return value

    @property
    def tier(self) -> str | None:
        """The model tier, or None when the definition names a concrete model id."""
        return self.model if self.model in TIERS else None


_Entry = TypeVar("_Entry", WorkflowTemplate, AgentDefinition)
# The agent fields whose `{{name}}` placeholders are filled from the prompt facts.
_AGENT_FILLED = ("description", "prompt")


# --- templates -------------------------------------------------------------------


def load_templates(directory: Path | None = None) -> dict[str, WorkflowTemplate]:
    """Every `*.md` template in `directory` (default: the packaged ones), keyed by id."""
    root = TEMPLATES_DIR if directory is None else directory
    templates: dict[str, WorkflowTemplate] = {}
    paths: dict[str, Path] = {}
    for path in _markdown_files(root):
        template = _load(path, WorkflowTemplate)
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
        facts = prompt_facts()
    root = AGENTS_DIR if directory is None else directory
    paths = [*_markdown_files(root), *(_markdown_files(overrides) if overrides else [])]
    # Later files win: an override replaces the packaged agent of the same name.
    return {path.stem: _load(path, AgentDefinition, _AGENT_FILLED, facts) for path in paths}


# --- shared ----------------------------------------------------------------------


def _load(
    path: Path,
    model: type[_Entry],
    fill: tuple[str, ...] = (),
    facts: Mapping[str, str] | None = None,
) -> _Entry:
    """The file at `path` as `model`: its front matter, plus the markdown as `model.BODY`.

    The `fill` fields have their `{{name}}` placeholders replaced by `facts[name]` before
    validation. Every problem is a CatalogError naming the file (and the field).
    """
    front, body = _front_matter(path)
    if model.BODY in front:
        raise CatalogError(
            path, f"front matter must not define {model.BODY!r} (the markdown is the {model.BODY})"
        )
    data = {**front, model.BODY: body.strip()}
    for name in fill:
        if isinstance(data.get(name), str):
            data[name] = _fill(path, name, data[name], facts or {}, is_body=name == model.BODY)
    try:
        entry = model.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(path, f"invalid {_describe(exc, model.BODY)}") from exc
    key = getattr(entry, model.KEY)
    if key != path.stem:
        raise CatalogError(path, f"{model.KEY} {key!r} does not match the file name {path.stem!r}")
    return entry


def _front_matter(path: Path) -> tuple[dict[str, Any], str]:
    # python-frontmatter's handler finds the `---` fences and parses the YAML (safe
    # loader). Its `parse()` is not used: it reads a file without front matter, with an
    # unclosed one or with one that is no mapping as a file without front matter, where
    # a catalog file must say what is wrong.
    text = _read(path)
    if not _YAML.detect(text):
        raise CatalogError(path, "no YAML front matter: the file must start with a '---' line")
    try:
        raw, body = _YAML.split(text)
    except ValueError:
        raise CatalogError(path, "front matter is not closed by a '---' line") from None
    try:
        front = _YAML.load(raw)
    except yaml.YAMLError as exc:
        # `description: {{x}} ...` is a YAML mapping, not text: say how to write it.
        hint = " (quote a value that starts with '{{')" if "{{" in raw else ""
        raise CatalogError(path, f"front matter is not valid YAML{hint}: {exc}") from exc
    if not isinstance(front, dict):
        raise CatalogError(path, "front matter must be a YAML mapping")
    return front, body


def _fill(path: Path, field: str, text: str, facts: Mapping[str, str], *, is_body: bool) -> str:
    """`text` with every `{{name}}` replaced by its fact; an unknown name names the file."""
    where = "the markdown body" if is_body else f"front matter field {field!r}"

    def value(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name not in facts:
            raise CatalogError(
                path,
                f"unknown placeholder {match.group(0)} in {where} "
                f"(known: {', '.join(sorted(facts))})",
            )
        return facts[name]

    return _PLACEHOLDER.sub(value, text)


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


def _describe(exc: ValidationError, body: str) -> str:
    """Each error with where it is: a front-matter field, or the markdown body."""

    def where(loc: tuple[int | str, ...]) -> str:
        if loc == (body,):
            return f"markdown body (the {body})"
        return f"front matter field {'.'.join(str(part) for part in loc) or '(root)'!r}"

    return "; ".join(f"{where(error['loc'])}: {error['msg']}" for error in exc.errors())
