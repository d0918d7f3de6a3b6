"""LoopWorkflow: one run of the reflex loop, from a task to a pushed branch.

The workflow only orchestrates: every step is an activity run through the step adapter
(`workflows.steps`), every decision is a plain function in `workflows.decisions`, steering
lives in `workflows.steering`, and the run's memory is one model (`RunMemory`) carried
as-is through continue-as-new. The artifact and the event log live in git; the workflow
carries commit SHAs and a bounded tail of events.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.repository import RepositoryActivities
    from loopworks.schemas import events as ev
    from loopworks.schemas.admission import Spent
    from loopworks.schemas.evaluation import Evaluation
    from loopworks.schemas.events import Event, EventName
    from loopworks.schemas.loop import LoopInput, LoopResult, RunMemory
    from loopworks.schemas.notify import NotifyEvent
    from loopworks.schemas.payloads import NotifyFailedPayload
    from loopworks.schemas.roles import CriticVerdict
    from loopworks.schemas.rules import Phase
    from loopworks.schemas.run import Approval, Mode, RunState, Step, StopReason
    from loopworks.schemas.steps import WorkspaceInfo, WorkspaceRequest
    from loopworks.workflows import decisions, proof
    from loopworks.workflows.graph import inputs as graph_inputs
    from loopworks.workflows.loop_steps import LoopSteps
    from loopworks.workflows.notifications import NOTIFY_FAILED_SIGNAL
    from loopworks.workflows.notifying import WAITING, Notifier, run_body, run_event
    from loopworks.workflows.policies import GIT, history_is_long
    from loopworks.workflows.record import RunRecord
    from loopworks.workflows.slot import give_back
    from loopworks.workflows.steering import Finished, Steering, Stopped
    from loopworks.workflows.steps import StepRunner, describe


# The workflow's type: visibility queries name it (api/listing.py, api/quotas.py).
LOOP_WORKFLOW = "LoopWorkflow"


@workflow.defn(name=LOOP_WORKFLOW)
class LoopWorkflow:
    @workflow.init
    def __init__(self, params: LoopInput) -> None:
        self._params = params
        self._request = params.request
        memory = params.memory or params.first_memory()
        self._record = RunRecord(memory)
        self._steering = Steering(self._record)
        self._steps = StepRunner(self._record, self._steering, params.request.budget)
        self._do = LoopSteps(
            self._record,
            self._steering,
            self._steps,
            params.request,
            graph_task=params.graph_id is not None,
        )
        self._notifier = Notifier(params.notify, self._notify_failed)
        self._record.watch = self._status_changed

    @property
    def _memory(self) -> RunMemory:
        return self._record.memory

    @property
    def _state(self) -> RunState:
        return self._record.state

    # --- messages ------------------------------------------------------------------------

    @workflow.query
    def status(self) -> RunState:
        return self._state

    @workflow.query
    def events(self, after: int = 0) -> list[Event]:
        """Events after `after` that the workflow still holds; older ones are in git."""
        return self._record.events(after)

    @workflow.query
    def carried_calls(self) -> dict[str, str]:
        """The records of single-shot calls the run's next commit will hold, by name: its
        trajectory's newest calls, not yet on its origin."""
        return self._memory.carried_calls

    @workflow.signal
    def stop(self, reason: str | None = None) -> None:
        """Cancel in-flight work; the run still reflects and pushes what it has."""
        self._steering.stop(reason)

    @workflow.signal(name=NOTIFY_FAILED_SIGNAL)
    def notify_failed(self, failed: NotifyFailedPayload) -> None:
        """A notification of this run's its delivery workflow gave up: an event of the run
        (docs/notifications.md#retries)."""
        self._notify_failed(failed)

    @workflow.update
    async def clear_block(self, note: str) -> RunState:
        return self._steering.clear_block(note)

    @clear_block.validator
    def _clear_block_applies(self, note: str) -> None:
        self._steering.check_clear_block()

    @workflow.update
    async def pause(self) -> RunState:
        return self._steering.pause()

    @pause.validator
    def _pause_applies(self) -> None:
        self._steering.check_pause()

    @workflow.update
    async def resume(self) -> RunState:
        return self._steering.resume()

    @resume.validator
    def _resume_applies(self) -> None:
        self._steering.check_resume()

    @workflow.update
    async def approve(self, approval: Approval) -> RunState:
        return self._steering.approve(approval)

    @approve.validator
    def _approve_applies(self, approval: Approval) -> None:
        self._steering.check_approve()

    # --- the run -------------------------------------------------------------------------

    @workflow.run
    async def run(self, params: LoopInput) -> LoopResult:
        record, memory = self._record, self._memory
        record.sync_search_attributes()
        try:
            if memory.last_seq == 0:  # nothing happened yet: not a continued run
                await self._start()
            # A new run goes on from iteration 1; a continued one where it left off.
            await self._iterate(memory.next_iteration)
        except Finished as finished:
            record.conclude(finished.reason, finished.message, memory.last_evaluation)
        except Stopped:
            record.conclude(StopReason.USER_STOP, self._steering.stop_note, memory.last_evaluation)
        except asyncio.CancelledError:
            # Cancelled from outside (its task graph closed, `temporal workflow cancel`):
            # a stop like any other, so the run still reflects and pushes what it has.
            self._steering.stop_requested = True
            note = "cancelled: " + (self._steering.stop_note or "the workflow was cancelled")
            record.conclude(StopReason.USER_STOP, note, memory.last_evaluation)
        except ActivityError as err:
            record.fail(describe(err))

        # Every run that got a workspace reflects and pushes what it has, stopped or not.
        self._steering.finalizing = True
        # Read before the hold ends: a run stopped while blocked learns no new skills.
        no_skills = decisions.no_skill_loop(self._state.stop_reason, self._state.blocked)
        self._steering.end_holds()
        if memory.commit:
            reflected = await self._do.reflect()
            await self._do.learning.learn(reflected, no_skills)
            await self._do.close(reflected)
        # Its work done, it gives back the caps' slots that admitted it and says what it
        # spent, before its final status: a run that reads as finished holds no slot.
        if self._params.slots and workflow.patched("admission-slots"):
            usage = self._state.usage
            spent = Spent(tokens=usage.total_tokens, cost_usd=usage.cost_usd)
            await give_back(self._params.slots, self._state.run_id, spent)
        record.set_status(record.final_status())
        if ended := run_event(self._state):
            self._notify(ended)
        record.set_step(Step.DONE)
        await workflow.wait_condition(workflow.all_handlers_finished)
        # The run has finished: only its notifications' hand-overs are waited for.
        await self._notifier.drain()
        return LoopResult(state=self._state, events=memory.last_seq, log=memory.tail)

    async def _start(self) -> None:
        """Prepare the workspace, hydrate and review, wait for approval if asked."""
        task = self._request.task
        self._record.emit(EventName.RUN_STARTED, ev.RunStartedPayload(task=task[:500]))
        workspace = await self._steps.activity(
            RepositoryActivities.prepare_workspace,
            WorkspaceRequest(
                run_id=self._state.run_id,
                repo=self._request.repo,
                base_branch=self._request.base_branch,
                read_prep=self._request.read_prep_package and not self._request.prep_package,
                find_proof=self._request.verify is None,
            ),
            GIT,
            "prepare workspace",
            # Local: in the run's first workflow task, on the worker holding it, with no
            # task queue round trip (workflows/policies.py, `start`).
            local=True,
        )
        self._state.origin = workspace.origin
        self._state.model_source = workspace.model_source
        self._memory.commit = self._memory.base_commit = workspace.base_commit
        self._memory.playbook = workspace.playbook
        if not workspace.sandboxed:
            note = "this run's commands run unsandboxed (LOOPS_SANDBOX=off on its worker)"
            self._record.emit(EventName.COMMANDS_UNSANDBOXED, ev.NotePayload(note=note))
        self._take_prep_package(workspace)
        # A run knows how its work is proven before any model speaks, and QA's verdict is
        # checked against its evidence (docs/loop.md#the-runs-proof); a run recorded before
        # runs had a proof replays without either.
        if workflow.patched("run-proof"):
            request = self._request
            self._state.proof = proof.planned(
                request.verify, workspace.proof, request.allow_unverified
            )
            self._state.rules = proof.with_proof(self._state.rules, self._state.proof)
        await self._hydrate_and_review()
        if self._request.mode == Mode.INTERACTIVE:
            self._record.set_step(Step.APPROVE)
            await self._steering.await_approval()

    def _take_prep_package(self, workspace: WorkspaceInfo) -> None:
        """The prep package sent with the request, else the repository's, gives the run its
        plan when it passes its checks (docs/graphs.md#a-single-run-from-a-prep-package);
        the run goes on with the request it makes, through continue-as-new too."""
        request, state = self._request, self._state
        upload = request.prep_package
        package = upload.package if upload else workspace.prep_package
        if package is None:
            return
        tasks = upload.tasks if upload else workspace.prep_tasks
        now = workflow.now()
        prepared = graph_inputs.from_prep_package(package, tasks, workspace.origin, None, now)
        state.prep, state.prep_skipped = prepared.source, prepared.skipped
        state.prep_rejected = prepared.errors
        if not prepared.tasks:
            return
        self._request, self._memory.given_plan = graph_inputs.run_from_prep(request, prepared)
        state.max_iterations = self._request.max_iterations or state.max_iterations
        self._do = LoopSteps(self._record, self._steering, self._steps, self._request)

    async def _hydrate_and_review(self) -> None:
        """Steps 1-2: hydrate; the critic sends the plan back (bounded) or halts the run."""
        feedback: list[str] = []
        for revision in range(decisions.MAX_PLAN_REVISIONS + 1):
            hydration = await self._do.hydrate(feedback, revision + 1)
            review = await self._do.review(hydration, revision + 1)
            if review.verdict == CriticVerdict.PROCEED:
                return
            if review.verdict == CriticVerdict.HALT:
                raise Finished(StopReason.CRITIC_HALT, review.feedback or "; ".join(review.issues))
            feedback = [*review.issues, review.feedback]
        raise Finished(
            StopReason.CRITIC_HALT,
            f"the critic still asked for revision after {decisions.MAX_PLAN_REVISIONS} revisions",
        )

    async def _iterate(self, iteration: int) -> None:
        """Steps 4-9 (docs/loop.md#steps), iteration after iteration, until a stop condition
        ends the loop (docs/loop.md#what-follows-an-evaluation)."""
        memory, first = self._memory, iteration
        while True:
            limit = self._params.continue_as_new_after_events
            if iteration > first and self._notifier.idle and history_is_long(limit):
                await self._continue_as_new(iteration)
            self._state.iteration = iteration
            memory.iteration_start = memory.commit
            self._record.sync_search_attributes()
            plan = await self._do.plan()
            evaluation = await self._do.produce_prepare_evaluate()
            await self._do.maybe_audit(evaluation, plan.focus)

            decision = self._decide(evaluation)
            if decision.next == decisions.Next.SWITCH_TO_B:
                self._switch_to_b()
                checking = self._do.checking
                evaluation = await checking.evaluate(await checking.prepare())
                memory.previous_evaluation = None
                decision = self._decide(evaluation)

            if decision.next == decisions.Next.STOP:
                assert decision.reason is not None
                if not decisions.is_success(decision.reason):
                    why = decisions.stop_message(
                        decision.reason, evaluation, self._state.max_iterations
                    )
                    raise Finished(decision.reason, why)
                # A pass goes to QA; its issues come back as the next refine's critique.
                critique = await self._do.verify(evaluation, decision.reason)
            else:
                critique = await self._do.critique(evaluation)

            await self._do.refine(critique)
            memory.previous_evaluation = evaluation
            iteration += 1
            self._record.emit(
                EventName.ITERATION_ADVANCED, ev.IterationPayload(iteration=iteration)
            )

    async def _continue_as_new(self, iteration: int) -> None:
        """Start a fresh history at this iteration boundary, carrying the run's memory.

        Nothing is in flight here; the id stays the run id, so clients, queries and the
        event stream carry on against the new execution.
        """
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._steering.stop_requested:
            raise Stopped()
        memory = self._memory
        memory.generation += 1
        memory.next_iteration = iteration
        memory.approved = True
        self._record.emit(
            EventName.CONTINUED_AS_NEW, ev.ContinuedPayload(generation=memory.generation)
        )
        params = self._params.model_copy(update={"memory": memory, "request": self._request})
        workflow.continue_as_new(params)

    # --- notifications (docs/notifications.md) -----------------------------------------

    def _status_changed(self) -> None:
        event = run_event(self._state)
        if event is not None and event in WAITING:
            self._notify(event)

    def _notify(self, event: NotifyEvent) -> None:
        if self._notifier.wants(event):
            self._memory.notified += 1
            now = workflow.now().isoformat()
            body = run_body(self._state, event, now, self._params.graph_id)
            self._notifier.send(body, self._memory.notified)

    def _notify_failed(self, failed: NotifyFailedPayload) -> None:
        self._record.emit(EventName.NOTIFY_FAILED, failed, status="error")

    def _decide(self, evaluation: Evaluation) -> decisions.Decision:
        state = self._state
        decision = decisions.decide(
            evaluation,
            self._memory.previous_evaluation,
            state.iteration,
            state.max_iterations,
            state.stagnation_count,
            proof_pending=proof.pending(state.rules, state.phase),
        )
        state.stagnation_count = decision.stagnation_count
        return decision

    def _switch_to_b(self) -> None:
        self._state.phase = Phase.B
        self._record.sync_search_attributes()
        self._record.emit(
            EventName.PHASE_SWITCHED, ev.PhaseSwitchedPayload(from_phase="A", to_phase="B")
        )
