"""The delta playbook (after ACE): itemised context that runs learn from runs
(docs/playbook.md).

A playbook is a list of short items, one per origin repository (and one for the service's
own default origin). Models never rewrite it: they propose deltas (`ADD`, `UPDATE`,
`TAG`, `REMOVE`), and code (`loopworks.playbook.deltas`) applies them, one batch at a
time, through the playbook's only writer, `PlaybookWorkflow`. Every batch that changes
something makes a new numbered version, committed on origin as `PLAYBOOK_PATH` on
`PLAYBOOK_BRANCH`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

PLAYBOOK_BRANCH = "loops/playbook"
PLAYBOOK_PATH = ".loops/playbook.jsonl"
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"
BATCH_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"
# How long an id a delta may name: far longer than the ids the writer mints
# (`item_id`), as long as the task curator's (`ProposedUpdate.id`), so that every outcome,
# which echoes it, is bounded. Not the minted ids' pattern: a delta naming another id
# (a typo, an item written by hand) was always taken, and a writer whose recorded
# signal no longer parses drops it on replay, so it could not replay its history.
ITEM_ID_MAX = 100
# Commit trailers on the playbook branch: which version a commit is, and what made it.
VERSION_TRAILER = "Playbook-Version"
BATCH_TRAILER = "Playbook-Batch"
SOURCE_TRAILER = "Playbook-Source"
# Where the skill sub-loop writes helpers and reference notes, in a run's workspace and,
# once kept, beside PLAYBOOK_PATH on the playbook branch (docs/playbook.md#files).
SKILLS_DIR = ".loops/skills"
REFERENCES_DIR = ".loops/references"
FILE_PATH_PATTERN = r"^\.loops/(skills|references)/[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
FILE_MAX_CHARS = 20_000
# A file's path as an item's content names it: the pattern unanchored, up to the first
# character a path cannot hold (a backtick, a blank); a sentence's full stop is not its.
_NAMED_FILE = re.compile(r"\.loops/(?:skills|references)/[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_BATCH_FILES = 10


class ItemKind(StrEnum):
    SKILL = "skill"  # a reusable way of doing something: a helper, a runbook, a command
    CONSTRAINT = "constraint"  # a rule the work must follow
    REFERENCE = "reference"  # where knowledge lives: a file, a spec, a document
    CLARIFICATION = "clarification"  # an answer to a question a run had to work out


class Tag(StrEnum):
    HELPFUL = "helpful"
    HARMFUL = "harmful"
    NEUTRAL = "neutral"


class PlaybookItem(BaseModel):
    """One line of `.loops/playbook.jsonl`."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable id, `pb-<version it was added in>-<n>`.")
    kind: ItemKind
    section: str = Field(description="A short heading that groups items, e.g. `testing`.")
    content: str
    helpful: int = Field(default=0, ge=0)
    harmful: int = Field(default=0, ge=0)
    neutral: int = Field(default=0, ge=0)
    sources: list[str] = Field(
        default_factory=list,
        description="Ids of the runs it came from: the first two and the latest three.",
    )
    more_sources: int = Field(
        default=0, ge=0, description="How many runs it came from besides those in `sources`."
    )
    created_in: int = Field(ge=1, description="The version that added it.")
    updated_in: int = Field(ge=1, description="The last version that added, changed or tagged it.")
    files: list[str] = Field(
        default_factory=list,
        description="Paths of the files stored with it, beside the playbook: the helpers "
        "and notes its content names (docs/playbook.md#files).",
    )

    def to_line(self) -> str:
        """Its line of PLAYBOOK_PATH; an item without files, or without more sources than
        it names, is written as before those existed, so a playbook's older lines never
        change for it."""
        unset = {"files"} if not self.files else set()
        unset |= {"more_sources"} if not self.more_sources else set()
        return self.model_dump_json(exclude=unset or None)


def files_named(content: str) -> list[str]:
    """The paths of the playbook's files (under SKILLS_DIR or REFERENCES_DIR) that
    `content` names, each once, in order."""
    return list(dict.fromkeys(m.group().rstrip(".") for m in _NAMED_FILE.finditer(content)))


