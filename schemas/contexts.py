"""What each model role is given: one model per role's context.

An activity builds its role's context; `StepDeps.for_role` dumps it (JSON mode) into
`ModelCall.context`, which `llm.base.user_prompt` renders as one labelled section per
field, in field order (strings as they are, anything else as JSON). The offline model
reads the dict back through the same model (`llm.offline_answers.default_answer`). Field
names are the section titles the prompts in `prompts/agents/*.md` name
(`acceptance_criteria` is **Acceptance Criteria**), so a field is renamed on every side at
once or the tests fail.

Fields that may hold nothing (`None`) default to it; every other field is required.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from loopworks.schemas.actions import CommandRun, PendingCall
from loopworks.schemas.curation import HelperReview
from loopworks.schemas.evaluation import Evaluation
from loopworks.schemas.playbook import PlaybookItem
from loopworks.schemas.proof import RunProof
from loopworks.schemas.roles import Critique, Hydration, IterationPlan, Role
from loopworks.schemas.rules import Rule
from loopworks.schemas.run import RunStatus, StopReason

OPERATOR_NOTE = "operator_note"
# The most repository paths the task planner is shown: enough for a repository's layout
# and the files a goal names, where a large monorepo's every path would crowd out the goal.
TASK_PLANNER_FILES_CAP = 400


class RoleContext(BaseModel):
    """Fields every role's context has. Unknown keys are refused: a key renamed on one
    side fails validation on the other."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    operator_note: str | None = Field(
        default=None,
        description="A person's note for this step, from a cleared block or an approval.",
    )

    @model_serializer(mode="wrap")
    def _note_last(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The note is the last section the model reads (pydantic puts a base's fields
        # first), and no key at all without one.
        data: dict[str, Any] = handler(self)
        note = data.pop(OPERATOR_NOTE, None)
        if note is not None:
            data[OPERATOR_NOTE] = note
        return data


class HydratorContext(RoleContext):
    task: str = Field(description="The user's request.")
    template: str | None = Field(
        default=None, description="The template the user chose, if any: it is kept."
    )
    suggested_template: str = Field(description="The template the task seems to need.")
    template_steps: list[str] = Field(description="The steps of the suggested template.")
    templates: dict[str, str] = Field(description="Every available template: id to title.")
    user_rules: list[Rule] = Field(description="Rules the user gave; they replace drafted ones.")
    user_criteria: list[str] = Field(
        default_factory=list,
        description="Acceptance criteria the user gave: kept word for word, first.",
    )
    user_plan: list[str] = Field(
        default_factory=list,
        description="Steps the user gave (a prep package's tasks, in order): when given, "
        "they replace the drafted plan.",
    )
    feedback: list[str] = Field(description="The critic's issues when it asked for a revision.")
    playbook_items: list[PlaybookItem] = Field(
        default_factory=list,
        description="Lessons earlier runs on this repository recorded, most relevant first.",
    )


class CriticContext(RoleContext):
    task: str = Field(description="The user's request.")
    hydration: Hydration = Field(description="The hydration to review.")


class PlannerContext(RoleContext):
    task: str = Field(description="The user's request.")
    intent: str = Field(description="What must exist or be true when the work is done.")
    acceptance_criteria: list[str] = Field(description="The hydrated acceptance criteria.")
    iteration: int = Field(description="This iteration's number, from 1.")
    last_evaluation: Evaluation | None = Field(
        default=None, description="The previous iteration's evaluation, from the second on."
    )


class ProducerContext(RoleContext):
    task: str = Field(description="The user's request.")
    intent: str = Field(description="What must exist or be true when the work is done.")
    acceptance_criteria: list[str] = Field(description="The hydrated acceptance criteria.")
    rules: list[Rule] = Field(description="The rules active in the current phase.")
    plan: IterationPlan = Field(description="This iteration's plan.")
    current_artifact: str | None = Field(
        default=None, description="The artifact's text at the step's commit, if there is one."
    )
    blocked_attempt: str | None = Field(
        default=None,
        description="When the custodiet blocked this step's earlier attempt: what happened.",
    )


class RefinerContext(RoleContext):
    task: str = Field(description="The user's request.")
    critique: Critique = Field(description="The issues to fix.")
    current_artifact: str | None = Field(
        default=None, description="The artifact's text at the step's commit, if there is one."
    )
    blocked_attempt: str | None = Field(
        default=None,
        description="When the custodiet blocked this step's earlier attempt: what happened.",
    )


class PreparerContext(RoleContext):
    task: str = Field(description="The user's request.")
    rules: list[Rule] = Field(description="The rules whose check is a sentence.")


class Question(BaseModel):
    """One yes/no question of an evaluation group, under the id of its rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule_id: str = Field(description="The id of the rule the question decides.")
    question: str = Field(description="The yes/no question; yes passes the rule.")


class EvaluatorContext(RoleContext):
    task: str = Field(description="The user's request.")
    questions: list[Question] = Field(description="Every question of the group.")
    artifact: str = Field(description="The artifact's text; empty when there is none.")
    # A code task's change, judged on the code and not only on the artifact's account.
    diff_stat: str = Field(
        default="",
        description="Every file the run changed besides the artifact, from the commit it "
        "started from; empty for a task that changed only the artifact.",
    )
    patch: str = Field(
        default="",
        description="Those changes' patch, cut at a size, the files left out named at its end.",
    )


class ArtifactCriticContext(RoleContext):
    task: str = Field(description="The user's request.")
    artifact: str = Field(description="The artifact's text; empty when there is none.")
    evaluation: Evaluation = Field(description="The failed evaluation.")
    rules: list[Rule] = Field(description="The rules active in the evaluation's phase.")


class CustodietContext(RoleContext):
    task: str = Field(description="The user's request.")
    intent: str = Field(description="What must exist or be true when the work is done.")
    plan_focus: str = Field(description="What the current iteration set out to achieve.")
    evaluation: Evaluation | None = Field(
        default=None, description="The iteration's evaluation, when there is one."
    )
    # What the iteration did, read from git and the agents' trajectories, not their words.
    diff_stat: str = Field(
        default="",
        description="Every file the iteration changed, from its start commit: status, "
        "lines added and removed, path; the run's own records left out.",
    )
    commands_run: list[CommandRun] = Field(
        default_factory=list,
        description="Every command the agents ran this iteration, in order, with its exit "
        "code (none when it was refused or timed out, and why).",
    )
    files_written: list[str] = Field(
        default_factory=list, description="Every file the agents wrote or edited with a tool."
    )
    files_deleted: list[str] = Field(
        default_factory=list, description="Every file the iteration deleted."
    )
    declared_files: list[str] = Field(
        default_factory=list,
        description="The files the task declared it touches; empty when it declared none.",
    )
    outside_declared_files: list[str] = Field(
        default_factory=list,
        description="Paths the iteration changed that the declared files do not cover.",
    )
    pending_call: PendingCall | None = Field(
        default=None,
        description="During the work: the tool call the agent is about to make, which a "
        "`BLOCK` refuses, with every later one. None after an evaluation.",
    )


class QAVerifierContext(RoleContext):
    task: str = Field(description="The user's request.")
    intent: str = Field(description="What must exist or be true when the work is done.")
    acceptance_criteria: list[str] = Field(description="The criteria to check, every one.")
    artifact: str = Field(description="The artifact's text; empty when there is none.")
    evaluation: Evaluation | None = Field(
        default=None, description="The last evaluation, when there is one."
    )
    diff_stat: str = Field(
        default="",
        description="The run's whole change since the commit it started from, one line a file.",
    )
    patch: str = Field(
        default="",
        description="The change's unified diff, capped; the files past the cap listed by path.",
    )
    changed_files: list[str] = Field(
        default_factory=list, description="The files the last producing step changed."
    )
    producer_summary: str = Field(
        default="", description="What the producer said of its work: a claim, not evidence."
    )
    proof: RunProof | None = Field(
        default=None,
        description="The run's proof: the commands the orchestrator runs itself on the work, "
        "where they came from, and their latest results; none in a run without one.",
    )
    rejected_verdict: str = Field(
        default="",
        description="Why your previous verdict in this step was not accepted; empty on the "
        "first ask.",
    )


class ReflectorContext(RoleContext):
    task: str = Field(description="The user's request.")
    stop_reason: StopReason | None = Field(default=None, description="Why the run stopped.")
    status: RunStatus = Field(description="The run's status.")
    iteration: int = Field(description="The last iteration's number.")
    last_score: float = Field(description="The last evaluation's score.")
    guidance: list[str] = Field(description="The guidance the run received, one item each.")
    acceptance_criteria: list[str] = Field(description="The hydrated acceptance criteria.")
    playbook_items: list[PlaybookItem] = Field(
        default_factory=list, description="The playbook items the run was given: tag each."
    )


class TaskCuratorContext(RoleContext):
    task: str = Field(description="The user's request.")
    outcome: str = Field(description="The reflection's outcome: success, partial or failure.")
    summary: str = Field(description="The reflection's one-sentence summary of the run.")
    friction_points: list[str] = Field(description="What slowed or derailed the run.")
    proposed_changes: list[str] = Field(description="The reflection's proposed improvements.")
    acceptance_criteria: list[str] = Field(description="The criteria the work was judged by.")
    playbook_items: list[PlaybookItem] = Field(
        description="The repository's playbook now: update or remove items by their id."
    )


class SkillGeneratorContext(RoleContext):
    task: str = Field(description="The run's task, which the helpers come from.")
    curator_summary: str = Field(description="Why the task curator asked for them.")
    assignment: str = Field(
        description="What to write, one sentence per file, naming its exact path."
    )
    helper_paths: list[str] = Field(description="Write one Python helper at each path.")
    reference_requests: list[str] = Field(description="Knowledge to write down, one note each.")
    reference_paths: list[str] = Field(description="Where each reference note goes, in order.")
    existing_skills: list[PlaybookItem] = Field(
        description="Skills the playbook already has: do not duplicate them."
    )

    @classmethod
    def asking(
        cls,
        task: str,
        curator_summary: str,
        helper_paths: list[str],
        reference_requests: list[str],
        reference_paths: list[str],
        existing_skills: list[PlaybookItem],
    ) -> SkillGeneratorContext:
        """The context, with the files to write also as plain instructions naming their
        paths: a model that follows sentences gets the same task as one that reads lists."""
        lines = [
            f"Write `{path}`: the Python helper `{PurePosixPath(path).stem}`."
            for path in helper_paths
        ]
        lines += [
            f"Write `{path}`: a reference note on: {request}"
            for request, path in zip(reference_requests, reference_paths, strict=False)
        ]
        return cls(
            task=task,
            curator_summary=curator_summary,
            assignment="\n".join(lines),
            helper_paths=helper_paths,
            reference_requests=reference_requests,
            reference_paths=reference_paths,
            existing_skills=existing_skills,
        )


class SkillReflectorContext(RoleContext):
    task: str = Field(description="The run's task, which the helpers come from.")
    helper_paths: list[str] = Field(description="The helpers asked for.")
    reference_paths: list[str] = Field(description="The reference notes asked for.")
    files: dict[str, str] = Field(description="What the generator wrote: path to content.")
    generator_summary: str = Field(description="The generator's closing words.")


class AcceptedFile(BaseModel):
    review: HelperReview
    content: str
    check_output: str = ""


class SkillCuratorContext(RoleContext):
    task: str = Field(description="The run's task, which the files come from.")
    accepted: list[AcceptedFile] = Field(
        description="The files the reflector accepted and whose check passed."
    )
    playbook_items: list[PlaybookItem] = Field(description="The repository's playbook now.")


class TaskPlannerContext(RoleContext):
    goal: str = Field(description="The goal to split into tasks.")
    files: list[str] = Field(
        description="The repository's files at the base commit, as paths from its root."
    )
    files_note: str | None = Field(
        default=None, description="When the list of files was cut: how many are not shown."
    )
    base_branch: str | None = Field(
        default=None, description="The branch the tasks' work is merged into, when known."
    )

    @classmethod
    def listing(
        cls, goal: str, files: Sequence[str], base_branch: str | None = None
    ) -> TaskPlannerContext:
        """The context for `files`, at most TASK_PLANNER_FILES_CAP of them: the shallowest
        first when cut, so that a cut list still shows the repository's layout."""
        paths = sorted(dict.fromkeys(files))
        note = None
        if len(paths) > TASK_PLANNER_FILES_CAP:
            kept = sorted(paths, key=lambda p: (p.count("/"), p))[:TASK_PLANNER_FILES_CAP]
            note = (
                f"{len(paths) - len(kept)} of the repository's {len(paths)} files are not "
                "listed (the deepest paths); they exist all the same."
            )
            paths = sorted(kept)
        return cls(goal=goal, files=paths, files_note=note, base_branch=base_branch)


# The context model of each role: what its activity builds and its model reads.
CONTEXTS: dict[Role, type[RoleContext]] = {
    Role.HYDRATOR: HydratorContext,
    Role.CRITIC: CriticContext,
    Role.PLANNER: PlannerContext,
    Role.PRODUCER: ProducerContext,
    Role.PREPARER: PreparerContext,
    Role.EVALUATOR: EvaluatorContext,
    Role.ARTIFACT_CRITIC: ArtifactCriticContext,
    Role.REFINER: RefinerContext,
    Role.CUSTODIET: CustodietContext,
    Role.QA_VERIFIER: QAVerifierContext,
    Role.REFLECTOR: ReflectorContext,
    Role.TASK_PLANNER: TaskPlannerContext,
    Role.TASK_CURATOR: TaskCuratorContext,
    Role.SKILL_GENERATOR: SkillGeneratorContext,
    Role.SKILL_REFLECTOR: SkillReflectorContext,
    Role.SKILL_CURATOR: SkillCuratorContext,
}
