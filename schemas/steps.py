"""Inputs and outputs of every activity: one model each, so histories stay readable and
activities can change their fields without breaking replay of old runs."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from loopworks.schemas.actions import CommandRun
from loopworks.schemas.curation import ItemTag
from loopworks.schemas.evaluation import CheckResult, Evaluation
from loopworks.schemas.events import Event
from loopworks.schemas.insights import FrameworkReflection, SessionInsights
from loopworks.schemas.playbook import (
    REFERENCES_DIR,
    SKILLS_DIR,
    PlaybookFiles,
    PlaybookItem,
    PlaybookRead,
    PlaybookUse,
)
from loopworks.schemas.proof import ProofFound, RunProof
from loopworks.schemas.roles import (
    Audit,
    CriticReview,
    Critique,
    Hydration,
    IterationPlan,
    QAReport,
    Role,
)
from loopworks.schemas.rules import CheckGroup, Phase, PreparedCheck, Rule
from loopworks.schemas.run import Allowance, RunState, TokenUsage
from loopworks.schemas.tasks import Task

# Where a run's artifact lives in its workspace (docs/loop.md#terms).
ARTIFACT_PATH = "artifact.md"

# The ApplicationError type of an answer that does not fit its role's schema: never
# retried by Temporal, because the workflow owns the one repair an invalid answer gets
# (docs/loop.md#invalid-answers).
INVALID_OUTPUT = "InvalidOutput"
# The ApplicationError type of a model call refused, or cut short, because nothing was
# left of the run's budget (docs/loop.md#budgets): its details carry what the step spent
# first. Never retried: the same budget is spent again.
BUDGET_EXHAUSTED = "BudgetExhausted"
# The ApplicationError type of an origin lacking what a run or graph starts from (the
# base branch named, any commit): a definite answer, so never retried.
ORIGIN_LACKS = "OriginLacks"
# The ApplicationError type of a path in a workspace the worker refuses to read or write
# (a symlink out of it, one on the way to its own records, a file past a read cap):
# the same tree refuses it again, so never retried.
UNSAFE_PATH = "UnsafeWorkspacePath"
# The ApplicationError type of an origin (or a commit's tree) larger than the worker's
# clone size cap, LOOPS_MAX_CLONE_BYTES: the same bytes come again, so never retried.
CLONE_TOO_LARGE = "CloneTooLarge"
# The ApplicationError type of an origin the deployment's settings do not allow
# (workspace/origin_policy.py): never retried.
ORIGIN_REFUSED = "OriginRefused"
# The run's records on its branch: events, state, trajectories, reflection and insights.
RECORDS_DIR = ".loops"
# Each PRODUCE and REFINE commits its agent's trajectory here, one JSON-lines file a step.
TRAJECTORY_DIR = f"{RECORDS_DIR}/trajectory"
# A step's result lists at most this many paths, then how many more: a step that changes
# thousands of files (a dependency install) made a result, and the run's events, past
# what Temporal takes in one payload.
PATHS_LISTED = 200


def listed(paths: list[str], most: int = PATHS_LISTED) -> list[str]:
    """The first `most` of `paths`, then `... and N more` for the rest."""
    if len(paths) <= most:
        return paths
    return [*paths[:most], f"... and {len(paths) - most} more"]


# Beside the records, what the agents may write there: the skill generator's helpers and
# notes, which are its work.
AGENT_WRITABLE_RECORDS = (SKILLS_DIR, REFERENCES_DIR)


def run_owned(relpath: str) -> bool:
    """Whether a repository path is the run's own record, which only the worker writes
    (docs/workspace.md#the-runs-record-in-git): anything under `.loops/`, in any case of
    spelling (a case-insensitive checkout has one directory for every spelling), but the
    helpers and notes of `AGENT_WRITABLE_RECORDS`. `.loops/verify`, the repository's
    proof declaration, is one: no step of a run writes it."""
    parts = [part for part in relpath.replace("\\", "/").split("/") if part not in ("", ".")]
    if not parts or parts[0].lower() != RECORDS_DIR:
        return False
    path = "/".join(parts)
    return not any(path.startswith(f"{d}/") for d in AGENT_WRITABLE_RECORDS)


def trajectory_path(iteration: int, step: str, blocked_attempt: int | None = None) -> str:
    """`.loops/trajectory/01-produce.jsonl`: a retried step rewrites its own file, and the
    names sort in the order the steps ran. An attempt the custodiet blocked during the work
    keeps its own (`01-produce-blocked-1.jsonl`), before the step's."""
    blocked = f"-blocked-{blocked_attempt}" if blocked_attempt is not None else ""
    return f"{TRAJECTORY_DIR}/{iteration:02d}-{step}{blocked}.jsonl"


# The steps of single-shot (structured) calls, one per role that answers that way.
CallStep = Literal[
    "hydrate",
    "review",
    "plan",
    "prepare",
    "evaluate",
    "critique",
    "audit",
    "reflect",
    "curate",
    "plan_graph",
    "skill_review",
    "skill_curate",
]
STEP_OF_ROLE: dict[Role, CallStep] = {
    Role.HYDRATOR: "hydrate",
    Role.CRITIC: "review",
    Role.PLANNER: "plan",
    Role.PREPARER: "prepare",
    Role.EVALUATOR: "evaluate",
    Role.ARTIFACT_CRITIC: "critique",
    Role.CUSTODIET: "audit",
    Role.REFLECTOR: "reflect",
    Role.TASK_CURATOR: "curate",
    Role.TASK_PLANNER: "plan_graph",
    Role.SKILL_REFLECTOR: "skill_review",
    Role.SKILL_CURATOR: "skill_curate",
}


def call_name(iteration: int, step: CallStep, call_index: int) -> str:
    """A single-shot call's name in the run's trajectory, `01-plan-002` (its iteration,
    its step, the role's call count): its record's ref and file are named so
    (workspace/call_records.py), and they sort in the order the calls were made."""
    return f"{iteration:02d}-{step}-{call_index:03d}"


# The run's record on its branch (docs/workspace.md#the-runs-record-in-git): the append-only
# event log and the run's state, written by the steps that commit.
HISTORY_PATH = f"{RECORDS_DIR}/history.jsonl"
RUN_STATE_PATH = f"{RECORDS_DIR}/run.json"


class RunLog(BaseModel):
    """What a committing step adds to the run's record in git: the events git lacks (it
    appends those after `saved_seq` to the history its start commit holds, so a retry,
    which starts again from that commit, adds nothing twice), the run's state for
    run.json, and the records of single-shot calls the workflow carries (each written
    whole, so a retry writes the same file again)."""

    state: RunState
    events: list[Event] = Field(default_factory=list)
    saved_seq: int | None = Field(
        default=None,
        ge=0,
        description="the last seq the step's commit holds, as the workflow counts it: the "
        "events are appended after it; None in a step sent before steps carried it (the "
        "commit's last line is taken then)",
    )
    calls: dict[str, str] = Field(
        default_factory=dict,
        description="call records git lacks, by call name: `.loops/trajectory/<name>.jsonl`",
    )


class SavedLog(BaseModel):
    """What a committing step's commit holds of the `RunLog` it was given."""

    saved_seq: int = Field(default=0, description="the run log's last seq in this commit")
    saved_calls: list[str] = Field(
        default_factory=list, description="the carried call records this commit holds"
    )


class Timing(BaseModel):
    """Wall-clock bounds of an activity, measured inside it (activities may read the clock)."""

    started_at: float = 0.0
    finished_at: float = 0.0


class ModelStep(BaseModel):
    """Fields every model-backed step carries.

    `call_index` counts this role's calls in the run; the workflow keeps the count, so an
    activity retry repeats the same call and a phase retry makes a new one.
    """

    run_id: str
    iteration: int = 0
    phase: Phase = Phase.A
    call_index: int = Field(default=1, ge=1)
    operator_note: str | None = None
    # The run's origin, where a single-shot call's trajectory goes (workspace/call_records.py);
    # None in steps sent before every call was recorded: they record nothing.
    origin: str | None = None
    # What the step may spend, every model request it makes together (docs/loop.md#budgets);
    # None: no limit (a run without a budget, or a step sent before steps carried one).
    allowance: Allowance | None = None
    carry_calls: bool = Field(
        default=False,
        description="hand the single-shot calls' records back in the step's result for "
        "the run's next commit, instead of putting each on a ref of its own "
        "(workspace/call_records.py)",
    )


class ModelOutput(BaseModel):
    """Fields every model-backed step answers with: what it cost, the feedback each
    repaired answer was sent back with (empty when the first answer was valid), and the
    records of its single-shot calls when the step was asked to carry them."""

    usage: TokenUsage = Field(default_factory=TokenUsage)
    repairs: list[str] = Field(default_factory=list)
    calls: dict[str, str] = Field(
        default_factory=dict, description="call records for the run's next commit, by name"
    )


class GitLocation(BaseModel):
    origin: str
    commit: str
    playbook_files: PlaybookFiles | None = Field(
        default=None,
        description="The playbook's files the run was given: written into a checkout of "
        "`commit`, never committed unless changed (docs/playbook.md#files).",
    )


# --- workspace and close -------------------------------------------------------------


class WorkspaceRequest(BaseModel):
    run_id: str
    repo: str | None = None
    base_branch: str | None = None
    read_prep: bool = Field(
        default=False, description="read the prep package at the base commit, if any"
    )
    find_proof: bool = Field(
        default=False,
        description="read what the base commit says of the run's proof "
        "(docs/loop.md#the-runs-proof)",
    )


class WorkspaceInfo(BaseModel):
    origin: str
    base_branch: str
    base_commit: str
    branch: str
    sandboxed: bool = Field(
        default=True, description="whether the worker runs commands in the sandbox"
    )
    playbook: str = Field(default="", description="the name of the origin's playbook")
    model_source: str = Field(
        default="", description="the model the worker answers runs with (llm/provenance.py)"
    )
    # `.workflow/.loop/`'s two files at the base commit, when asked for and there
    # (docs/graphs.md#prep-packages); None in runs recorded before runs read them.
    prep_package: str | None = None
    prep_tasks: str | None = None
    # The repository's proof at the base commit, when asked for; None in runs recorded
    # before runs had a proof.
    proof: ProofFound | None = None


class CloseInput(BaseModel):
    run_id: str
    origin: str
    branch: str
    commit: str
    log: RunLog | None = None
    committed_at: datetime | None = None


class RecordAndCloseInput(CloseInput):
    """Close, writing the run's reflection and insights (step 10's answer) into the same
    commit as its last events."""

    reflection: FrameworkReflection | None = None
    insights: SessionInsights | None = None
    calls: list[str] = Field(
        default_factory=list,
        description="the single-shot calls the run made, by name: the close commits their "
        "records (workspace/call_records.py)",
    )


class CloseOutput(SavedLog):
    branch: str
    commit: str
    remote_commit: str
    verified: bool


# --- hydration and critic ------------------------------------------------------------


class HydrateInput(ModelStep):
    task: str
    template: str | None = None
    user_rules: list[Rule] = Field(default_factory=list)
    user_criteria: list[str] = Field(default_factory=list)
    user_plan: list[str] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    playbook: PlaybookRead | None = Field(
        default=None, description="the playbook to draw on; None: the run opted out"
    )


class HydrateOutput(ModelOutput):
    hydration: Hydration
    playbook: PlaybookUse | None = None
    playbook_items: list[PlaybookItem] = Field(
        default_factory=list, description="the items the hydrator was given"
    )


class ReviewInput(ModelStep):
    task: str
    hydration: Hydration


class ReviewOutput(ModelOutput):
    review: CriticReview


# --- iteration -------------------------------------------------------------------------


class PlanInput(ModelStep):
    task: str
    intent: str
    acceptance_criteria: list[str]
    last_evaluation: Evaluation | None = None


class PlanOutput(ModelOutput):
    plan: IterationPlan


class WorkAudit(BaseModel):
    """The custodiet's audit during PRODUCE and REFINE (docs/loop.md#steps): its chance
    before each of the agent's tool calls, and what it audits with, as the audit after an
    evaluation is given it."""

    probability: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="the chance per tool call; None: the worker's LOOPS_TOOL_AUDIT_PROBABILITY",
    )
    first_call_index: int = Field(
        default=1, ge=1, description="the custodiet's call number of the step's first audit"
    )
    intent: str = ""
    plan_focus: str = ""
    evaluation: Evaluation | None = None
    # The commit the iteration started from: the audit's diff and trajectories start there.
    iteration_start: str = ""
    declared_files: list[str] = Field(default_factory=list)
    # The notes that cleared earlier blocks during this iteration's work: its audits see
    # the same commands again, and are told what the person said of them.
    cleared_notes: list[str] = Field(default_factory=list)