def blob_id(text: str) -> str:
    """The id git gives a file holding `text` (UTF-8) in a SHA-1 repository: what a
    playbook version's tree names for each of its files, computed without git (the
    playbook's writer applies batches inside its workflow)."""
    data = text.encode()
    header = b"blob %d\0" % len(data)
    return hashlib.sha1(header + data, usedforsecurity=False).hexdigest()


FilePath = Annotated[str, StringConstraints(pattern=FILE_PATH_PATTERN)]
FileText = Annotated[str, StringConstraints(max_length=FILE_MAX_CHARS)]


# Which runs an item's `sources` names: the first (where the lesson came from) and the
# latest. The rest are counted: every run that learns a lesson again joins its sources,
# which no budget counts, yet every prompt given the item carries them.
SOURCES_FIRST = 2
SOURCES_LATEST = 3


class PlaybookFiles(BaseModel):
    """Files of a playbook version a run was given: where they are (the version's commit
    on the run's origin) and each one's path and blob id. Written into the run's
    checkouts, never committed unless the run changes them (docs/playbook.md#files)."""

    commit: str
    files: dict[str, str] = Field(default_factory=dict, description="path to git blob id")


def item_id(version: int, index: int) -> str:
    """The id of the `index`-th item a version adds: never reused, since versions only grow."""
    return f"pb-{version}-{index}"


# -- deltas: what a model may propose ---------------------------------------------------

SECTION_MAX = 80
CONTENT_MAX = 2000
MAX_BATCH_DELTAS = 200

ItemId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=ITEM_ID_MAX),
    Field(description="The item's id (`pb-…`)."),
]


class AddDelta(BaseModel):
    """Add an item (merged into a near-duplicate of the same kind instead, if one exists)."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["ADD"] = Field(default="ADD", description="`ADD`: a new item.")
    kind: ItemKind = Field(description="`skill`, `constraint`, `reference` or `clarification`.")
    section: str = Field(
        min_length=1, max_length=SECTION_MAX, description="A short heading, e.g. `testing`."
    )
    content: str = Field(
        min_length=1, max_length=CONTENT_MAX, description="The lesson, self-contained."
    )


class UpdateDelta(BaseModel):
    """Replace an existing item's content."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["UPDATE"] = Field(default="UPDATE", description="`UPDATE`: new content.")
    item_id: ItemId
    content: str = Field(
        min_length=1, max_length=CONTENT_MAX, description="The item's whole new content."
    )


