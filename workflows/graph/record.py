"""A task graph's record as its workflow keeps it: the graph's state (the status query) and
its ledger, where every task transition is a line (docs/graphs.md#the-ledger). Used from
inside the workflow only: it reads `workflow.now()`, never the real clock."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from loopworks.schemas.graph import GraphMemory, GraphState, GraphStatus
    from loopworks.schemas.notify import NotifyPlan
    from loopworks.schemas.payloads import NotifyFailedPayload
    from loopworks.schemas.tasks import LedgerLine, TaskStatus
    from loopworks.workflows.graph import decisions as decide
    from loopworks.workflows.notifying import Notifier, graph_body, graph_event
    from loopworks.workflows.record import SearchAttributes
    from loopworks.workflows.search_attributes import (
        GRAPH_STATUS,
        GRAPH_TASKS,
        TASKS_COMPLETED,
        TASKS_FAILED,
    )


class GraphRecord:
    def __init__(self, memory: GraphMemory, notify: NotifyPlan | None = None) -> None:
        self.memory = memory
        self._search_attributes = SearchAttributes()
        self.notifier = Notifier(notify, self.notify_failed)

    @property
    def state(self) -> GraphState:
        return self.memory.state

    def note(self, task_id: str, status: TaskStatus, summary: str, **fields: Any) -> None:
        """One ledger line; the task's status follows it."""
        task_state = self.state.task(task_id)
        task_state.status = status
        self.memory.ledger.append(
            LedgerLine(
                id=task_id,
                status=status,
                updated_at=workflow.now().isoformat(),
                summary=summary,
                attempt=max(task_state.attempts, 1),
                **fields,
            )
        )
        self.touch()

    def unblock(self) -> None:
        """A blocked task whose requirements are met again (a fix completed) may start."""
        statuses = self.state.statuses()
        fixes = decide.fixes_by_root([t.task for t in self.state.tasks])
        for task_state in self.state.tasks:
            if task_state.status == TaskStatus.BLOCKED and all(
                decide.requirement_met(r, statuses, fixes) for r in task_state.task.requires
            ):
                self.note(task_state.task.id, TaskStatus.PENDING, "unblocked: its fix completed")

    def pending(self) -> list[str]:
        """The tasks waiting to start, in graph order."""
        return [t.task.id for t in self.state.tasks if t.status == TaskStatus.PENDING]

    def not_started(self, task_ids: list[str], why: str) -> None:
        """Tasks the graph ends without starting: each `blocked`, saying why
        (docs/graphs.md#budget)."""
        for task_id in task_ids:
            self.state.task(task_id).last_failure = why
            self.note(task_id, TaskStatus.BLOCKED, why)

    def finish(self, status: GraphStatus, message: str) -> None:
        self.state.message = message
        self.set_status(status)

    def set_status(self, status: GraphStatus) -> None:
        changed = status != self.state.status
        self.state.status = status
        self.touch()
        event = graph_event(self.state)
        if changed and event is not None and self.notifier.wants(event):
            self.memory.notified += 1
            body = graph_body(self.state, event, workflow.now().isoformat())
            self.notifier.send(body, self.memory.notified)

    def notify_failed(self, failed: NotifyFailedPayload) -> None:
        """A notification given up: kept in the graph's state (docs/notifications.md)."""
        self.state.notify_failed.append(failed)
        self.touch()

    def touch(self) -> None:
        self.state.updated_at = workflow.now().isoformat()
        self._sync_search_attributes()

    def _sync_search_attributes(self) -> None:
        counts = decide.counts(self.state.statuses())
        wanted: list[SearchAttributeUpdate[Any]] = [
            GRAPH_STATUS.value_set(self.state.status.value),
            GRAPH_TASKS.value_set(" ".join(f"{name}={n}" for name, n in counts.items())),
            TASKS_COMPLETED.value_set(counts[TaskStatus.COMPLETED.value]),
            TASKS_FAILED.value_set(counts[TaskStatus.FAILED.value]),
        ]
        self._search_attributes.upsert(wanted)

    def done(self) -> bool:
        """Every task completed and verified, a failed one counting when its fix did."""
        statuses = self.state.statuses()
        fixes = decide.fixes_by_root([t.task for t in self.state.tasks])
        return all(
            status == TaskStatus.COMPLETED
            or (status == TaskStatus.FAILED and decide.requirement_met(task_id, statuses, fixes))
            for task_id, status in statuses.items()
        )
