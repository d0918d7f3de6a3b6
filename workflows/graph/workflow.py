"""TaskGraphWorkflow: a goal split into atomic tasks (docs/graphs.md), each a child LoopWorkflow,
run in dependency order, merged one at a time, completed only when its verification
command passes on the integration branch.

The workflow is the sole writer of the ledger: it keeps it in its memory (the `ledger`
query) and appends it to `docs/current/task-status.jsonl` on the integration branch
through an activity. Which task starts, which is stranded, what fix follows a failure are
plain functions in `workflows.graph.decisions`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.integration import IntegrationActivities
    from loopworks.activities.planning import PlanningActivities
    from loopworks.schemas.admission import Spent
    from loopworks.schemas.graph import (
        GraphApproval,
        GraphInput,
        GraphRequest,
        GraphResult,
        GraphState,
        GraphStatus,
        TaskState,
        task_loop_id,
    )
    from loopworks.schemas.integration import (
        IntegrationInfo,
        IntegrationRequest,
        LedgerRequest,
        MergeRequest,
    )
    from loopworks.schemas.loop import LoopResult
    from loopworks.schemas.payloads import NotifyFailedPayload
    from loopworks.schemas.prep import package_sha256, prep_package_errors, prep_tasks
    from loopworks.schemas.run import Mode, RunStatus, StopReason, budget_left
    from loopworks.schemas.steps import PlanGraphInput
    from loopworks.schemas.tasks import (
        GraphError,
        LedgerLine,
        Task,
        TaskStatus,
        ledger_sha256,
        validated_graph,
    )
    from loopworks.workflows.graph import decisions as decide
    from loopworks.workflows.graph import inputs as graph_inputs
    from loopworks.workflows.graph.budget import GraphBudget
    from loopworks.workflows.graph.record import GraphRecord
    from loopworks.workflows.loop import LoopWorkflow
    from loopworks.workflows.notifications import NOTIFY_FAILED_SIGNAL
    from loopworks.workflows.policies import INTEGRATION, MODEL_CALL, execute, history_is_long
    from loopworks.workflows.slot import give_back
    from loopworks.workflows.steps import spent_by

# A task's loop, then its merge and verification, gets this many tries before a fix task.
ATTEMPTS = 2


# The workflow's type: visibility queries name it (api/routes/graphs.py, api/quotas.py).
GRAPH_WORKFLOW = "TaskGraphWorkflow"


@workflow.defn(name=GRAPH_WORKFLOW)
class TaskGraphWorkflow:
    @workflow.init
    def __init__(self, params: GraphInput) -> None:
        self._params = params
        self._request = params.request
        self._memory = params.memory or params.first_memory()
        self._running: dict[str, workflow.ChildWorkflowHandle[Any, LoopResult]] = {}
        self._stop_requested = False
        self._stop_note = ""
        self._stops_sent = False
        # At the approval gate (interactive mode), paused there or not.
        self._awaiting = False
        # The repository's paths at the base commit, for the atomic rule on an edited list.
        self._base_files: list[str] | None = None
        self._woken = False
        self._record = GraphRecord(self._memory, params.notify)
        self._budget = GraphBudget(self._memory)

    @property
    def _state(self) -> GraphState:
        return self._memory.state

    # --- messages --------------------------------------------------------------------

    @workflow.query
    def status(self) -> GraphState:
        return self._state

    @workflow.query
    def ledger(self) -> list[LedgerLine]:
        return self._memory.ledger

    @workflow.signal
    def stop(self, reason: str | None = None) -> None:
        """Stop every running task loop (each still pushes what it has); start no more."""
        if self._stop_requested or self._state.status.is_terminal:
            return
        self._stop_requested = True
        self._stop_note = reason or ""
        self._woken = True

    @workflow.signal(name=NOTIFY_FAILED_SIGNAL)
    def notify_failed(self, failed: NotifyFailedPayload) -> None:
        """A notification of the graph's its delivery workflow gave up: kept in its state
        (docs/notifications.md#retries)."""
        self._record.notify_failed(failed)

    @workflow.update
    async def pause(self) -> GraphState:
        """Hold new starts; running task loops go on. A graph paused while it awaits
        approval still takes the approval, which leaves it paused."""
        self._memory.paused = True
        self._record.set_status(GraphStatus.PAUSED)
        return self._state

    @pause.validator
    def _pause_applies(self) -> None:
        if self._memory.paused or self._state.status.is_terminal:
            raise ValueError(f"graph cannot be paused (status {self._state.status.value})")

    @workflow.update
    async def resume(self) -> GraphState:
        self._memory.paused = False
        self._woken = True
        if self._state.status == GraphStatus.PAUSED:
            going_on = GraphStatus.AWAITING_APPROVAL if self._awaiting else GraphStatus.RUNNING
            self._record.set_status(going_on)
        return self._state

    @resume.validator
    def _resume_applies(self) -> None:
        if not self._memory.paused:
            raise ValueError(f"graph is not paused (status {self._state.status.value})")

    @workflow.update
    async def approve(self, approval: GraphApproval) -> GraphState:
        """Interactive mode: start the tasks, possibly an edited list (validated again)."""
        if approval.tasks is not None:
            self._state.tasks = [TaskState(task=task) for task in approval.tasks]
            self._state.source = "approval"
        self._memory.approved = True
        if self._stop_requested:
            return self._state
        # The graph goes on in this same workflow task (`_work` sets it running, or paused):
        # answer it as it goes on, not `awaiting_approval` (a copy: its state is untouched).
        going_on = GraphStatus.PAUSED if self._memory.paused else GraphStatus.RUNNING
        return self._state.model_copy(update={"status": going_on})

    @approve.validator
    def _approve_applies(self, approval: GraphApproval) -> None:
        # Approved, it reads awaiting_approval until its tasks are set up: once is all.
        if self._memory.approved or not self._awaiting:
            raise ValueError(f"graph is not awaiting approval (status {self._state.status})")
        if approval.tasks is not None:
            # GraphError is a ValueError: the update fails, and the graph still awaits one.
            validated_graph(approval.tasks, self._base_files)

    # --- the graph ---------------------------------------------------------------------

    @workflow.run
    async def run(self, params: GraphInput) -> GraphResult:
        try:
            if not self._state.tasks:
                await self._prepare()
            await self._work()
        except ActivityError as err:
            # The task planner's requests were billed, answered validly or not: counted
            # in what the graph spent, which its client's day is charged.
            if workflow.patched("graph-counts-a-failed-plan"):
                self._state.usage = self._state.usage + spent_by(err)
            self._record.finish(GraphStatus.FAILED, str(err.cause or err))
        except GraphError as err:
            self._record.finish(GraphStatus.FAILED, f"the tasks are not a valid graph: {err}")
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._record.notifier.drain()  # the graph has finished: only notifications wait
        # The caps' slots that admitted it, and what it spent, for the next client.
        if self._params.slots and workflow.patched("admission-slots"):
            usage = self._state.usage
            spent = Spent(tokens=usage.total_tokens, cost_usd=usage.cost_usd)
            await give_back(self._params.slots, self._state.graph_id, spent)
        return GraphResult(state=self._state, ledger=self._memory.ledger)

    async def _prepare(self) -> None:
        """The integration branch, then the tasks (given, or planned), then approval."""
        request, state = self._request, self._state
        info = await execute(
            IntegrationActivities.prepare_integration,
            IntegrationRequest(
                graph_id=state.graph_id, repo=request.repo, base_branch=request.base_branch
            ),
            INTEGRATION,
        )
        state.origin, state.integration_branch = info.origin, info.branch
        state.integration_commit = info.commit
        if request.tasks is not None:
            tasks, state.source = validated_graph(request.tasks, info.files), "request"
        elif prepared := self._from_prep_package(info):
            tasks = prepared
        else:
            planned = await execute(
                PlanningActivities.plan_graph,
                PlanGraphInput(
                    run_id=state.graph_id,
                    call_index=1,
                    goal=request.goal,
                    files=info.files,
                    origin=state.origin,
                    # The planner spends from the total too (docs/graphs.md#budget).
                    allowance=budget_left(request.total_budget, state.usage),
                ),
                MODEL_CALL,
            )
            # Counted in what the graph spent, which then leaves its loops less; a graph
            # planned before it was counted goes on as it decided.
            if workflow.patched("graph-planner-usage"):
                state.usage = state.usage + planned.usage
            tasks, state.source = validated_graph(planned.tasks, info.files), "planner"
        state.tasks = [TaskState(task=task) for task in tasks]
        if request.mode == Mode.INTERACTIVE:
            self._record.set_status(GraphStatus.AWAITING_APPROVAL)
            self._awaiting, self._base_files = True, info.files
            await workflow.wait_condition(lambda: self._memory.approved or self._stop_requested)
            self._awaiting = False
            # The approval's validator checked an edited list against the repository; an
            # edit approved by a worker from before it did not, and fails the graph here.
            validated_graph([t.task for t in state.tasks], info.files)
        for task_state in state.tasks:
            self._record.note(task_state.task.id, TaskStatus.PENDING, f"from the {state.source}")
        await self._save_ledger()

    def _from_prep_package(self, info: IntegrationInfo) -> list[Task]:
        """The tasks of the prep package sent with the request, else of the repository's,
        or none (rejected: every reason listed)."""
        if self._request.prep_package is None and info.prep_package is None:
            return []
        # Packages for `ccw-loop`, unreadable lines skipped, the package's iteration limit
        # (docs/graphs.md#prep-packages); a graph started before decides as it did.
        if workflow.patched("prep-package-as-written"):
            return graph_inputs.prep_for_graph(self._request, self._state, info, workflow.now())
        return _prep_before_as_written(self._request, self._state, info, workflow.now())

    async def _work(self) -> None:
        """Start what can start, wait for a loop to end, merge it, until nothing can."""
        state = self._state
        self._record.set_status(GraphStatus.PAUSED if self._memory.paused else GraphStatus.RUNNING)
        while True:
            limit = self._params.continue_as_new_after_events
            if not self._running and self._record.notifier.idle and history_is_long(limit):
                # No loop is running: the graph's whole memory goes to a fresh history. A
                # stopped graph ends here instead: a fresh history would not know of the stop.
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not (self._stop_requested and workflow.patched("graph-stop-ends-it-here")):
                    workflow.continue_as_new(
                        self._params.model_copy(update={"memory": self._memory})
                    )
            if not self._stop_requested and not self._memory.paused:
                for task_id in decide.startable(
                    [t.task for t in state.tasks],
                    state.statuses(),
                    self._running,
                    state.max_parallel,
                ):
                    if self._budget.spent:  # held by running loops, or spent
                        break
                    # A stop or a pause that came while the last one started holds the rest.
                    held = self._stop_requested or self._memory.paused
                    if held and workflow.patched("graph-holds-mid-batch"):
                        break
                    await self._start(task_id)
                await self._save_ledger()
            if not self._running:
                if self._stop_requested or not self._memory.paused:
                    break
                # Paused with nothing running: hold until resumed or stopped.
                await workflow.wait_condition(self._released)
                continue
            await self._wait_for_a_loop()
        if self._stop_requested:
            self._record.finish(GraphStatus.STOPPED, decide.stop_message(self._stop_note))
        elif self._record.done():
            self._record.finish(GraphStatus.COMPLETED, "every task completed and verified")
        elif self._budget.spent and (waiting := self._record.pending()):
            self._record.not_started(waiting, f"not started: {self._budget.message([])}")
            self._record.finish(GraphStatus.FAILED, self._budget.message(waiting))
        else:
            failed = [t.task.id for t in state.tasks if t.status != TaskStatus.COMPLETED]
            self._record.finish(GraphStatus.FAILED, f"not completed: {', '.join(failed)}")
        await self._save_ledger()

    async def _start(self, task_id: str) -> None:
        state = self._state
        task_state = state.task(task_id)
        task_state.attempts += 1
        child_id = task_loop_id(self._state.graph_id, task_id, task_state.attempts)
        task_state.run_ids.append(child_id)
        # Its budget: the per-loop one, within what is left of the graph's.
        budget = self._budget.allot(task_id, self._request.budget)
        loop = graph_inputs.loop_input(task_state, self._params, state, budget, workflow.now())
        self._running[task_id] = await workflow.start_child_workflow(
            LoopWorkflow.run,
            loop,
            id=child_id,
            # The loop reflects and pushes what it has when the graph is cancelled.
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            search_attributes=graph_inputs.loop_attributes(state.graph_id, self._started_by),
            static_summary=f"{task_id}: {task_state.task.title}"[:200],
        )
        self._record.note(
            task_id,
            TaskStatus.IN_PROGRESS,
            f"attempt {task_state.attempts} started",
            run_id=child_id,
        )

    @property
    def _started_by(self) -> str:
        return self._state.started_by or self._params.started_by

    def _released(self) -> bool:
        return not self._memory.paused or self._stop_requested

    async def _wait_for_a_loop(self) -> None:
        """Until a loop ends or a message changes what may start (resume, stop). A message
        that came while the graph was busy (starting loops, saving its ledger) wakes it at
        once, rather than waiting for a loop to end."""
        woken = asyncio.ensure_future(workflow.wait_condition(lambda: self._woken))
        handles = {handle: task_id for task_id, handle in self._running.items()}
        done, _ = await workflow.wait([*handles, woken], return_when=asyncio.FIRST_COMPLETED)
        woken.cancel()
        self._woken = False
        if self._stop_requested and not self._stops_sent:
            self._stops_sent = True
            for task_id in list(self._running):
                await workflow.get_external_workflow_handle(
                    self._state.task(task_id).run_ids[-1]
                ).signal(LoopWorkflow.stop, f"the graph stopped: {self._stop_note}".strip())
        for handle in done:
            if handle in handles:
                await self._loop_ended(handles[handle], handle)

    async def _loop_ended(
        self, task_id: str, handle: workflow.ChildWorkflowHandle[Any, LoopResult]
    ) -> None:
        """Merge a finished loop's branch and verify it, one at a time: the merge queue."""
        del self._running[task_id]
        task_state = self._state.task(task_id)
        try:
            result = await handle
        except ChildWorkflowError as err:
            self._budget.ended(task_id, None)
            await self._failed(task_state, f"its loop failed: {err.cause or err}")
            return
        # A loop that ran out of what the total left it spends the graph's budget; a graph
        # whose loops ended before that rule goes on as it decided (docs/graphs.md#budget).
        if workflow.patched("graph-spent-when-a-loop-runs-out"):
            ran_out = result.state.stop_reason == StopReason.BUDGET_EXHAUSTED
            self._budget.ended(task_id, result.state.usage, ran_out, self._request.budget)
        else:
            self._budget.ended(task_id, result.state.usage)
        if self._stop_requested:
            # Said under the task by `loops graph status`, as a failure's reason is.
            task_state.last_failure = decide.STOPPED_WITH_THE_GRAPH
            self._record.note(task_id, TaskStatus.FAILED, decide.STOPPED_WITH_THE_GRAPH)
            return
        if result.state.status != RunStatus.COMPLETED:
            reason = result.state.stop_reason.value if result.state.stop_reason else "failed"
            await self._failed(task_state, f"its loop ended {result.state.status.value} ({reason})")
            return
        outcome = await execute(
            IntegrationActivities.merge_task,
            MergeRequest(
                graph_id=self._state.graph_id,
                origin=self._state.origin,
                integration_branch=self._state.integration_branch,
                task=task_state.task,
                task_branch=result.state.branch,
                attempt=task_state.attempts,
                committed_at=workflow.now(),
            ),
            INTEGRATION,
        )
        if not outcome.merged:
            detail = f"{outcome.reason}: {outcome.output_tail}".strip()
            await self._failed(task_state, detail, outcome.exit_code, outcome.output_sha256)
            return
        self._state.integration_commit = outcome.commit
        self._record.note(
            task_id,
            TaskStatus.COMPLETED,
            "merged; verification passed",
            run_id=task_state.run_ids[-1],
            exit_code=outcome.exit_code,
            output_sha256=outcome.output_sha256,
            delta={"files_added": outcome.files_added, "files_modified": outcome.files_modified},
        )
        self._record.unblock()

    async def _failed(
        self,
        task_state: TaskState,
        failure: str,
        exit_code: int | None = None,
        output_sha256: str | None = None,
    ) -> None:
        """Retry once with the failure as context; then a fix task, and what needs the
        failed task waits `blocked` while independent tasks go on."""
        task_id = task_state.task.id
        task_state.last_failure = failure[-4000:]
        if task_state.attempts < ATTEMPTS:
            self._record.note(
                task_id,
                TaskStatus.PENDING,
                f"attempt {task_state.attempts} failed, retrying: {failure[:300]}",
                exit_code=exit_code,
                output_sha256=output_sha256,
            )
            return
        self._record.note(
            task_id,
            TaskStatus.FAILED,
            failure[:500],
            exit_code=exit_code,
            output_sha256=output_sha256,
        )
        tasks = [t.task for t in self._state.tasks]
        if decide.root_id(task_id) == task_id:  # a failed fix gets no fix of its own
            fix = decide.fix_task(task_state.task, tasks, failure)
            self._state.tasks.append(TaskState(task=fix))
            self._record.note(fix.id, TaskStatus.PENDING, f"fix task for {task_id}")
        for dependant in sorted(decide.downstream(tasks, task_id)):
            if self._state.task(dependant).status == TaskStatus.PENDING:
                why = f"waits for {task_id}, which failed"
                self._record.note(dependant, TaskStatus.BLOCKED, why)

    # --- the record ----------------------------------------------------------------------

    async def _save_ledger(self) -> None:
        """Append the lines the integration branch lacks (the activity skips any it has)."""
        memory = self._memory
        fresh = memory.ledger[memory.recorded :]
        if not fresh:
            return
        written = await execute(
            IntegrationActivities.record_ledger,
            LedgerRequest(
                origin=self._state.origin,
                integration_branch=self._state.integration_branch,
                lines=fresh,
                start=memory.recorded,
                start_sha256=ledger_sha256(memory.ledger[: memory.recorded]),
                tasks=[t.task for t in self._state.tasks],
                committed_at=workflow.now(),
            ),
            INTEGRATION,
        )
        memory.recorded += len(fresh)
        self._state.integration_commit = written.commit


def _prep_before_as_written(
    request: GraphRequest, state: GraphState, info: IntegrationInfo, now: datetime
) -> list[Task]:
    """How a graph started before prep packages were taken as the preparation tool writes
    them decides, kept as it was for their replays: only `target_skill: loopworks`, a
    task line that cannot be read rejects the package, and the package sets no iteration
    limit. Frozen: change `graph_inputs.prep_for_graph`, never this."""
    upload = request.prep_package
    package_text = upload.package if upload else info.prep_package
    if package_text is None:
        return []
    tasks_text = upload.tasks if upload else info.prep_tasks
    tasks, errors, source = _package_before_as_written(package_text, tasks_text, state, info, now)
    state.prep_rejected, state.source, state.prep_skipped = errors, source, []
    return tasks


def _package_before_as_written(
    package_text: str,
    tasks_text: str | None,
    state: GraphState,
    info: IntegrationInfo,
    now: datetime,
) -> tuple[list[Task], list[str], str]:
    """`_prep_before_as_written`'s tasks, rejections and source."""
    try:
        package = json.loads(package_text)
    except ValueError as err:
        return [], [f"prep-package.json is not JSON: {err}"], ""
    if not isinstance(package, dict):
        return [], ["prep-package.json is not a JSON object"], ""
    errors = prep_package_errors(package, tasks_text, state.origin, now, ("loopworks",))
    if errors or tasks_text is None:
        return [], errors, ""
    read = prep_tasks(tasks_text)
    if read.skipped:
        return [], read.skipped, ""
    try:
        tasks = validated_graph(read.tasks, info.files)
    except GraphError as err:
        return [], err.errors, ""
    source = package.get("source")
    tool = source.get("tool") if isinstance(source, dict) else None
    digest = package_sha256(package_text, tasks_text)
    return tasks, [], f"prep package ({tool or 'unknown tool'}, sha256 {digest})"