class WorkingStep(ModelStep):
    """Fields of a step whose agent works in the run's clone and commits what it did
    (PRODUCE, REFINE)."""

    task: str
    workspace: GitLocation
    committed_at: datetime
    log: RunLog | None = None
    graph_task: bool = Field(
        default=False,
        description="a task graph's loop: its tools refuse the graph's ledger and task files",
    )
    base_commit: str = Field(
        default="",
        description="the commit the run started from: in a task graph's loop, what a "
        "command changes of the graph's ledger and task files is put back as it has them "
        "(when empty, as the step's commit has them)",
    )
    # None: no audit during the work (a step sent before there was one).
    work_audit: WorkAudit | None = None
    # One more after each block during the step (its earlier attempts' trajectories are
    # kept apart), and what the agent is told of the last block.
    attempt: int = Field(default=1, ge=1)
    blocked_attempt: str = ""


class ProduceInput(WorkingStep):
    intent: str
    acceptance_criteria: list[str]
    rules: list[Rule]
    plan: IterationPlan


class RefineInput(WorkingStep):
    critique: Critique


class WorkAuditVerdict(BaseModel):
    """One audit during the work: the tool call it came before, and the verdict."""

    before_call: str = Field(description="the tool call, as `tool: argument`")
    audit: Audit