class TagDelta(BaseModel):
    """Count one use of an item as helpful, harmful or neutral."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["TAG"] = Field(default="TAG", description="`TAG`: count one use.")
    item_id: ItemId
    tag: Tag = Field(description="`helpful`, `harmful` or `neutral`.")


class RemoveDelta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["REMOVE"] = Field(default="REMOVE", description="`REMOVE`: drop the item.")
    item_id: ItemId
    reason: str = Field(default="", max_length=CONTENT_MAX, description="Why it no longer holds.")


Delta = Annotated[AddDelta | UpdateDelta | TagDelta | RemoveDelta, Field(discriminator="op")]


class DeltaBatch(BaseModel):
    """Deltas applied together, exactly once: a batch id seen before changes nothing."""

    model_config = ConfigDict(extra="forbid")

    batch_id: str = Field(pattern=BATCH_ID_PATTERN)
    source: str = Field(
        min_length=1, max_length=200, description="The run id, or who curated by hand."
    )
    deltas: list[Delta] = Field(default_factory=list, max_length=MAX_BATCH_DELTAS)
    files: dict[FilePath, FileText] = Field(
        default_factory=dict,
        max_length=MAX_BATCH_FILES,
        description="Files to store with the items of this batch (path to text, paths "
        "under `.loops/skills/` or `.loops/references/`): an `ADD` or `UPDATE` whose "
        "content names a path gets that file.",
    )


DeltaResult = Literal["added", "merged", "updated", "tagged", "removed", "unknown_item"]


class DeltaOutcome(BaseModel):
    op: Literal["ADD", "UPDATE", "TAG", "REMOVE"]
    result: DeltaResult
    item_id: str | None = Field(default=None, description="The item it touched, if any.")


def count_results(outcomes: list[DeltaOutcome]) -> dict[DeltaResult, int]:
    """How many deltas ended in each result, results in order."""
    return dict(sorted(Counter(outcome.result for outcome in outcomes).items()))


class AppliedBatch(BaseModel):
    """What applying a batch did. `version` is the version it made, or the current one
    when it changed nothing (then no version is made)."""

    batch_id: str
    version: int
    changed: bool
    outcomes: list[DeltaOutcome] = Field(
        default_factory=list,
        description="Each delta's, in order: in the answer of the call that applied it. "
        "The writer remembers only `results`, so a batch sent again has none.",
    )
    results: dict[DeltaResult, int] = Field(
        default_factory=dict, description="How many deltas ended in each result."
    )
    pruned: list[str] = Field(default_factory=list, description="Ids of the items pruned.")
    commit: str | None = Field(default=None, description="The version's commit on origin.")
    error: str | None = Field(
        default=None,
        description="Why a run's batch was not applied (its commit failed, or origin could "
        "not be read): nothing of it is, and sent again it is tried again.",
    )

    @model_validator(mode="after")
    def _counted(self) -> AppliedBatch:
        # Answers recorded before `results` existed carry only their outcomes.
        if self.outcomes and not self.results:
            self.results = count_results(self.outcomes)
        return self


# What a remembered failure keeps of its message.
ERROR_MAX = 1000


class BatchRecord(BaseModel):
    """What the writer remembers of a batch it applied, or of a run's batch it could not
    (`error`): what its senders read (the `applied` query) and what tells a batch sent
    again from a new one. Carried through continue-as-new, whose input Temporal bounds
    (2 MiB), so it keeps counts of the deltas' results rather than their outcomes (up to
    200 a batch, each naming an id)."""

    batch_id: str
    version: int
    changed: bool
    commit: str | None = None
    results: dict[DeltaResult, int] = Field(default_factory=dict)
    pruned: list[str] = Field(default_factory=list)
    error: str | None = Field(default=None, max_length=ERROR_MAX)

    @model_validator(mode="before")
    @classmethod
    def _from_applied(cls, data: Any) -> Any:
        # A writer from before records were slim carried whole answers, outcomes and all.
        if isinstance(data, dict) and "outcomes" in data:
            return cls.of(AppliedBatch.model_validate(data)).model_dump()
        return data

    @classmethod
    def of(cls, applied: AppliedBatch) -> BatchRecord:
        return cls(
            batch_id=applied.batch_id,
            version=applied.version,
            changed=applied.changed,
            commit=applied.commit,
            results=applied.results,
            pruned=applied.pruned,
            error=applied.error[:ERROR_MAX] if applied.error is not None else None,
        )

    def answer(self) -> AppliedBatch:
        return AppliedBatch(
            batch_id=self.batch_id,
            version=self.version,
            changed=self.changed,
            commit=self.commit,
            results=self.results,
            pruned=self.pruned,
            error=self.error,
        )


class PlaybookLimits(BaseModel):
    """What keeps a playbook small (settings: LOOPS_PLAYBOOK_*)."""

    max_tokens: int = Field(default=4000, ge=100, description="The whole playbook's budget.")
    unused_after: int = Field(
        default=50, ge=1, description="Versions without use after which an item is pruned."
    )
    similarity: float = Field(
        default=0.85, gt=0, le=1, description="At or above this, an ADD merges into an item."
    )
    # Not a setting: what keeps a group commit's activity input (whole playbooks, one a
    # version) well under Temporal's payload limits (2 MiB, a warning at 512 KiB).
    group_bytes: int = Field(
        default=256 * 1024, ge=1, description="A group commit's versions, at most, in bytes."
    )


class Playbook(BaseModel):
    """One version of a playbook: its name, number and items."""

    name: str = Field(pattern=NAME_PATTERN)
    version: int = Field(default=0, ge=0, description="0: nothing was ever added.")
    items: list[PlaybookItem] = Field(default_factory=list)
    files: dict[str, str] = Field(
        default_factory=dict,
        description="path to git blob id: every file its items name, in its version's "
        "tree beside PLAYBOOK_PATH",
    )

    def to_jsonl(self) -> str:
        return "".join(item.to_line() + "\n" for item in self.items)

    @classmethod
    def from_jsonl(
        cls,
        name: str,
        version: int,
        text: str,
        files: dict[str, str] | None = None,
    ) -> Playbook:
        items = [PlaybookItem.model_validate_json(line) for line in text.splitlines() if line]
        named = {path for item in items for path in item.files}
        held = {path: blob for path, blob in (files or {}).items() if path in named}
        return cls(name=name, version=version, items=items, files=held)

    def files_of(self, items: list[PlaybookItem]) -> dict[str, str]:
        """The files (path to blob id) that `items` name, as this version holds them."""
        return {
            path: self.files[path] for item in items for path in item.files if path in self.files
        }


class PlaybookVersion(BaseModel):
    """One commit of the playbook branch."""

    version: int
    commit: str
    batch_id: str | None = None
    source: str | None = None
    committed_at: str | None = None
    items: int | None = None


class PlaybookUse(BaseModel):
    """Which playbook a run was given at hydration: its version and the items chosen."""

    name: str
    version: int = 0
    item_ids: list[str] = Field(default_factory=list)
    pinned: bool = False
    files: PlaybookFiles | None = Field(
        default=None, description="The files those items name, written into its workspace."
    )


# -- naming -----------------------------------------------------------------------------


def playbook_name(origin: str) -> str:
    """The playbook of an origin repository: a readable slug of its last path segment and
    a short hash of the whole address (two repositories named `app` stay apart).

    Named by the origin the run resolved, never by what the request said: runs without a
    repository and a task graph's loops on the service's default origin
    (`<data dir>/origin.git`) share its one playbook, `origin-<hash>`.
    """
    address = origin.strip().rstrip("/")
    last = re.split(r"[/:]", address)[-1].removesuffix(".git").lower()
    slug = re.sub(r"[^a-z0-9._-]+", "-", last).strip("-._")[:60] or "repo"
    digest = hashlib.sha256(address.encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def workflow_id(name: str) -> str:
    """The id of the playbook's one writer, `PlaybookWorkflow`."""
    return f"playbook/{name}"


