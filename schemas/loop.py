"""The workflow's own input and result, and the run's memory that continue-as-new carries."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from loopworks.schemas.evaluation import CheckResult, Evaluation
from loopworks.schemas.events import Event
from loopworks.schemas.notify import NotifyPlan
from loopworks.schemas.playbook import PlaybookItem
from loopworks.schemas.roles import IterationPlan, Role
from loopworks.schemas.rules import PreparedCheck
from loopworks.schemas.run import RunRequest, RunState
from loopworks.schemas.steps import ArtifactOutput

# A run's iteration limit when neither its request nor a prep package sets one.
DEFAULT_MAX_ITERATIONS = 4
# Events the workflow keeps for queries and the stream once git holds them; older ones are
# read from the run's `.loops/history.jsonl`. Events git does not hold yet are always kept.
EVENT_TAIL = 64


class RunMemory(BaseModel):
    """Everything a run knows that is not in git: owned by the workflow, mutated in place,
    and carried as-is through continue-as-new. A field added here survives it unchanged."""

    state: RunState
    tail: list[Event] = Field(
        default_factory=list, description="the latest events, and all that git lacks"
    )
    last_seq: int = Field(default=0, ge=0, description="seq of the latest event emitted")
    saved_seq: int = Field(
        default=0, ge=0, description="every event up to this seq is in git's history.jsonl"
    )
    calls: dict[Role, int] = Field(default_factory=dict, description="model calls per role")
    recorded_calls: list[str] = Field(
        default_factory=list,
        description="the names of the single-shot calls made (`01-plan-002`): the close "
        "looks up those still on refs of their own (workspace/call_records.py)",
    )
    carried_calls: dict[str, str] = Field(
        default_factory=dict,
        description="the records of single-shot calls git lacks, by name: the steps handed "
        "them back (ModelStep.carry_calls) and the run's next commit holds them",
    )
    commit: str = Field(default="", description="the run's latest commit (its workspace)")
    iteration_start: str = Field(
        default="", description="the commit the current iteration started from"
    )
    base_commit: str = Field(default="", description="the commit the run started from")
    intent: str = ""
    critic_verdict: str | None = None
    guidance: list[str] = Field(default_factory=list)
    last_evaluation: Evaluation | None = None
    previous_evaluation: Evaluation | None = Field(
        default=None, description="the evaluation before the latest: stagnation compares them"
    )
    last_plan: IterationPlan | None = None
    last_artifact: ArtifactOutput | None = None
    next_iteration: int = Field(default=1, ge=1, description="where a continued run goes on")
    approved: bool = False
    paused: bool = False
    notified: int = Field(default=0, ge=0, description="transitions notifications were sent for")
    operator_note: str | None = None
    generation: int = Field(default=1, ge=1, description="executions so far, continue-as-new")
    playbook: str = Field(default="", description="the origin's playbook name")
    playbook_items: list[PlaybookItem] = Field(
        default_factory=list, description="the playbook items hydration was given"
    )
    prepared_checks: list[PreparedCheck] = Field(
        default_factory=list, description="PREPARE's latest checks"
    )
    prepared_for: str = Field(
        default="", description="the active rules those checks were prepared from (rules_key)"
    )
    checked_commit: str = Field(default="", description="the commit last evaluated")
    checked: list[tuple[PreparedCheck, CheckResult]] = Field(
        default_factory=list, description="each check run on that commit, and its result"
    )
    given_plan: list[str] = Field(
        default_factory=list,
        description="a prep package's tasks, one step each: they replace hydration's plan",
    )

    def unsaved(self) -> list[Event]:
        return [event for event in self.tail if event.seq > self.saved_seq]

    def remember(self, event: Event) -> None:
        """Keep a new event (numbered by `last_seq`) in the tail."""
        self.last_seq = event.seq
        self.tail.append(event)
        self._trim()

    def saved(self, seq: int, calls: Iterable[str] = ()) -> None:
        """Git's history.jsonl now holds every event up to `seq`, and the run's branch the
        records of `calls`."""
        self.saved_seq = max(self.saved_seq, seq)
        for name in calls:
            self.carried_calls.pop(name, None)
        self._trim()

    def _trim(self) -> None:
        # The latest EVENT_TAIL events stay, and every event git does not hold yet.
        cut = len(self.tail) - EVENT_TAIL
        if cut > 0:
            self.tail = [e for i, e in enumerate(self.tail) if i >= cut or e.seq > self.saved_seq]


class LoopInput(BaseModel):
    run_id: str
    alias: str
    request: RunRequest
    created_at: str
    # None for a new run; a continued run's memory otherwise.
    memory: RunMemory | None = None
    # The API token's name that started it (its graph's, for a task loop); "" for a run
    # started other than through the API.
    started_by: str = ""
    # The task graph whose task this loop is (docs/graphs.md#running-tasks), None for a
    # run of its own: a graph's loop may not write the graph's ledger or task files.
    graph_id: str | None = None
    # Continue-as-new once the history has this many events (at an iteration
    # boundary); unset, the server's own suggestion decides.
    continue_as_new_after_events: int | None = Field(default=None, ge=10)
    # Whom to notify of what (the request's webhooks and the deployment's); None: nobody.
    notify: NotifyPlan | None = None
    # The ids of the slots of the caps that admitted it (api/admission.py), given back as
    # it closes; none for a graph's task loop and a run started other than by the API.
    slots: list[str] = Field(default_factory=list)

    def first_memory(self) -> RunMemory:
        """A new run's memory: its state as the request sets it up."""
        request = self.request
        state = RunState(
            run_id=self.run_id,
            alias=self.alias,
            task=request.task,
            template=request.template,
            max_iterations=request.max_iterations or DEFAULT_MAX_ITERATIONS,
            thresholds=request.thresholds,
            rules=request.rules,
            branch=f"loops/{self.run_id}",
            origin=request.repo or "",
            created_at=self.created_at,
            updated_at=self.created_at,
            started_by=self.started_by,
            budget=request.budget,
        )
        return RunMemory(state=state)


class LoopResult(BaseModel):
    state: RunState
    events: int = Field(description="how many events the run emitted (the last seq)")
    # The latest events; the run's branch holds the whole history.jsonl.
    log: list[Event] = Field(default_factory=list)