class WorkBlock(BaseModel):
    """A BLOCK during the work: the call it refused (and every later one was), and the
    state of the work written up, committed as `.loops/blocked.md` with the work so far."""

    audit: Audit
    refused: str
    report: str


class ArtifactOutput(ModelOutput, SavedLog):
    commit: str
    artifact_hash: str
    previous_artifact_hash: str | None = None
    changed: list[str] = Field(default_factory=list)
    summary: str = ""
    timing: Timing = Field(default_factory=Timing)
    # The agent's side of the step; its whole trajectory is in the commit, at this path.
    turns: int = 0
    turn_limit_reached: bool = False
    trajectory_path: str | None = None
    # The custodiet's audits during the work, in order (their usage is in `usage`); a BLOCK
    # ended the step at `block`, and `commit` holds the work so far with the write-up.
    work_audits: list[WorkAuditVerdict] = Field(default_factory=list)
    block: WorkBlock | None = None
    # Nothing was left of the run's budget for the agent's next request, or a response was
    # cut at what was left: why. `commit` holds the work so far; the run then stops.
    budget_exhausted: str | None = None


class PrepareInput(ModelStep):
    task: str
    rules: list[Rule]


class PrepareOutput(ModelOutput):
    checks: list[PreparedCheck]
    timing: Timing = Field(default_factory=Timing)


