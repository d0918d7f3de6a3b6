"""The run request, statuses and stop reasons (docs/loop.md#statuses, docs/loop.md#stop-reasons),
and the run state, which is also `.loops/run.json` on the run's branch."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from loopworks.schemas.detail import EvaluationView, GateView, PlanView, Verdicts
from loopworks.schemas.evaluation import DistanceToSuccess
from loopworks.schemas.git_names import valid_ref_name
from loopworks.schemas.notify import NotifyRequest
from loopworks.schemas.playbook import PlaybookUse
from loopworks.schemas.prep import PrepUpload
from loopworks.schemas.proof import PROOF_FILE, ProofCommands, RunProof, is_proof_rule_id
from loopworks.schemas.rules import Phase, Rule, RuleOwner, normalise_rules
from loopworks.schemas.tasks import MAX_CRITERIA, MAX_DECLARED_FILES


class Mode(StrEnum):
    AUTO = "auto"
    INTERACTIVE = "interactive"


class RunStatus(StrEnum):
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    BLOCKED = "blocked"
    PAUSED = "paused"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"
    HALTED = "halted"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.STOPPED, RunStatus.FAILED, RunStatus.HALTED}
)


class StopReason(StrEnum):
    THRESHOLD_REACHED = "threshold_reached"
    NO_MAJOR_ISSUES = "no_major_issues"
    ITERATION_LIMIT = "iteration_limit"
    USER_STOP = "user_stop"
    STAGNATION = "stagnation"
    PHASE_ERROR = "phase_error"
    CRITIC_HALT = "critic_halt"
    QA_REJECTED = "qa_rejected"
    BUDGET_EXHAUSTED = "budget_exhausted"
    # The run changed code, nothing proves it, and its request does not allow that
    # (docs/loop.md#the-runs-proof).
    UNVERIFIED = "unverified"


# The status each stop reason gives (docs/loop.md#stop-reasons).
STATUS_FOR_REASON: dict[StopReason, RunStatus] = {
    StopReason.THRESHOLD_REACHED: RunStatus.COMPLETED,
    StopReason.NO_MAJOR_ISSUES: RunStatus.COMPLETED,
    StopReason.USER_STOP: RunStatus.STOPPED,
    StopReason.ITERATION_LIMIT: RunStatus.STOPPED,
    StopReason.STAGNATION: RunStatus.STOPPED,
    StopReason.PHASE_ERROR: RunStatus.FAILED,
    StopReason.CRITIC_HALT: RunStatus.HALTED,
    StopReason.QA_REJECTED: RunStatus.STOPPED,
    StopReason.BUDGET_EXHAUSTED: RunStatus.STOPPED,
    StopReason.UNVERIFIED: RunStatus.STOPPED,
}


class Step(StrEnum):
    HYDRATE = "HYDRATE"
    CRITIC = "CRITIC"
    APPROVE = "APPROVE"
    PLAN = "PLAN"
    PRODUCE_PREPARE = "PRODUCE_PREPARE"
    PREPARE = "PREPARE"
    EVALUATE = "EVALUATE"
    AUDIT = "AUDIT"
    CRITIQUE = "CRITIQUE"
    REFINE = "REFINE"
    QA = "QA"
    REFLECT = "REFLECT"
    CURATE = "CURATE"  # the task curator, the skill sub-loop, the playbook's deltas
    CLOSE = "CLOSE"
    DONE = "DONE"


class Thresholds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    A: float = Field(
        default=0.8, gt=0, le=1, description="the score that passes phase A (essentials)"
    )
    B: float = Field(default=0.9, gt=0, le=1, description="the score that passes phase B (polish)")

    def for_phase(self, phase: Phase) -> float:
        return self.A if phase == Phase.A else self.B


class Budget(BaseModel):
    """Limits on what a run may spend; crossing one stops it with `budget_exhausted`."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1, description="input + output tokens")
    max_cost_usd: float | None = Field(default=None, gt=0, description="US dollars")


