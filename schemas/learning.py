"""Inputs and outputs of what a run learns after reflecting: the task curator's step, the
skill sub-loop (`SkillLoopWorkflow`) and its three activities."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from loopworks.schemas.contexts import AcceptedFile
from loopworks.schemas.curation import CuratorPayload, SkillCuration
from loopworks.schemas.playbook import (
    FILE_MAX_CHARS,
    AddDelta,
    Delta,
    PlaybookItem,
    PlaybookRead,
    UpdateDelta,
    files_named,
)
from loopworks.schemas.run import Allowance, TokenUsage
from loopworks.schemas.steps import GitLocation, ModelOutput, ModelStep


class CurateInput(ModelStep):
    task: str
    outcome: str
    summary: str
    friction_points: list[str] = Field(default_factory=list)
    proposed_changes: list[str] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)
    playbook: PlaybookRead


class CurateOutput(ModelOutput):
    payload: CuratorPayload


class SkillLoopInput(BaseModel):
    """What the run hands its skill sub-loop: the curator's payload and the run's commit."""

    run_id: str
    iteration: int
    task: str
    payload: CuratorPayload
    workspace: GitLocation
    playbook: PlaybookRead | None = None
    # What is left of the run's budget for the whole sub-loop (docs/loop.md#budgets); None:
    # no limit, or a sub-loop started before runs passed it.
    allowance: Allowance | None = None


class SkillLoopResult(BaseModel):
    """`commit`: the run's new commit (the accepted files and the skill trajectory), or
    None when the generator wrote nothing."""

    commit: str | None = None
    accepted: list[str] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict)
    deltas: list[Delta] = Field(default_factory=list)
    files: dict[str, str] = Field(
        default_factory=dict, description="the kept files, path to text, for the playbook"
    )
    usage: TokenUsage = Field(default_factory=TokenUsage)


class GenerateSkillsInput(ModelStep):
    task: str
    curator_summary: str
    helper_paths: list[str]
    reference_requests: list[str]
    reference_paths: list[str]
    playbook: PlaybookRead | None = None
    workspace: GitLocation
    committed_at: datetime


class GenerateSkillsOutput(ModelOutput):
    commit: str = Field(
        description="the asked-for files written and the skill trajectory on the run's "
        "commit, not yet the run's; the run's own commit when none was written"
    )
    files: dict[str, str] = Field(default_factory=dict, description="path to content")
    summary: str = ""


class ReviewSkillsInput(ModelStep):
    task: str
    helper_paths: list[str]
    reference_paths: list[str]
    files: dict[str, str]
    generator_summary: str
    workspace: GitLocation = Field(description="the generator's commit")
    committed_at: datetime


class ReviewSkillsOutput(ModelOutput):
    commit: str = Field(description="the generator's commit without the rejected files")
    accepted: list[AcceptedFile] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict, description="path to why")


class CurateSkillsInput(ModelStep):
    task: str
    accepted: list[AcceptedFile]
    playbook: PlaybookRead | None = None


class CurateSkillsOutput(ModelOutput):
    curation: SkillCuration


# What the sub-loop says of a file too long to keep, after the start of it it carries.
CUT_NOTE = (
    f"\n… [cut here: a skill file must be shorter than {FILE_MAX_CHARS:,} characters; this "
    "one is neither reviewed nor kept]"
)


def fits(text: str) -> bool:
    """Whether a file the skill generator wrote may be kept: shorter than FILE_MAX_CHARS,
    as the generator is told (prompts/facts.py). The playbook would store one of exactly
    that length, but in runs recorded before long files were marked, a longer file reached
    the reflector cut to that length without a word, and it must not be kept."""
    return len(text) < FILE_MAX_CHARS


def marked_cut(text: str) -> str:
    """A file too long to keep, as the sub-loop carries it: its start, then CUT_NOTE, so
    no step takes it for the whole file (and `fits` never holds for it)."""
    return text[:FILE_MAX_CHARS] + CUT_NOTE


def kept_files(accepted: list[AcceptedFile]) -> dict[str, str]:
    """The files the skill sub-loop kept, path to text, to store with the playbook
    (docs/playbook.md#files): each as the reflector read it, and whole (`fits`). The
    review rejects a longer one; one a run recorded before that accepted stays on that
    run's branch only."""
    return {file.review.path: file.content for file in accepted if fits(file.content)}


def without_missing_files(
    deltas: list[Delta], kept: dict[str, str], items: list[PlaybookItem]
) -> tuple[list[Delta], list[str]]:
    """The skill curator's deltas that name no file later runs would not get, and why
    each other one was dropped. An item is given only the files the batch brings that its
    content names (and, once updated, those it already had, playbook/deltas.py): an `ADD`
    naming a helper or note that is not among the `kept` files, or an `UPDATE` naming one
    neither kept nor its item's, would tell later runs to use a file they never get."""
    own = {item.id: set(item.files) for item in items}
    recorded: list[Delta] = []
    dropped: list[str] = []
    for delta in deltas:
        if isinstance(delta, AddDelta | UpdateDelta):
            given = set(kept)
            if isinstance(delta, UpdateDelta):
                given |= own.get(delta.item_id, set())
            missing = [path for path in files_named(delta.content) if path not in given]
            if missing:
                dropped.append(f"{delta.op} naming {', '.join(missing)}: not a file kept")
                continue
        recorded.append(delta)
    return recorded, dropped