class EvaluateGroupInput(ModelStep):
    task: str
    group: CheckGroup
    checks: list[PreparedCheck]
    workspace: GitLocation
    # The commit the run started from: a judge is shown the change since (none: it sees
    # only the artifact).
    base_commit: str = ""
    # The run's proof among the checks: rules that prove nothing when the run changed only
    # its artifact and records (docs/loop.md#the-runs-proof).
    proof_rules: list[str] = Field(default_factory=list)


class EvaluateGroupOutput(ModelOutput):
    group: CheckGroup
    results: list[CheckResult]
    timing: Timing = Field(default_factory=Timing)
    # With proof rules: the code the run changed since its base commit, as read for them
    # (None: not read).
    code_changed: list[str] | None = None


class AuditInput(ModelStep):
    task: str
    intent: str
    plan_focus: str
    evaluation: Evaluation | None = None
    # The iteration to audit: its work now and the commit it started from; without them
    # (a run started before they were given) the custodiet sees only the fields above.
    workspace: GitLocation | None = None
    iteration_start: str = ""
    declared_files: list[str] = Field(default_factory=list)
    committed_at: datetime | None = None


class AuditOutput(ModelOutput):
    audit: Audit
    # On BLOCK: the state of the work written up, and the commit holding it as
    # `.loops/blocked.md` (None when there was no workspace to commit it in).
    report: str = ""
    commit: str | None = None


