"""LoopWorkflow: one run of the reflex loop, from a task to a pushed branch.

The workflow only orchestrates: every step is an activity, every decision is a plain
function in `loopworks.workflows.decisions`, and the artifact lives in git (the workflow carries
commit SHAs, never file contents).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.audit import AuditActivities
    from loopworks.activities.critique import CritiqueActivities
    from loopworks.activities.evaluation import EvaluationActivities
    from loopworks.activities.hydration import HydrationActivities
    from loopworks.activities.preparation import PreparationActivities
    from loopworks.activities.production import ProductionActivities
    from loopworks.activities.qa import QAActivities
    from loopworks.activities.reflection import ReflectionActivities
    from loopworks.activities.repository import RepositoryActivities
    from loopworks.schemas.evaluation import CheckResult, Evaluation
    from loopworks.schemas.events import Event, EventName
    from loopworks.schemas.loop import LoopCarry, LoopInput, LoopResult
    from loopworks.schemas.roles import (
        AuditVerdict,
        CriticVerdict,
        Critique,
        Hydration,
        Issue,
        IterationPlan,
        QAVerdict,
        Role,
    )
    from loopworks.schemas.rules import CheckGroup, Phase, PreparedCheck, group_of
    from loopworks.schemas.run import (
        Approval,
        BlockInfo,
        Mode,
        RunState,
        RunStatus,
        Step,
        StopReason,
        budget_exceeded,
    )
    from loopworks.schemas.steps import (
        INVALID_OUTPUT,
        ArtifactOutput,
        AuditInput,
        CloseInput,
        CritiqueInput,
        EvaluateGroupInput,
        GitLocation,
        HydrateInput,
        HydrateOutput,
        PlanInput,
        PrepareInput,
        ProduceInput,
        QAInput,
        RefineInput,
        ReflectInput,
        ReviewInput,
        ReviewOutput,
        WorkspaceRequest,
    )
    from loopworks.workflows import decisions
    from loopworks.workflows.policies import (
        AGENT_STEP,
        CHECK_GROUP,
        GIT,
        MODEL_CALL,
        StepPolicy,
    )
    from loopworks.workflows.record import RunRecord

T = TypeVar("T")


class _Stopped(Exception):
    """A user asked the run to stop; in-flight work has been cancelled."""


class _Finished(Exception):
    """The loop reached a stop condition."""

    def __init__(self, reason: StopReason, message: str = "") -> None:
        super().__init__(message or reason.value)
        self.reason = reason
        self.message = message


class _InvalidOutput(Exception):
    pass


@workflow.defn(name="LoopWorkflow")
class LoopWorkflow:
    @workflow.init
    def __init__(self, params: LoopInput) -> None:
        request = params.request
        self._request = request
        self._record = RunRecord(
            RunState(
                run_id=params.run_id,
                alias=params.alias,
                task=request.task,
                template=request.template,
                max_iterations=request.max_iterations,
                thresholds=request.thresholds,
                rules=request.rules,
                branch=f"loops/{params.run_id}",
                origin=request.repo or "",
                created_at=params.created_at,
                updated_at=params.created_at,
            )
        )
        self._calls: Counter[Role] = Counter()
        self._inflight: set[workflow.ActivityHandle[Any]] = set()
        self._stop_requested = False
        self._stop_note = ""
        self._paused = False
        self._approved = False
        self._finalizing = False
        self._last_artifact: ArtifactOutput | None = None
        self._operator_note: str | None = None
        self._commit = ""
        self._intent = ""
        self._critic_verdict: str | None = None
        self._guidance: list[str] = []
        self._last_evaluation: Evaluation | None = None
        self._last_plan: IterationPlan | None = None
        self._params = params
        self._generation = 1
        if params.carry is not None:
            self._restore(params.carry)

    @property
    def _state(self) -> RunState:
        return self._record.state

    def _restore(self, carry: LoopCarry) -> None:
        self._record = RunRecord(carry.state, carry.events)
        self._calls = Counter(carry.calls)
        self._commit = carry.commit
        self._intent = carry.intent
        self._critic_verdict = carry.critic_verdict
        self._guidance = carry.guidance
        self._last_evaluation = carry.last_evaluation
        self._last_plan = carry.last_plan
        self._last_artifact = carry.last_artifact
        self._paused = carry.paused
        self._operator_note = carry.operator_note
        self._generation = carry.generation
        self._approved = True

    # --- messages ------------------------------------------------------------------------

    @workflow.query
    def status(self) -> RunState:
        return self._state

    @workflow.query
    def events(self, after: int = 0) -> list[Event]:
        return self._record.events[after:]

    @workflow.signal
    def stop(self, reason: str | None = None) -> None:
        """Cancel in-flight work; the run still reflects and pushes what it has."""
        if self._stop_requested or self._finalizing or self._state.status.is_terminal:
            # Reflecting and pushing are how a stop ends; they are never cancelled.
            return
        self._stop_requested = True
        self._stop_note = reason or ""
        for handle in list(self._inflight):
            handle.cancel()

    @workflow.update
    async def clear_block(self, note: str) -> RunState:
        self._state.blocked = False
        self._state.block = self._state.block.model_copy(
            update={"blocked": False, "cleared_note": note}
        )
        self._operator_note = note
        self._record.set_status(RunStatus.PAUSED if self._paused else RunStatus.RUNNING)
        self._record.emit(EventName.BLOCK_CLEARED, {"note": note})
        return self._state

    @clear_block.validator
    def _clear_block_applies(self, note: str) -> None:
        if not self._state.blocked:
            raise ValueError(f"run is not blocked (status {self._state.status.value})")

    @workflow.update
    async def pause(self) -> RunState:
        """Seed 002's pause: the current step finishes, then the run waits."""
        self._paused = True
        self._record.emit(EventName.PAUSED, {})
        return self._state

    @pause.validator
    def _pause_applies(self) -> None:
        if self._paused or self._stop_requested or self._state.status.is_terminal:
            raise ValueError(f"run cannot be paused (status {self._state.status.value})")

    @workflow.update
    async def resume(self) -> RunState:
        self._paused = False
        if self._state.status == RunStatus.PAUSED:
            self._record.set_status(RunStatus.RUNNING)
        self._record.emit(EventName.RESUMED, {})
        return self._state

    @resume.validator
    def _resume_applies(self) -> None:
        if not self._paused:
            raise ValueError(f"run is not paused (status {self._state.status.value})")

    @workflow.update
    async def approve(self, approval: Approval) -> RunState:
        """Interactive mode: confirm criteria and max iterations, possibly edited."""
        edits: dict[str, Any] = {}
        if approval.rules is not None:
            self._state.rules = approval.rules
            edits["rules"] = [rule.id for rule in approval.rules]
        if approval.thresholds is not None:
            self._state.thresholds = approval.thresholds
            edits["thresholds"] = approval.thresholds.model_dump()
        if approval.max_iterations is not None:
            self._state.max_iterations = approval.max_iterations
            edits["max_iterations"] = approval.max_iterations
        if approval.note:
            self._operator_note = approval.note
        self._approved = True
        self._record.emit(EventName.APPROVED, {"edits": edits, "note": approval.note})
        return self._state

    @approve.validator
    def _approve_applies(self, approval: Approval) -> None:
        if self._state.status != RunStatus.AWAITING_APPROVAL:
            raise ValueError(f"run is not awaiting approval (status {self._state.status.value})")

    # --- the run -------------------------------------------------------------------------

    @workflow.run
    async def run(self, params: LoopInput) -> LoopResult:
        self._record.sync_search_attributes()
        try:
            if params.carry is None:
                await self._start()
            else:
                # A continued run picks up at the iteration boundary it left.
                await self._iterate(params.carry.next_iteration, params.carry.previous_evaluation)
        except _Finished as finished:
            self._record.conclude(finished.reason, finished.message, self._last_evaluation)
        except _Stopped:
            self._record.conclude(StopReason.USER_STOP, self._stop_note, self._last_evaluation)
        except ActivityError as err:
            self._record.fail(f"{_describe(err)}")

        # Every run that got a workspace reflects and pushes what it has, stopped or not.
        self._finalizing = True
        if self._commit:
            await self._reflect()
            await self._close()
        self._record.set_status(self._record.final_status())
        self._record.set_step(Step.DONE)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return LoopResult(
            state=self._state, events=len(self._record.events), log=self._record.events
        )

    async def _start(self) -> None:
        """Prepare the workspace, hydrate and review, wait for approval if asked, iterate."""
        self._record.emit(EventName.RUN_STARTED, {"task": self._request.task[:500]})
        workspace = await self._activity(
            RepositoryActivities.prepare_workspace,
            WorkspaceRequest(
                run_id=self._state.run_id,
                repo=self._request.repo,
                base_branch=self._request.base_branch,
            ),
            GIT,
            "prepare workspace",
        )
        self._state.origin = workspace.origin
        self._commit = workspace.base_commit
        await self._hydrate_and_review()
        if self._request.mode == Mode.INTERACTIVE:
            await self._await_approval()
        await self._iterate(1, None)

    async def _hydrate_and_review(self) -> None:
        """Steps 1-2: hydrate; the critic sends the plan back (bounded) or halts the run."""
        feedback: list[str] = []
        revisions = 0
        while True:
            self._record.set_step(Step.HYDRATE)
            hydrated = await self._phase(
                Step.HYDRATE, functools.partial(self._hydrate_once, feedback)
            )
            hydration = hydrated.hydration
            self._record.add_output(hydrated)
            self._state.template = hydration.template
            self._state.rules = hydration.rules
            self._state.acceptance_criteria = hydration.acceptance_criteria
            self._intent = hydration.intent
            self._record.emit(
                EventName.HYDRATION_DONE,
                {
                    "template": hydration.template,
                    "plan": hydration.plan,
                    "acceptance_criteria": hydration.acceptance_criteria,
                    "rules": [rule.id for rule in hydration.rules],
                    "round": revisions + 1,
                },
            )

            self._record.set_step(Step.CRITIC)
            reviewed = await self._phase(
                Step.CRITIC, functools.partial(self._review_once, hydration)
            )
            review = reviewed.review
            self._record.add_output(reviewed)
            self._critic_verdict = review.verdict.value
            self._guidance.append(f"critic: {review.verdict.value} {review.feedback}".strip())
            self._record.emit(
                EventName.CRITIC_VERDICT,
                {"verdict": review.verdict.value, "issues": review.issues, "round": revisions + 1},
            )
            if review.verdict == CriticVerdict.PROCEED:
                return
            if review.verdict == CriticVerdict.HALT:
                raise _Finished(StopReason.CRITIC_HALT, review.feedback or "; ".join(review.issues))
            if revisions >= decisions.MAX_PLAN_REVISIONS:
                raise _Finished(
                    StopReason.CRITIC_HALT,
                    f"the critic still asked for revision after {revisions} revisions",
                )
            revisions += 1
            feedback = [*review.issues, review.feedback]

    def _hydrate_once(self, feedback: list[str]) -> Awaitable[HydrateOutput]:
        return self._activity(
            HydrationActivities.hydrate,
            HydrateInput(
                **self._model_step(Role.HYDRATOR),
                task=self._request.task,
                template=self._request.template,
                user_rules=self._request.rules,
                feedback=feedback,
            ),
            MODEL_CALL,
            "hydrate the task",
        )

    def _review_once(self, hydration: Hydration) -> Awaitable[ReviewOutput]:
        return self._activity(
            HydrationActivities.review_plan,
            ReviewInput(
                **self._model_step(Role.CRITIC), task=self._request.task, hydration=hydration
            ),
            MODEL_CALL,
            "critic reviews the plan",
        )

    async def _await_approval(self) -> None:
        """Seed 001's explicit confirmation: nothing iterates until a person approves."""
        self._record.set_step(Step.APPROVE)
        self._record.set_status(RunStatus.AWAITING_APPROVAL)
        await workflow.wait_condition(lambda: self._approved or self._stop_requested)
        if self._stop_requested:
            raise _Stopped()
        self._record.set_status(RunStatus.RUNNING)

    async def _iterate(self, iteration: int, previous: Evaluation | None) -> None:
        """Steps 4-9, per seed 001 Step 4, until a stop condition ends the loop."""
        state = self._state
        first = iteration
        while True:
            if iteration > first and self._history_is_long():
                await self._continue_as_new(iteration, previous)
            state.iteration = iteration
            self._record.sync_search_attributes()
            plan_focus = await self._plan()
            evaluation = await self._produce_prepare_evaluate()
            await self._maybe_audit(evaluation, plan_focus)

            decision = self._decide(evaluation, previous)
            if decision.next == decisions.Next.SWITCH_TO_B:
                self._switch_to_b()
                checks = await self._prepare()
                evaluation = await self._evaluate(checks)
                previous = None
                decision = self._decide(evaluation, previous)

            if decision.next == decisions.Next.STOP:
                assert decision.reason is not None
                if not decisions.is_success(decision.reason):
                    raise _Finished(decision.reason)
                # A pass goes to QA; its issues come back as the next refine's critique.
                critique = await self._verify(evaluation, decision.reason)
            else:
                critique = await self._critique(evaluation)

            await self._refine(critique)
            previous = evaluation
            iteration += 1
            self._record.emit(EventName.ITERATION_ADVANCED, {"iteration": iteration})

    def _history_is_long(self) -> bool:
        info = workflow.info()
        limit = self._params.continue_as_new_after_events
        if limit is not None:
            return info.get_current_history_length() >= limit
        return info.is_continue_as_new_suggested()

    async def _continue_as_new(self, iteration: int, previous: Evaluation | None) -> None:
        """Start a fresh history at this iteration boundary, carrying the run's memory.

        Nothing is in flight here; the id stays the run id, so clients, queries and the
        event stream carry on against the new execution.
        """
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._stop_requested:
            raise _Stopped()
        self._record.emit(EventName.CONTINUED_AS_NEW, {"generation": self._generation + 1})
        carry = LoopCarry(
            state=self._state,
            events=self._record.events,
            calls=dict(self._calls),
            commit=self._commit,
            intent=self._intent,
            critic_verdict=self._critic_verdict,
            guidance=self._guidance,
            last_evaluation=self._last_evaluation,
            previous_evaluation=previous,
            last_plan=self._last_plan,
            last_artifact=self._last_artifact,
            next_iteration=iteration,
            paused=self._paused,
            operator_note=self._operator_note,
            generation=self._generation + 1,
        )
        workflow.continue_as_new(self._params.model_copy(update={"carry": carry}))

    async def _plan(self) -> str:
        self._record.set_step(Step.PLAN)
        planned = await self._phase(
            Step.PLAN,
            lambda: self._activity(
                ProductionActivities.plan_iteration,
                PlanInput(
                    **self._model_step(Role.PLANNER),
                    task=self._request.task,
                    intent=self._intent,
                    acceptance_criteria=self._state.acceptance_criteria,
                    last_evaluation=self._last_evaluation,
                ),
                MODEL_CALL,
                f"iteration {self._state.iteration} · plan",
            ),
        )
        self._record.add_output(planned)
        self._last_plan = planned.plan
        self._record.emit(EventName.PLAN_CREATED, planned.plan.model_dump(mode="json"))
        return planned.plan.focus

    async def _produce_prepare_evaluate(self) -> Evaluation:
        """Step 5 runs PRODUCE and PREPARE side by side; both depend only on the plan."""
        self._record.set_step(Step.PRODUCE_PREPARE)
        produce = self._phase(Step.PRODUCE_PREPARE, self._produce_once)
        prepare = self._prepare(set_step=False)
        produced, prepared = await _gather_all(produce, prepare)
        self._accept_artifact(produced, EventName.ARTIFACT_CREATED)
        return await self._evaluate(prepared)

    def _produce_once(self) -> Awaitable[ArtifactOutput]:
        assert self._last_plan is not None, "PRODUCE runs after PLAN"
        rules = decisions.active_rules(self._state.rules, self._state.phase)
        return self._activity(
            ProductionActivities.produce_artifact,
            ProduceInput(
                **self._model_step(Role.PRODUCER),
                task=self._request.task,
                intent=self._intent,
                acceptance_criteria=self._state.acceptance_criteria,
                rules=rules,
                plan=self._last_plan,
                workspace=self._workspace(),
                committed_at=workflow.now(),
            ),
            AGENT_STEP,
            f"iteration {self._state.iteration} · produce",
        )

    async def _prepare(self, set_step: bool = True) -> list[PreparedCheck]:
        if set_step:
            self._record.set_step(Step.PREPARE)
        rules = decisions.active_rules(self._state.rules, self._state.phase)
        prepared = await self._phase(
            Step.PREPARE,
            lambda: self._activity(
                PreparationActivities.prepare_checks,
                PrepareInput(
                    **self._model_step(Role.PREPARER), task=self._request.task, rules=rules
                ),
                MODEL_CALL,
                f"iteration {self._state.iteration} · prepare · {len(rules)} rules",
            ),
        )
        self._record.add_output(prepared)
        self._record.emit(
            EventName.CHECKS_PREPARED,
            {
                "checks": len(prepared.checks),
                "rules": [rule.id for rule in rules],
                "started_at": prepared.timing.started_at,
                "finished_at": prepared.timing.finished_at,
            },
        )
        return prepared.checks

    async def _evaluate(self, checks: list[PreparedCheck]) -> Evaluation:
        """Step 6: one activity per independent check group, in parallel, then score."""
        self._record.set_step(Step.EVALUATE)
        groups: dict[CheckGroup, list[PreparedCheck]] = {}
        for check in checks:
            groups.setdefault(group_of(check.check), []).append(check)

        def run_group(group: CheckGroup, members: list[PreparedCheck]) -> Awaitable[Any]:
            return self._phase(
                Step.EVALUATE,
                lambda: self._activity(
                    EvaluationActivities.evaluate_group,
                    EvaluateGroupInput(
                        **self._model_step(Role.EVALUATOR),
                        task=self._request.task,
                        group=group,
                        checks=members,
                        workspace=self._workspace(),
                    ),
                    CHECK_GROUP,
                    f"iteration {self._state.iteration} · evaluate {group.value}"
                    f" · {len(members)} checks",
                ),
            )

        outputs = await _gather_all(*(run_group(g, m) for g, m in sorted(groups.items())))
        results: list[CheckResult] = []
        for output in outputs:
            self._record.add_output(output)
            results.extend(output.results)
        evaluation = decisions.score_results(
            self._state.rules, results, self._state.phase, self._state.thresholds
        )
        self._last_evaluation = evaluation
        self._state.last_score = evaluation.score
        self._record.sync_search_attributes()
        self._record.show_iteration(evaluation, self._last_plan, self._last_artifact)
        self._record.emit(
            EventName.EVALUATION_DONE,
            {
                "score": evaluation.score,
                "passed": evaluation.passed,
                "threshold": evaluation.threshold,
                "failed": evaluation.failed_blockers,
                "warnings": evaluation.failed_warnings,
                "groups": {
                    o.group.value: {
                        "checks": len(o.results),
                        "started_at": o.timing.started_at,
                        "finished_at": o.timing.finished_at,
                    }
                    for o in outputs
                },
            },
        )
        return evaluation

    async def _maybe_audit(self, evaluation: Evaluation, plan_focus: str) -> None:
        """Step 7: the custodiet audits by chance; BLOCK parks the run until cleared."""
        draw = workflow.random().random()
        if not decisions.should_audit(draw, self._request.audit_probability):
            return
        self._record.set_step(Step.AUDIT)
        audited = await self._phase(
            Step.AUDIT,
            lambda: self._activity(
                AuditActivities.audit_run,
                AuditInput(
                    **self._model_step(Role.CUSTODIET),
                    task=self._request.task,
                    intent=self._intent,
                    plan_focus=plan_focus,
                    evaluation=evaluation,
                ),
                MODEL_CALL,
                f"iteration {self._state.iteration} · custodiet audit",
            ),
        )
        audit = audited.audit
        self._record.add_output(audited)
        self._guidance.append(f"custodiet: {audit.verdict.value} {audit.reason}".strip())
        self._record.emit(
            EventName.AUDIT_VERDICT,
            {
                "verdict": audit.verdict.value,
                "reason": audit.reason,
                "violations": audit.violations,
            },
        )
        if audit.verdict == AuditVerdict.BLOCK:
            self._state.blocked = True
            self._state.block = BlockInfo(
                blocked=True, reason=audit.reason, count=self._state.block.count + 1
            )
            self._record.set_status(RunStatus.BLOCKED)
            await self._gate()

    def _decide(self, evaluation: Evaluation, previous: Evaluation | None) -> decisions.Decision:
        decision = decisions.decide(
            evaluation,
            previous,
            self._state.iteration,
            self._state.max_iterations,
            self._state.stagnation_count,
        )
        self._state.stagnation_count = decision.stagnation_count
        return decision

    def _switch_to_b(self) -> None:
        self._state.phase = Phase.B
        self._record.sync_search_attributes()
        self._record.emit(EventName.PHASE_SWITCHED, {"from": "A", "to": "B"})

    async def _verify(self, evaluation: Evaluation, reason: StopReason) -> Critique:
        """Step 9: QA. VERIFIED ends the loop; ISSUES become the next refine's critique."""
        self._record.set_step(Step.QA)
        verified = await self._phase(
            Step.QA,
            lambda: self._activity(
                QAActivities.verify_result,
                QAInput(
                    **self._model_step(Role.QA_VERIFIER),
                    task=self._request.task,
                    intent=self._intent,
                    acceptance_criteria=self._state.acceptance_criteria,
                    evaluation=evaluation,
                    workspace=self._workspace(),
                ),
                MODEL_CALL,
                f"iteration {self._state.iteration} · QA verification",
            ),
        )
        report = verified.report
        self._record.add_output(verified)
        self._record.emit(
            EventName.QA_VERDICT,
            {
                "verdict": report.verdict.value,
                "issues": [i.model_dump(mode="json") for i in report.issues],
                "summary": report.summary,
            },
        )
        if report.verdict == QAVerdict.VERIFIED:
            raise _Finished(reason)
        if self._state.iteration >= self._state.max_iterations:
            raise _Finished(StopReason.QA_REJECTED, report.summary)
        issues = report.issues or [
            Issue(rule_id="qa", problem=report.summary or "QA found issues", fix="address QA")
        ]
        return Critique(issues=issues)

    async def _critique(self, evaluation: Evaluation) -> Critique:
        self._record.set_step(Step.CRITIQUE)
        critiqued = await self._phase(
            Step.CRITIQUE,
            lambda: self._activity(
                CritiqueActivities.critique_artifact,
                CritiqueInput(
                    **self._model_step(Role.ARTIFACT_CRITIC),
                    task=self._request.task,
                    evaluation=evaluation,
                    rules=decisions.active_rules(self._state.rules, self._state.phase),
                    workspace=self._workspace(),
                ),
                MODEL_CALL,
                f"iteration {self._state.iteration} · critique",
            ),
        )
        self._record.add_output(critiqued)
        self._record.emit(
            EventName.CRITIQUE_DONE,
            {"issues": [i.model_dump(mode="json") for i in critiqued.critique.issues]},
        )
        self._record.show_iteration(
            evaluation, self._last_plan, self._last_artifact, critiqued.critique
        )
        return critiqued.critique

    async def _refine(self, critique: Critique) -> None:
        self._record.set_step(Step.REFINE)
        refined = await self._phase(
            Step.REFINE,
            lambda: self._activity(
                ProductionActivities.refine_artifact,
                RefineInput(
                    **self._model_step(Role.REFINER),
                    task=self._request.task,
                    critique=critique,
                    workspace=self._workspace(),
                    committed_at=workflow.now(),
                ),
                AGENT_STEP,
                f"iteration {self._state.iteration} · refine · {len(critique.issues)} issues",
            ),
        )
        self._accept_artifact(refined, EventName.REFINEMENT_DONE)

    async def _reflect(self) -> None:
        """Step 10 runs for every run that got a workspace, stopped ones included."""
        self._record.set_step(Step.REFLECT)
        try:
            reflected = await self._phase(
                Step.REFLECT,
                lambda: self._activity(
                    ReflectionActivities.reflect_on_run,
                    ReflectInput(
                        **self._model_step(Role.REFLECTOR),
                        state=self._state,
                        critic_verdict=self._critic_verdict,
                        subagents_invoked=[role.value for role in self._calls],
                        guidance=self._guidance,
                        workspace=self._workspace(),
                        committed_at=workflow.now(),
                    ),
                    MODEL_CALL,
                    "reflect and write insights",
                    gated=False,
                ),
            )
        except (_Finished, ActivityError) as err:
            # A failed reflection must not cost the run its push.
            self._record.emit(
                EventName.FAILED, {"step": "REFLECT", "error": str(err)}, status="error"
            )
            return
        self._record.add_output(reflected)
        self._commit = reflected.commit
        self._record.emit(
            EventName.REFLECTION_DONE,
            {
                "reflection": reflected.reflection.model_dump(mode="json"),
                "outcome": reflected.insights.outcome,
                "commit": reflected.commit,
            },
        )

    async def _close(self) -> None:
        """Step 11: push the run branch and verify that the remote has it."""
        self._record.set_step(Step.CLOSE)
        try:
            closed = await self._activity(
                RepositoryActivities.close_run,
                CloseInput(
                    run_id=self._state.run_id,
                    origin=self._state.origin,
                    branch=self._state.branch,
                    commit=self._commit,
                ),
                GIT,
                f"push {self._state.branch}",
                gated=False,
            )
        except ActivityError as err:
            self._record.fail(f"push failed: {_describe(err)}")
            return
        self._record.emit(EventName.PUSHED, closed.model_dump(mode="json"))

    # --- helpers -------------------------------------------------------------------------

    async def _activity(
        self,
        method: Callable[..., Awaitable[T]],
        arg: Any,
        policy: StepPolicy,
        summary: str,
        gated: bool = True,
    ) -> T:
        """Run one activity, unless the run is stopping; a stop cancels it mid-flight."""
        if gated:
            await self._gate()
        handle = workflow.start_activity_method(
            method,
            arg,
            start_to_close_timeout=policy.start_to_close,
            heartbeat_timeout=policy.heartbeat,
            retry_policy=policy.retry,
            # Wait for the activity to acknowledge: close then reuses its workspace.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
        )
        self._inflight.add(handle)
        try:
            return await handle
        except (ActivityError, asyncio.CancelledError) as err:
            if gated and self._stop_requested:
                raise _Stopped() from err
            cause = getattr(err, "cause", None)
            if isinstance(cause, ApplicationError) and cause.type == INVALID_OUTPUT:
                raise _InvalidOutput(cause.message) from err
            raise
        finally:
            self._inflight.discard(handle)

    async def _phase(self, step: Step, attempt: Callable[[], Awaitable[T]]) -> T:
        """Seed 001's error recovery: invalid output is retried once, then fatal. The retry
        happens inside the step, as a repair (the model is shown its answer's errors), so
        invalid output reaching the workflow has already failed twice."""
        try:
            return await attempt()
        except _InvalidOutput as err:
            self._record.emit(
                EventName.PHASE_ERROR, {"step": step.value, "error": str(err)}, status="error"
            )
            raise _Finished(
                StopReason.PHASE_ERROR, f"{step.value} produced invalid output twice"
            ) from err

    async def _gate(self) -> None:
        """Nothing runs while blocked or paused, or once over budget; a stop request wins
        over everything."""
        over = budget_exceeded(self._request.budget, self._state.usage)
        if over:
            raise _Finished(StopReason.BUDGET_EXHAUSTED, over)
        while not self._stop_requested and (self._state.blocked or self._paused):
            held = (self._state.blocked, self._paused)
            self._record.set_status(RunStatus.BLOCKED if self._state.blocked else RunStatus.PAUSED)
            await workflow.wait_condition(functools.partial(self._hold_changed, held))
        if self._stop_requested:
            raise _Stopped()
        if self._state.status in (RunStatus.BLOCKED, RunStatus.PAUSED):
            self._record.set_status(RunStatus.RUNNING)

    def _hold_changed(self, held: tuple[bool, bool]) -> bool:
        return self._stop_requested or (self._state.blocked, self._paused) != held

    def _model_step(self, role: Role) -> dict[str, Any]:
        self._calls[role] += 1
        note, self._operator_note = self._operator_note, None
        return {
            "run_id": self._state.run_id,
            "iteration": self._state.iteration,
            "phase": self._state.phase,
            "call_index": self._calls[role],
            "operator_note": note,
        }

    def _accept_artifact(self, output: ArtifactOutput, event: EventName) -> None:
        self._commit = output.commit
        self._last_artifact = output
        self._record.accept_artifact(output, event)

    def _workspace(self) -> GitLocation:
        return GitLocation(origin=self._state.origin, commit=self._commit)


async def _gather_all(*awaitables: Awaitable[Any]) -> list[Any]:
    """Like gather, but every branch finishes before an error propagates, so a stop never
    leaves a sibling activity running behind the workflow's back."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for priority in (_Stopped, _Finished, BaseException):
        for result in results:
            if isinstance(result, priority):
                raise result
    return list(results)


def _describe(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError | CancelledError):
        return cause.message
    return str(cause or err)
