"""What the curating roles answer: the task curator's payload and the skill sub-loop's
reflector and curator, and the reflector's tags on the playbook items a run was given.

Models propose; code decides. `curated_deltas` turns the task curator's
`proposed_updates` into playbook deltas; a non-empty `python_helpers` or
`reference_requests` starts the skill sub-loop (`SkillLoopWorkflow`).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from loopworks.schemas.playbook import (
    CONTENT_MAX,
    ITEM_ID_MAX,
    SECTION_MAX,
    AddDelta,
    Delta,
    ItemKind,
    RemoveDelta,
    Tag,
    TagDelta,
    UpdateDelta,
)

# SKILLS_DIR and REFERENCES_DIR: where the skill generator writes, in the run's workspace
# (committed on the run's branch; what is kept is stored with the playbook too,
# docs/playbook.md#files).
from loopworks.schemas.playbook import REFERENCES_DIR as REFERENCES_DIR
from loopworks.schemas.playbook import SKILLS_DIR as SKILLS_DIR

HELPER_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
MAX_HELPERS = 5


class Priority(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class ProposedUpdate(BaseModel):
    """A change the task curator proposes. `action` (default `add`) says what the code does with
    it: `add` a new item (`target` is its section, `description` its content), `update`
    the item whose id is `id` (new content `description`), or `remove` the item `id`."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1,
        max_length=ITEM_ID_MAX,
        description="For `update` and `remove`: the playbook item's id (`pb-…`). For "
        "`add`: a short label of your own; the playbook assigns the item's id.",
    )
    description: str = Field(
        min_length=1,
        max_length=CONTENT_MAX,
        description="The item's content: one lesson, stated so a later run on this "
        "repository can act on it without this run's context.",
    )
    target: str = Field(
        min_length=1,
        max_length=SECTION_MAX,
        description="The section the item belongs to (`testing`, `style`, `layout`, …), "
        "or the path or skill it is about.",
    )
    priority: Priority = Field(description="`low`, `medium` or `high`.")
    kind: ItemKind = Field(
        default=ItemKind.CONSTRAINT,
        description="For `add`: `skill`, `constraint`, `reference` or `clarification`.",
    )
    action: Literal["add", "update", "remove"] = Field(
        default="add", description="`add` (the default), `update` or `remove`."
    )


class CuratorPayload(BaseModel):
    """The task curator's answer: what the run teaches the playbook
    (docs/playbook.md#what-a-run-sends-back)."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(min_length=1, description="One sentence: what you decided and why.")
    proposed_updates: list[ProposedUpdate] = Field(
        default_factory=list,
        max_length=20,
        description="Changes to the repository's playbook; empty when the run taught "
        "nothing a later run needs.",
    )
    python_helpers: list[str] = Field(
        default_factory=list,
        max_length=MAX_HELPERS,
        description="Names of Python helper scripts worth generating for later runs "
        "(lowercase snake_case, e.g. `check_links`). Non-empty starts the skill sub-loop, "
        "which writes, checks and records them.",
    )
    reference_requests: list[str] = Field(
        default_factory=list,
        max_length=MAX_HELPERS,
        description="Knowledge a later run would need written down (a convention, a "
        "file's role, how to run something). Non-empty starts the skill sub-loop, which "
        "writes a reference note for each from what the repository holds.",
    )


def curated_deltas(payload: CuratorPayload) -> list[Delta]:
    """The playbook deltas of the curator's proposed updates, in order."""
    deltas: list[Delta] = []
    for update in payload.proposed_updates:
        if update.action == "update":
            deltas.append(UpdateDelta(item_id=update.id, content=update.description))
        elif update.action == "remove":
            deltas.append(RemoveDelta(item_id=update.id, reason=update.description))
        else:
            section = update.target
            deltas.append(AddDelta(kind=update.kind, section=section, content=update.description))
    return deltas


def helper_names(payload: CuratorPayload) -> list[str]:
    """The helpers asked for, as file-safe names, each once."""
    names: list[str] = []
    for raw in payload.python_helpers:
        name = re.sub(r"[^a-z0-9_]+", "_", raw.strip().lower()).strip("_")[:64]
        if name and not name[0].isalpha():
            name = f"helper_{name}"[:64]
        if name and name not in names:
            names.append(name)
    return names


def helper_path(name: str) -> str:
    return f"{SKILLS_DIR}/{name}.py"


class ItemTag(BaseModel):
    """The reflector's judgement of one playbook item the run was given."""

    model_config = ConfigDict(extra="forbid")

    item_id: str = Field(min_length=1, description="The item's id, as given (`pb-…`).")
    tag: Tag = Field(
        description="`helpful` when following it moved the run forward, `harmful` when "
        "it misled the run, `neutral` when it did not matter."
    )


def tag_deltas(tags: list[ItemTag], given: list[str]) -> list[Delta]:
    """TAG deltas for the items the run was given; a tag on any other id is dropped (a
    model must not score an item it never saw), as is one on an id longer than a delta
    may name (an item written by hand), and each item is tagged once."""
    deltas: list[Delta] = []
    seen: set[str] = set()
    for tag in tags:
        named = tag.item_id in given and len(tag.item_id) <= ITEM_ID_MAX
        if named and tag.item_id not in seen:
            seen.add(tag.item_id)
            deltas.append(TagDelta(item_id=tag.item_id, tag=tag.tag))
    return deltas


class HelperVerdict(StrEnum):
    ACCEPT = "ACCEPT"
    REJECT = "REJECT"


class HelperReview(BaseModel):
    """The skill reflector's review of one file the generator wrote."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file's path, as listed in **Files**.")
    verdict: HelperVerdict = Field(
        description="`ACCEPT` when the file is correct, reusable and documented; `REJECT` "
        "otherwise."
    )
    check_command: str = Field(
        default="",
        max_length=1000,
        description="For a Python helper: a shell command, run from the repository root, "
        "that exits 0 only when the helper works (for example "
        "`python3 .loops/skills/name.py --self-test`). Empty for a reference note.",
    )
    feedback: str = Field(default="", description="What is wrong, or why it is good.")


class SkillReview(BaseModel):
    """The skill reflector's answer."""

    model_config = ConfigDict(extra="forbid")

    reviews: list[HelperReview] = Field(
        default_factory=list, description="One review per file listed in **Files**."
    )


class SkillCuration(BaseModel):
    """The skill curator's answer: the playbook deltas for what the sub-loop accepted."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(min_length=1, description="One sentence: what you recorded.")
    deltas: list[Delta] = Field(
        default_factory=list,
        max_length=20,
        description="Playbook operations: `ADD` {kind, section, content}, `UPDATE` "
        "{item_id, content}, `TAG` {item_id, tag}, `REMOVE` {item_id, reason}. One `ADD` "
        "of kind `skill` per accepted helper, naming its path and how to run it; one of "
        "kind `reference` per accepted reference note, naming its path. A file is kept "
        "for later runs only with an item whose content names its exact path. Do not add "
        "what an existing item already says: `UPDATE` it.",
    )


def reference_paths(requests: list[str]) -> list[str]:
    """Where each reference note goes: a slug of the request, numbered so two requests
    with the same words still get a file each."""
    paths = []
    for number, request in enumerate(requests, start=1):
        slug = re.sub(r"[^a-z0-9]+", "-", request.lower()).strip("-")[:48] or "note"
        paths.append(f"{REFERENCES_DIR}/{number:02d}-{slug}.md")
    return paths