class CritiqueInput(ModelStep):
    task: str
    evaluation: Evaluation
    rules: list[Rule]
    workspace: GitLocation


class CritiqueOutput(ModelOutput):
    critique: Critique


class QAInput(ModelStep):
    task: str
    intent: str
    acceptance_criteria: list[str]
    evaluation: Evaluation | None
    workspace: GitLocation
    # The commit the run started from: QA reads the run's whole change against it. Empty
    # (a run recorded before QA read the change): no diff is sent.
    base_commit: str = ""
    # What the last PRODUCE or REFINE changed and said of its work.
    changed: list[str] = Field(default_factory=list)
    producer_summary: str = ""
    committed_at: datetime | None = None
    # The run's proof and its results, shown to QA (None: a run without one).
    proof: RunProof | None = None
    # Why QA's previous verdict in this step was not accepted: it is asked once more
    # (docs/loop.md#qas-evidence); empty on the first ask.
    rejected: str = ""


class QAOutput(ModelOutput):
    report: QAReport
    # The commit holding QA's trajectory on top of the one it verified; empty when none
    # was made (a run recorded before QA was an agent).
    commit: str = ""
    turns: int = 0
    commands: int = 0
    # What QA's verdict is checked against (docs/loop.md#qas-evidence): the last run of
    # each command its evidence cites, whole and redacted, with how it ended, as its
    # command tool ran it (a trajectory caps a call's arguments); the paths besides the
    # artifact and records the run changed (None: the change could not be read); the
    # files its commands changed, added or deleted in its checkout (any git does not ignore).
    ran: list[CommandRun] = Field(default_factory=list)
    code_changed: list[str] | None = None
    checkout_changed: list[str] = Field(default_factory=list)


# --- reflection ------------------------------------------------------------------------


class ReflectInput(ModelStep):
    state: RunState
    critic_verdict: str | None = None
    subagents_invoked: list[str] = Field(default_factory=list)
    guidance: list[str] = Field(default_factory=list)
    playbook_items: list[PlaybookItem] = Field(default_factory=list)
    workspace: GitLocation
    committed_at: datetime


class ReflectOutput(ModelOutput, SavedLog):
    reflection: FrameworkReflection
    insights: SessionInsights
    commit: str
    playbook_tags: list[ItemTag] = Field(default_factory=list)


# --- task graphs -----------------------------------------------------------------------


class PlanGraphInput(ModelStep):
    """The task planner's step: a goal, and the repository's paths at the base commit
    (every one: the atomic rule is checked against all of them, the model sees a capped
    list)."""

    goal: str
    files: list[str]
    base_branch: str | None = None


class PlanGraphOutput(ModelOutput):
    tasks: list[Task]