class PlaybookInput(BaseModel):
    """`PlaybookWorkflow`'s input; `playbook` and `applied` carry it through continue-as-new."""

    name: str = Field(pattern=NAME_PATTERN)
    origin: str = Field(description="The repository whose playbook branch holds it.")
    limits: PlaybookLimits = Field(default_factory=PlaybookLimits)
    playbook: Playbook | None = Field(default=None, description="None: load it from origin.")
    applied: dict[str, BatchRecord] = Field(
        default_factory=dict, description="The latest batches applied, by id."
    )
    # Tests lower it to see continue-as-new without a long history.
    continue_after_batches: int | None = None


class PlaybookState(BaseModel):
    """What `PlaybookWorkflow`'s `describe` query answers."""

    name: str
    origin: str
    version: int
    items: int
    batches_applied: int


# -- activity inputs --------------------------------------------------------------------


class PlaybookRead(BaseModel):
    """Which playbook to read, and which version (None: the current one)."""

    name: str = Field(pattern=NAME_PATTERN)
    origin: str
    version: int | None = Field(default=None, ge=1)


class PlaybookWrite(BaseModel):
    origin: str
    playbook: Playbook
    batch_id: str
    source: str
    committed_at: datetime


class VersionWrite(BaseModel):
    """One version to commit: the playbook as that version has it, and the batch that
    made it."""

    playbook: Playbook
    batch_id: str
    source: str
    contents: dict[str, str] = Field(
        default_factory=dict,
        description="path to text of the files this version adds: the batch brought them",
    )


class PlaybookVersionsWrite(BaseModel):
    """Consecutive versions the writer commits in one push (the batches that arrived
    while it was committing the ones before)."""

    origin: str
    versions: list[VersionWrite] = Field(min_length=1)
    committed_at: datetime


class PlaybookDelivery(BaseModel):
    """A batch for the playbook `name` of `origin`, sent through its workflow."""

    name: str = Field(pattern=NAME_PATTERN)
    origin: str
    batch: DeltaBatch
