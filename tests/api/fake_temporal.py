"""A stand-in for the Temporal client: one open run, answered from memory.

Just enough of `Client` and `WorkflowHandle` for the API's run routes to answer 2xx
without a server, so unit tests can tell "refused at the door" from "served".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loopworks.schemas.events import EVENT, Event, EventName
from loopworks.schemas.rules import Phase
from loopworks.schemas.run import RunState, Thresholds, TokenUsage
from loopworks.workflows.slot import SlotWorkflow


def run_state(run_id: str) -> RunState:
    return RunState(
        run_id=run_id,
        alias="fake",
        task="a fake run",
        max_iterations=4,
        thresholds=Thresholds(),
        branch=f"loops/{run_id}",
        origin="/nowhere",
    )


def event(run_id: str, seq: int, name: EventName = EventName.PAUSED) -> Event:
    """An event whose payload has no required fields (paused, resumed) unless given one."""
    return EVENT.validate_python(
        {
            "seq": seq,
            "ts": "2025-01-01T00:00:00+00:00",
            "run_id": run_id,
            "iteration": 1,
            "phase": Phase.A,
            "step": "PLAN",
            "event": name,
        }
    )


@dataclass
class FakeDescription:
    status: WorkflowExecutionStatus
    workflow_type: str = "LoopWorkflow"


@dataclass
class FakeHandle:
    id: str
    events: list[Event] = field(default_factory=list)
    # How many `describe` calls answer RUNNING before the run reads as closed.
    open_for: int = 1_000_000
    describes: int = 0
    updates: list[str] = field(default_factory=list)

    async def describe(self, **_: Any) -> FakeDescription:
        self.describes += 1
        closed = self.describes > self.open_for
        return FakeDescription(
            WorkflowExecutionStatus.FAILED if closed else WorkflowExecutionStatus.RUNNING
        )

    async def query(self, query: Any, *args: Any, **_: Any) -> Any:
        if query.__name__ == "events":
            after = args[0] if args else 0
            return self.events[after:]
        return run_state(self.id)

    async def execute_update(self, update: Any, *args: Any, **_: Any) -> RunState:
        self.updates.append(update.__name__)
        return run_state(self.id)

    async def signal(self, *_: Any, **__: Any) -> None:
        return None

    def fetch_history_events(self, **_: Any) -> AsyncIterator[Any]:
        """A fake's workflows have no history to read (a run's origin, say): Temporal's
        answer for a workflow it does not know."""

        async def unknown() -> AsyncIterator[Any]:
            raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
            yield  # an async generator

        return unknown()


@dataclass
class CarryingHandle(FakeHandle):
    """A live run that has made model calls and holds their trajectory files for its next
    commit (`carried_calls`), by name; no origin, so the trajectory is those files only."""

    carried: dict[str, str] = field(default_factory=dict)

    async def query(self, query: Any, *args: Any, **options: Any) -> Any:
        if query.__name__ == "carried_calls":
            return self.carried
        if query.__name__ == "status":
            update = {"origin": "", "usage": TokenUsage(calls=len(self.carried))}
            return run_state(self.id).model_copy(update=update)
        return await super().query(query, *args, **options)


@dataclass
class FakeCount:
    count: int


@dataclass
class FakeStarted:
    id: str
    result_run_id: str = "execution-1"


@dataclass
class FakeSlot:
    """A claimed slot of a cap (api/admission.py): terminating it gives it back."""

    client: FakeClient
    id: str

    async def terminate(self, reason: str | None = None, **_: Any) -> None:
        self.client.slots.pop(self.id)
        self.client.released.append(self.id)


class FakeClient:
    def __init__(self) -> None:
        self.handles: dict[str, FakeHandle] = {}
        # What visibility counts for a query containing each key (quotas ask it); 0 else.
        self.counts: dict[str, int] = {}
        self.counted: list[str] = []
        self.starts: list[dict[str, Any]] = []
        # Slots held (Temporal's one open workflow per id), by id: the holder's id.
        self.slots: dict[str, str] = {}
        self.released: list[str] = []

    async def count_workflows(self, query: str, **_: Any) -> FakeCount:
        self.counted.append(query)
        return FakeCount(next((n for key, n in self.counts.items() if key in query), 0))

    def handle(self, run_id: str) -> FakeHandle:
        return self.handles.setdefault(run_id, FakeHandle(run_id))

    def get_workflow_handle_for(self, _run: Any, run_id: str) -> FakeHandle:
        return self.handle(run_id)

    def list_workflows(self, *_: Any, **__: Any) -> AsyncIterator[Any]:
        async def nothing() -> AsyncIterator[Any]:
            empty: list[Any] = []
            for item in empty:
                yield item

        return nothing()

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> Any:
        return (
            FakeSlot(self, workflow_id) if workflow_id in self.slots else self.handle(workflow_id)
        )

    async def start_workflow(self, run: Any, params: Any, **options: Any) -> FakeStarted:
        if run is SlotWorkflow.run:
            if options["id"] in self.slots:
                raise WorkflowAlreadyStartedError(options["id"], "SlotWorkflow")
            self.slots[options["id"]] = params.holder
        else:
            self.starts.append({"params": params, **options})
        return FakeStarted(options.get("id", ""))

    def as_client(self) -> Client:
        return cast(Client, self)
