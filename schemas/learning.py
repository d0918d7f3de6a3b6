"""Inputs and outputs of what a run learns after reflecting: the task curator's step, the
skill sub-loop (`SkillLoopWorkflow`) and its three activities."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from loopworks.schemas.contexts import AcceptedFile
from loopworks.schemas.curation import CuratorPayload, SkillCuration
from loopworks.schemas.playbook import FILE_MAX_CHARS, Delta, PlaybookRead
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
    commit: str = Field(description="the files and the skill trajectory, not yet the run's")
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


def kept_files(accepted: list[AcceptedFile]) -> dict[str, str]:
    """The files the skill sub-loop kept, path to text, to store with the playbook
    (docs/playbook.md#files): each as the reflector read it, but none the generator's read
    may have cut short (at FILE_MAX_CHARS); that one stays on the run's branch only."""
    return {
        file.review.path: file.content for file in accepted if len(file.content) < FILE_MAX_CHARS
    }