class Allowance(BaseModel):
    """What one model step may spend at most: what was left of its run's budget when it
    started, less what steps running beside it hold (docs/loop.md#budgets). A limit left
    None bounds nothing; 0 means nothing is left of it."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=0, description="input + output tokens")
    max_cost_usd: float | None = Field(default=None, ge=0, description="US dollars")


def _branch_name(name: str) -> str:
    # Checked where it is asked for: inside the run, git would refuse it after retries.
    if not valid_ref_name(f"refs/heads/{name.removeprefix('refs/heads/')}"):
        raise ValueError(f"{name!r} is not a valid git branch name")
    return name


def given_rules(rules: list[Rule]) -> list[Rule]:
    """Rules a person gives (a request's, an approval's) in full form; the run's proof is
    not among them: it is given as `verify` (docs/loop.md#the-runs-proof)."""
    for rule in rules:
        if rule.owner != RuleOwner.RUN or is_proof_rule_id(rule.id):
            raise ValueError(
                f"rule {rule.id!r} is the run's proof, which the run makes from `verify`: "
                "give the commands in `verify` instead"
            )
    return normalise_rules(rules)


# A branch of the repository (`main`, or `refs/heads/main`), as git would accept it.
BranchName = Annotated[str, Field(max_length=200), AfterValidator(_branch_name)]


class RunRequest(BaseModel):
    """What a client POSTs to start a run."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=20_000)
    repo: str | None = Field(default=None, description="URL or path of a git repository")
    base_branch: BranchName | None = None
    template: str | None = Field(default=None, description="workflow template id")
    rules: list[Rule] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(
        default_factory=list,
        max_length=MAX_CRITERIA,
        description="criteria the run must meet, kept word for word; hydration may add more",
    )
    thresholds: Thresholds = Field(default_factory=Thresholds)
    max_iterations: int | None = Field(
        default=None,
        ge=1,
        le=20,
        description="the run's iteration limit; unset: the prep package's "
        "`auto_loop.max_iterations` (10 when it names none) when the run takes its plan from "
        "one, else 4",
    )
    mode: Mode = Mode.AUTO
    audit_probability: float = Field(default=0.2, ge=0, le=1)
    tool_audit_probability: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="chance, before each tool call of the producer and the refiner, that the "
        "custodiet audits the work first; unset: the deployment's LOOPS_TOOL_AUDIT_PROBABILITY",
    )
    declared_files: list[str] = Field(
        default_factory=list,
        max_length=MAX_DECLARED_FILES,
        description="the files the task may touch (a graph's task: its context.files); the "
        "custodiet is shown every change outside them. Empty: the task declares none",
    )
    budget: Budget | None = None
    playbook: bool = Field(
        default=True,
        description="give hydration the repository's playbook and send it what the run "
        "learnt; false opts out of both",
    )
    playbook_version: int | None = Field(
        default=None, ge=1, description="hydrate from this version of the playbook"
    )
    prep_package: PrepUpload | None = Field(
        default=None,
        description="a prep package sent with the request: its tasks become the run's plan "
        "(docs/graphs.md#a-single-run-from-a-prep-package)",
    )
    read_prep_package: bool = Field(
        default=True,
        description="without `prep_package`, take the plan from the repository's "
        "`.workflow/.loop/` prep package when it passes its checks; false ignores it",
    )
    notify: NotifyRequest | None = Field(
        default=None,
        description="webhooks to tell when the run waits for a person or finishes "
        "(docs/notifications.md)",
    )
    verify: ProofCommands | None = Field(
        default=None,
        description="the commands that prove the run's work: the orchestrator runs them in "
        "the sandbox on the tree it pushes, and the run completes only when each exits 0. "
        f"Unset: the repository's `{PROOF_FILE}`, else its detected test command; `[]`: "
        "nothing proves it (docs/loop.md#the-runs-proof)",
    )
    allow_unverified: bool = Field(
        default=False,
        description="let a run that changes code complete with nothing to prove it; without "
        "it such a run ends `unverified`",
    )

    @field_validator("task")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task must not be blank")
        return value

    @field_validator("rules")
    @classmethod
    def _normalised(cls, rules: list[Rule]) -> list[Rule]:
        return given_rules(rules)


class TokenUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=(
                self.cache_creation_input_tokens + other.cache_creation_input_tokens
            ),
            calls=self.calls + other.calls,
            cost_usd=round(self.cost_usd + other.cost_usd, 6),
        )


def budget_exceeded(budget: Budget | None, usage: TokenUsage) -> str | None:
    """Why `usage` is over `budget`, or None while it is within."""
    if budget is None:
        return None
    if budget.max_tokens is not None and usage.total_tokens >= budget.max_tokens:
        return f"used {usage.total_tokens} tokens of a budget of {budget.max_tokens}"
    if budget.max_cost_usd is not None and usage.cost_usd >= budget.max_cost_usd:
        return f"spent ${usage.cost_usd:.4f} of a budget of ${budget.max_cost_usd:.4f}"
    return None


def budget_left(
    limit: Budget | Allowance | None, usage: TokenUsage, held: Iterable[Allowance] = ()
) -> Allowance | None:
    """What is left of `limit` once `usage` is spent and `held` is held back (for steps
    still running), each limit at least 0; None when there is no limit."""
    if limit is None or (limit.max_tokens is None and limit.max_cost_usd is None):
        return None
    held = list(held)
    tokens = usd = None
    if limit.max_tokens is not None:
        held_tokens = sum(h.max_tokens or 0 for h in held)
        tokens = max(0, limit.max_tokens - usage.total_tokens - held_tokens)
    if limit.max_cost_usd is not None:
        held_usd = sum(h.max_cost_usd or 0.0 for h in held)
        # Dollars to the millionth, as costs are kept: sums of floats are not exact.
        usd = max(0.0, round(limit.max_cost_usd - usage.cost_usd - held_usd, 6))
    return Allowance(max_tokens=tokens, max_cost_usd=usd)


class StopInfo(BaseModel):
    passed: bool = False
    reason: StopReason | None = None
    message: str = ""
    distance_to_success: DistanceToSuccess | None = None


class BlockInfo(BaseModel):
    blocked: bool = False
    reason: str = ""
    cleared_note: str | None = None
    count: int = 0
    # The custodiet's write-up of the work at the block, committed as `path` on the run's
    # work ref (none: there was no workspace to commit it in).
    report: str = ""
    path: str | None = None
    # Where it blocked: `audit` (after an evaluation), or `produce` / `refine` (during the
    # step's work), and then the tool call it refused.
    during: str = "audit"
    refused: str = ""


class RunState(BaseModel):
    """The status query, and `.loops/run.json` on the run's branch: the run's progress, its
    block state and its token usage (docs/loop.md#control)."""

    run_id: str
    alias: str
    status: RunStatus = RunStatus.RUNNING
    task: str
    template: str | None = None
    iteration: int = 0
    max_iterations: int
    phase: Phase = Phase.A
    current_step: Step = Step.HYDRATE
    thresholds: Thresholds
    rules: list[Rule] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)
    last_score: float = 0.0
    stagnation_count: int = 0
    blocked: bool = False
    block: BlockInfo = Field(default_factory=BlockInfo)
    stop: StopInfo = Field(default_factory=StopInfo)
    stop_reason: StopReason | None = None
    artifact_commit: str | None = None
    branch: str
    origin: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
    budget: Budget | None = Field(
        default=None,
        description="what the run may spend (a graph's task loop: what the graph allotted "
        "it); unset in runs recorded before the state carried it",
    )
    playbook: PlaybookUse | None = Field(
        default=None, description="the playbook version and items hydration was given"
    )
    prep: str = Field(
        default="",
        description="the prep package the run's plan came from (its tool and hash); empty: none",
    )
    prep_skipped: list[str] = Field(
        default_factory=list,
        description="that package's task lines that could not be read (`line N: why`)",
    )
    prep_rejected: list[str] = Field(
        default_factory=list, description="why a prep package found was not used"
    )
    created_at: str = ""
    updated_at: str = ""
    started_by: str = Field(
        default="", description="the name of the API token that started the run (or its graph)"
    )
    # What a person steering the run reads (docs/loop.md#steering-a-run); empty until the
    # step that sets each has run, and in runs recorded before the state carried them.
    plan: PlanView | None = Field(default=None, description="the latest iteration plan")
    evaluation: EvaluationView | None = Field(
        default=None, description="the latest evaluation, rule by rule"
    )
    verdicts: Verdicts = Field(
        default_factory=Verdicts,
        description="the critic's, artifact critic's, custodiet's "
        "and QA verifier's latest verdicts",
    )
    gate: GateView | None = Field(
        default=None, description="the gate the run waits at now (approval, block, pause)"
    )
    # Empty until the worker that prepares the workspace names it, and in runs recorded
    # before runs named it.
    model_source: str = Field(
        default="",
        description="the model answering the run: `anthropic`, `anthropic (<host>)` for "
        "ANTHROPIC_BASE_URL's server, `offline` or `offline (scripted)`",
    )
    proof: RunProof | None = Field(
        default=None,
        description="how the run's work is proven, and what the proof showed "
        "(docs/loop.md#the-runs-proof); null in runs recorded before runs had one",
    )


class Approval(BaseModel):
    """Interactive mode: a person confirms (and may edit) criteria and max iterations,
    validated as in a new request."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] | None = None
    thresholds: Thresholds | None = None
    max_iterations: int | None = Field(default=None, ge=1, le=20)
    note: str | None = Field(default=None, max_length=2000)
    verify: ProofCommands | None = Field(
        default=None,
        description="replaces the run's proof commands (`[]`: nothing proves it); unset: they stay",
    )
    allow_unverified: bool | None = Field(
        default=None, description="whether the run may complete with code nothing proves"
    )

    @field_validator("rules")
    @classmethod
    def _normalised(cls, rules: list[Rule] | None) -> list[Rule] | None:
        if rules is None:
            return None
        if not rules:
            raise ValueError("approved rules must not be empty")
        return given_rules(rules)
