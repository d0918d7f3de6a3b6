"""The skill sub-loop's three steps (docs/playbook.md#the-skill-sub-loop): the generator
writes helpers and reference notes into the run's workspace, the reflector reviews them and
code runs each helper's check, the curator proposes the playbook deltas for what was kept.

The generator's commit holds, on the run's commit, only the asked-for files it wrote and
its trajectory: whatever else it changed is left out. It is published to the run's work
ref (the reflector may run on another worker) but becomes the run's only when the
workflow adopts the reflector's commit, which drops every rejected file. A generator that
wrote none of its files commits nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from loopworks.activities.curation import current_items
from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import refusing_unsafe_paths
from loopworks.activities.heartbeat import heartbeating
from loopworks.activities.model_calls import consult, run_agent
from loopworks.agent.loop import AgentOutcome
from loopworks.agent.trajectory import to_jsonl
from loopworks.checks.output import stoppable
from loopworks.checks.runner import run_command_check
from loopworks.schemas.contexts import (
    AcceptedFile,
    SkillCuratorContext,
    SkillGeneratorContext,
    SkillReflectorContext,
)
from loopworks.schemas.curation import HelperReview, HelperVerdict, SkillCuration, SkillReview
from loopworks.schemas.learning import (
    CurateSkillsInput,
    CurateSkillsOutput,
    GenerateSkillsInput,
    GenerateSkillsOutput,
    ReviewSkillsInput,
    ReviewSkillsOutput,
    fits,
    kept_files,
    marked_cut,
    without_missing_files,
)
from loopworks.schemas.playbook import FILE_MAX_CHARS, ItemKind
from loopworks.schemas.roles import Role
from loopworks.schemas.rules import CommandCheck
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import trajectory_path
from loopworks.workspace import files as workspace_files
from loopworks.workspace import playbook_files
from loopworks.workspace.files import UnsafePath
from loopworks.workspace.graph_records import keep_run_records

# A helper's check gets this long; a helper is a small script, not a test suite.
CHECK_TIMEOUT_SECONDS = 60
FILE_CHARS = FILE_MAX_CHARS
TOO_LONG = (
    f"it is too long: a skill file must be shorter than {FILE_MAX_CHARS:,} characters, the "
    "most the playbook stores"
)


class SkillActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="generate_skills")
    async def generate_skills(self, step: GenerateSkillsInput) -> GenerateSkillsOutput:
        deps, workspaces = self.deps, self.deps.workspaces
        items = await current_items(deps, step.playbook)
        existing = [item for item in items if item.kind == ItemKind.SKILL]
        context = SkillGeneratorContext.asking(
            task=step.task,
            curator_summary=step.curator_summary,
            helper_paths=step.helper_paths,
            reference_requests=step.reference_requests,
            reference_paths=step.reference_paths,
            existing_skills=existing,
        )
        async with heartbeating():
            workdir = await asyncio.to_thread(workspaces.checkout_at, step.run_id, step.workspace)
            outcome = await run_agent(
                deps, Role.SKILL_GENERATOR, step, context, workdir, "skill", deliverable=None
            )
            with refusing_unsafe_paths():
                # The run's records are the worker's: what a command did to them is undone
                # (its helpers and notes beside them are its work, and stay).
                undone = await asyncio.to_thread(keep_run_records, workdir, step.workspace.commit)
                if undone:
                    activity.logger.warning(
                        "put back the run's records a command changed: %s", undone
                    )
                # A playbook's file the run was given, left as it was, is not the generator's.
                given = playbook_files.unchanged(workdir)
                asked = [*step.helper_paths, *step.reference_paths]
                files = _read_files(workdir, [path for path in asked if path not in given])
                if not files:
                    # Nothing to review, so nothing to keep: the run keeps its own commit.
                    return _generated(step.workspace.commit, files, outcome)
                trajectory = trajectory_path(step.iteration, "skill")
                workspace_files.write_text(workdir, trajectory, to_jsonl(outcome.records))
            # The generator has every workspace tool, and what it did besides its files no
            # evaluation, proof or QA saw: only the asked-for files it wrote and its
            # trajectory are committed, every other path stays as the run's commit has it.
            message = f"skill sub-loop · generate: {', '.join(files)}"
            commit = await asyncio.to_thread(
                workspaces.commit, workdir, message, step.committed_at, [*files, trajectory]
            )
            await asyncio.to_thread(workspaces.publish, workdir, step.run_id, commit)
        return _generated(commit, files, outcome)

    @activity.defn(name="review_skills")
    async def review_skills(self, step: ReviewSkillsInput) -> ReviewSkillsOutput:
        """The reflector's verdicts, then each accepted helper's check command; the
        rejected files leave the commit."""
        deps, workspaces = self.deps, self.deps.workspaces
        # The reflector is shown each file whole, as its prompt says: one too long to keep
        # (carried cut and marked) is rejected unread.
        whole = {path: text for path, text in step.files.items() if fits(text)}
        reviews: dict[str, HelperReview] = {}
        usage = TokenUsage()
        repairs: list[str] = []
        if whole:
            context = SkillReflectorContext(
                task=step.task,
                helper_paths=step.helper_paths,
                reference_paths=step.reference_paths,
                files=whole,
                generator_summary=step.generator_summary,
            )
            answered = await consult(deps, Role.SKILL_REFLECTOR, step, context, SkillReview)
            reviews = {review.path: review for review in answered.answer.reviews}
            usage, repairs = answered.usage, answered.repairs
        accepted: list[AcceptedFile] = []
        rejected: dict[str, str] = {}
        async with heartbeating():
            workdir = await asyncio.to_thread(workspaces.checkout_at, step.run_id, step.workspace)
            for path in [*step.helper_paths, *step.reference_paths]:
                if path not in step.files:
                    rejected[path] = "the generator did not write it"
                    continue
                if path not in whole:
                    rejected[path] = TOO_LONG
                    continue
                review = reviews.get(path)
                helper = path in step.helper_paths
                why, output = await stoppable(workdir, _judge, review, helper, workdir)
                if why is None and review is not None:
                    accepted.append(
                        AcceptedFile(review=review, content=whole[path], check_output=output)
                    )
                else:
                    rejected[path] = why or "not reviewed"
            # Back to the generator's tree: what the checks left behind is not committed.
            workdir = await asyncio.to_thread(
                workspaces.checkout, step.run_id, step.workspace.origin, step.workspace.commit
            )
            commit = step.workspace.commit
            if rejected:
                with refusing_unsafe_paths():
                    for path in rejected:
                        workspace_files.unlink(workdir, path)
                message = f"skill sub-loop · reject: {', '.join(sorted(rejected))}"
                commit = await asyncio.to_thread(
                    workspaces.commit, workdir, message, step.committed_at
                )
            await asyncio.to_thread(workspaces.publish, workdir, step.run_id, commit)
        return ReviewSkillsOutput(
            commit=commit,
            accepted=accepted,
            rejected=rejected,
            usage=usage,
            repairs=repairs,
        )

    @activity.defn(name="curate_skills")
    async def curate_skills(self, step: CurateSkillsInput) -> CurateSkillsOutput:
        items = await current_items(self.deps, step.playbook)
        context = SkillCuratorContext(task=step.task, accepted=step.accepted, playbook_items=items)
        answered = await consult(self.deps, Role.SKILL_CURATOR, step, context, SkillCuration)
        curation = answered.answer
        deltas, dropped = without_missing_files(curation.deltas, kept_files(step.accepted), items)
        if dropped:
            activity.logger.warning("skill curator's deltas dropped: %s", "; ".join(dropped))
            curation = curation.model_copy(update={"deltas": deltas})
        return CurateSkillsOutput(curation=curation, usage=answered.usage, repairs=answered.repairs)


def _generated(commit: str, files: dict[str, str], outcome: AgentOutcome) -> GenerateSkillsOutput:
    return GenerateSkillsOutput(
        commit=commit,
        files=files,
        summary=outcome.final_text[:2000],
        usage=outcome.usage,
        repairs=outcome.repairs,
    )


def _read_files(workdir: Path, paths: list[str]) -> dict[str, str]:
    """The asked-for files the generator wrote: regular files only, through no symlink (a
    link is not a helper the generator wrote); each whole, or, too long to keep, its start
    marked as cut (`marked_cut`)."""
    found = {}
    for path in paths:
        try:
            # Enough bytes for FILE_CHARS characters of any width: a read cut short
            # decodes to at least that many, so it is never taken for whole.
            data = workspace_files.read_bytes(
                workdir, path, FILE_CHARS * 4, follow=False, truncate=True
            )
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnsafePath):
            continue
        text = data.decode("utf-8", errors="replace")
        found[path] = text if fits(text) else marked_cut(text)
    return found


def _judge(review: HelperReview | None, helper: bool, workdir: Path) -> tuple[str | None, str]:
    """Why a file is rejected (None: accepted) and its check's output. A helper needs the
    reflector's ACCEPT and a check command that exits 0; a note needs the ACCEPT."""
    if review is None:
        return "the reflector did not review it", ""
    if review.verdict != HelperVerdict.ACCEPT:
        return f"rejected by the reflector: {review.feedback or 'no reason given'}", ""
    command = review.check_command.strip()
    if not command:
        return ("a helper needs a check command", "") if helper else (None, "")
    check = CommandCheck(command=command, timeout_seconds=CHECK_TIMEOUT_SECONDS)
    outcome = run_command_check(check, workdir)
    if not outcome.passed:
        return f"its check failed: {outcome.detail}", outcome.detail
    return None, outcome.detail
