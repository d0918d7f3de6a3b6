"""A task graph: a goal split into atomic tasks (docs/graphs.md), each run as a child loop, in
dependency order, with one ledger and one merge queue. The request, the graph's state
(its status query), its memory across continue-as-new and its result."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loopworks.schemas.notify import NotifyPlan, NotifyRequest
from loopworks.schemas.payloads import NotifyFailedPayload
from loopworks.schemas.prep import PrepUpload
from loopworks.schemas.run import BranchName, Budget, Mode, Thresholds, TokenUsage
from loopworks.schemas.tasks import TASK_ID_PATTERN, LedgerLine, Task, TaskStatus

# A task's loops are runs of their own, named after the graph, the task and the attempt.
TASK_LOOP_SUFFIX = rf"/{TASK_ID_PATTERN.strip('^$').replace('(', '(?:')}/[1-9][0-9]*"


def task_loop_id(graph_id: str, task_id: str, attempt: int) -> str:
    """The run id of a task's `attempt`th loop (it matches `TASK_LOOP_SUFFIX` after the
    graph's id)."""
    return f"{graph_id}/{task_id}/{attempt}"


class RequestedTask(Task):
    """A task as a client writes it: a field `Task` does not know is a mistake to name
    (a 422), not one to drop without a word."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, value: Any) -> Any:
        # A `Task` a program hands over (the CLI's edit, a test) is one as written too.
        return value.model_dump() if isinstance(value, Task) else value


class GraphRequest(BaseModel):
    """`POST /graphs`: a goal, and optionally the tasks already split."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=20_000, description="what the graph achieves")
    repo: str | None = Field(default=None, description="URL or path of a git repository")
    base_branch: BranchName | None = None
    max_parallel: int = Field(default=3, ge=1, le=10, description="task loops at once")
    mode: Mode = Field(
        default=Mode.AUTO, description="`interactive`: wait for approve before any task"
    )
    tasks: list[RequestedTask] | None = Field(
        default=None, description="the tasks, validated like a planner's; none: plan them"
    )
    prep_package: PrepUpload | None = Field(
        default=None,
        description="a prep package sent with the request instead of read from the "
        "repository's .workflow/.loop/",
    )
    # Each task's loop.
    max_iterations: int | None = Field(
        default=None,
        ge=1,
        le=20,
        description="each task loop's iteration limit; unset: the prep package's "
        "`auto_loop.max_iterations` (10 when it names none) when the tasks come from one, "
        "else 4",
    )
    thresholds: Thresholds = Field(default_factory=Thresholds)
    audit_probability: float = Field(default=0.2, ge=0, le=1)
    budget: Budget | None = Field(default=None, description="each task loop's budget")
    total_budget: Budget | None = Field(
        default=None,
        description="what the whole graph may spend, all its task loops together "
        "(docs/graphs.md#budget)",
    )
    notify: NotifyRequest | None = Field(
        default=None,
        description="webhooks to tell when the graph waits for a person or finishes "
        "(docs/notifications.md)",
    )

    @field_validator("goal")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("goal must not be blank")
        return value


class GraphStatus(StrEnum):
    PLANNING = "planning"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        return self in (GraphStatus.COMPLETED, GraphStatus.FAILED, GraphStatus.STOPPED)


class TaskState(BaseModel):
    """One task as the graph sees it: its status, attempts and their loops."""

    task: Task
    status: TaskStatus = TaskStatus.PENDING
    attempts: int = Field(default=0, ge=0)
    run_ids: list[str] = Field(default_factory=list, description="its loops, one per attempt")
    last_failure: str = Field(default="", description="why the latest attempt failed")


class GraphState(BaseModel):
    """The status query: the graph, its integration branch and every task."""

    graph_id: str
    goal: str
    status: GraphStatus = GraphStatus.PLANNING
    origin: str = ""
    integration_branch: str = ""
    integration_commit: str = ""
    max_parallel: int = 3
    tasks: list[TaskState] = Field(default_factory=list)
    source: str = Field(
        default="", description="where the tasks came from: request, prep package, planner"
    )
    prep_rejected: list[str] = Field(
        default_factory=list,
        description="why the repository's prep package was not used (then planned)",
    )
    prep_skipped: list[str] = Field(
        default_factory=list,
        description="the prep package's task lines that could not be read, each skipped "
        "(`line N: why`); the package's other tasks were used",
    )
    max_iterations: int | None = Field(
        default=None,
        description="each task loop's iteration limit (the request's, the prep package's, "
        "or the default); unset in graphs that took the request's as it was",
    )
    message: str = Field(default="", description="why the graph ended as it did")
    total_budget: Budget | None = Field(
        default=None, description="what the whole graph may spend (docs/graphs.md#budget)"
    )
    usage: TokenUsage = Field(
        default_factory=TokenUsage, description="what its task loops spent, all together"
    )
    created_at: str = ""
    updated_at: str = ""
    started_by: str = Field(default="", description="the name of the API token that started it")
    notify_failed: list[NotifyFailedPayload] = Field(
        default_factory=list, description="notifications given up after their retries"
    )

    def task(self, task_id: str) -> TaskState:
        return next(t for t in self.tasks if t.task.id == task_id)

    def statuses(self) -> dict[str, TaskStatus]:
        return {t.task.id: t.status for t in self.tasks}


class GraphApproval(BaseModel):
    """Interactive mode: start the tasks, possibly an edited list of them."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[RequestedTask] | None = None
    note: str | None = Field(default=None, max_length=2000)


class GraphMemory(BaseModel):
    """All the graph knows, carried whole through continue-as-new."""

    state: GraphState
    ledger: list[LedgerLine] = Field(default_factory=list)
    recorded: int = Field(default=0, ge=0, description="ledger lines already on the branch")
    approved: bool = False
    paused: bool = False
    notified: int = Field(default=0, ge=0, description="transitions notifications were sent for")
    # The budget each running task loop was started with, by task id: held back from the
    # graph's total until the loop ends (docs/graphs.md#budget).
    allotted: dict[str, Budget] = Field(default_factory=dict)
    # A loop ran out of what the total had left it: too little is left to start another.
    budget_spent: bool = False


class GraphInput(BaseModel):
    graph_id: str
    request: GraphRequest
    created_at: str
    memory: GraphMemory | None = None
    # The API token's name that started it; its task loops carry it on. "" for a graph
    # started other than through the API.
    started_by: str = ""
    # Continue-as-new once the history has this many events (when no task loop runs);
    # unset, the server's own suggestion decides.
    continue_as_new_after_events: int | None = Field(default=None, ge=10)
    # Whom to notify of what (the request's webhooks and the deployment's); None: nobody.
    notify: NotifyPlan | None = None
    # The ids of the slots of the caps that admitted it (api/admission.py), given back as
    # it closes; none for a graph started other than by the API.
    slots: list[str] = Field(default_factory=list)

    def first_memory(self) -> GraphMemory:
        """A new graph's memory: its state as the request sets it up."""
        return GraphMemory(
            state=GraphState(
                graph_id=self.graph_id,
                goal=self.request.goal,
                max_parallel=self.request.max_parallel,
                total_budget=self.request.total_budget,
                created_at=self.created_at,
                updated_at=self.created_at,
                started_by=self.started_by,
            )
        )


class GraphResult(BaseModel):
    state: GraphState
    ledger: list[LedgerLine]
