"""The loop's steps, each one call: the inputs a step needs from the run's memory, the
step adapter that runs it, and what its answer changes in the memory.

`LoopWorkflow` owns the order (the state machine); this class owns what one step does.
Used from inside the workflow only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.audit import AuditActivities
    from loopworks.activities.critique import CritiqueActivities
    from loopworks.activities.hydration import HydrationActivities
    from loopworks.activities.production import ProductionActivities
    from loopworks.activities.qa import QAActivities
    from loopworks.activities.reflection import ReflectionActivities
    from loopworks.activities.repository import RepositoryActivities
    from loopworks.schemas import events as ev
    from loopworks.schemas.actions import BLOCKED_PATH
    from loopworks.schemas.detail import AuditView, CriticView, CritiqueView, PlanView, QAView
    from loopworks.schemas.evaluation import Evaluation
    from loopworks.schemas.events import EventName
    from loopworks.schemas.roles import (
        AuditVerdict,
        CriticReview,
        Critique,
        Hydration,
        Issue,
        IterationPlan,
        QAVerdict,
    )
    from loopworks.schemas.roles import Role as R
    from loopworks.schemas.run import RunRequest, RunState, Step, StopReason
    from loopworks.schemas.steps import (
        ArtifactOutput,
        AuditInput,
        CritiqueInput,
        HydrateInput,
        PlanInput,
        ProduceInput,
        QAInput,
        QAOutput,
        RecordAndCloseInput,
        RefineInput,
        ReflectInput,
        ReflectOutput,
        ReviewInput,
        RunLog,
        WorkAudit,
    )
    from loopworks.workflows import decisions, evidence, proof, step_events
    from loopworks.workflows.checking import Checking
    from loopworks.workflows.learning import Learning
    from loopworks.workflows.policies import AGENT_STEP, GIT, MODEL_CALL
    from loopworks.workflows.record import OnRecord, RunRecord
    from loopworks.workflows.steering import Finished, Steering
    from loopworks.workflows.steps import StepRunner, describe, gather_all


class LoopSteps(OnRecord):
    def __init__(
        self,
        record: RunRecord,
        steering: Steering,
        runner: StepRunner,
        request: RunRequest,
        *,
        graph_task: bool = False,
    ) -> None:
        self.record = record
        # A task graph's loop: PRODUCE's and REFINE's tools refuse the graph's records.
        self.graph_task = graph_task
        self.steering = steering
        self.runner = runner
        self.request = request
        self.learning = Learning(record, runner, request)
        self.checking = Checking(record, runner, request)
        # The notes that cleared blocks during the work, by iteration: the iteration's later
        # audits see the commands those blocks saw, so they are told what the person said.
        self.cleared: dict[int, list[str]] = {}

    async def hydrate(self, feedback: list[str], round_: int) -> Hydration:
        """Step 1: the task becomes a plan, rules and acceptance criteria."""
        request = self.request
        hydrated = await self.runner.model_step(
            Step.HYDRATE,
            R.HYDRATOR,
            HydrationActivities.hydrate,
            lambda f: HydrateInput(
                **f,
                task=request.task,
                template=request.template,
                user_rules=request.rules,
                user_criteria=request.acceptance_criteria,
                user_plan=self.memory.given_plan,
                feedback=feedback,
                playbook=self.learning.for_hydration(),
            ),
            MODEL_CALL,
            "hydrate the task",
            step_events.hydrated(round_, self.state.model_source),
        )
        self.learning.hydrated(hydrated)
        hydration = hydrated.hydration
        self.state.template = hydration.template
        # The run's proof stays the run's, whatever the hydrator drafted.
        self.state.rules = proof.with_proof(hydration.rules, self.state.proof)
        self.state.acceptance_criteria = hydration.acceptance_criteria
        self.memory.intent = hydration.intent
        return hydration

    async def review(self, hydration: Hydration, round_: int) -> CriticReview:
        """Step 2: the critic reviews the plan."""
        review = (
            await self.runner.model_step(
                Step.CRITIC,
                R.CRITIC,
                HydrationActivities.review_plan,
                lambda f: ReviewInput(**f, task=self.request.task, hydration=hydration),
                MODEL_CALL,
                "critic reviews the plan",
                step_events.reviewed(round_),
            )
        ).review
        self.memory.critic_verdict = review.verdict.value
        self.state.verdicts.critic = CriticView.of(review)
        self.memory.guidance.append(f"critic: {review.verdict.value} {review.feedback}".strip())
        return review

    async def plan(self) -> IterationPlan:
        memory, state = self.memory, self.state
        planned = await self.runner.model_step(
            Step.PLAN,
            R.PLANNER,
            ProductionActivities.plan_iteration,
            lambda f: PlanInput(
                **f,
                task=self.request.task,
                intent=memory.intent,
                acceptance_criteria=state.acceptance_criteria,
                last_evaluation=memory.last_evaluation,
            ),
            MODEL_CALL,
            f"iteration {state.iteration} · plan",
            step_events.planned,
        )
        memory.last_plan = planned.plan
        state.plan = PlanView.of(planned.plan, state.iteration)
        return planned.plan

    async def produce_prepare_evaluate(self) -> Evaluation:
        """Step 5 runs PRODUCE and PREPARE side by side; both depend only on the plan."""
        self.record.set_step(Step.PRODUCE_PREPARE)
        assert self.memory.last_plan is not None, "PRODUCE runs after PLAN"
        plan = self.memory.last_plan
        checking = self.checking
        # PREPARE, when it asks a model, runs beside PRODUCE: they halve what is left of
        # the budget (workflows/allowances.py).
        share = 0.5 if checking.asks_model() else 1.0
        produced, prepared = await gather_all(
            self._produce(plan, 1, "", share), checking.prepare(set_step=False)
        )
        produced = await self._through_blocks(
            produced, "produce", lambda attempt, told: self._produce(plan, attempt, told)
        )
        self.accept_artifact(produced, EventName.ARTIFACT_CREATED)
        return await checking.evaluate(prepared)

    async def _produce(
        self, plan: IterationPlan, attempt: int, told: str, share: float = 1.0
    ) -> ArtifactOutput:
        state, memory = self.state, self.memory
        return await self.runner.model_step(
            Step.PRODUCE_PREPARE,
            R.PRODUCER,
            ProductionActivities.produce_artifact,
            lambda f: ProduceInput(
                **f,
                task=self.request.task,
                intent=memory.intent,
                acceptance_criteria=state.acceptance_criteria,
                rules=decisions.active_rules(state.rules, state.phase),
                plan=plan,
                workspace=self.workspace(),
                committed_at=workflow.now(),
                log=self.log(),
                graph_task=self.graph_task,
                base_commit=self.memory.base_commit,
                work_audit=self._work_audit(plan.focus, None),
                attempt=attempt,
                blocked_attempt=told,
            ),
            AGENT_STEP,
            f"iteration {state.iteration} · produce"
            + (f" · attempt {attempt}" if attempt > 1 else ""),
            set_step=False,
            share=share,
        )

    def _work_audit(self, plan_focus: str, evaluation: Evaluation | None) -> WorkAudit:
        """What PRODUCE and REFINE audit during their work with (docs/loop.md#steps)."""
        return WorkAudit(
            probability=self.request.tool_audit_probability,
            first_call_index=self.memory.calls.get(R.CUSTODIET, 0) + 1,
            intent=self.memory.intent,
            plan_focus=plan_focus,
            evaluation=evaluation,
            iteration_start=self.memory.iteration_start,
            declared_files=self.request.declared_files,
            cleared_notes=self.cleared.get(self.state.iteration, []),
        )

    async def _through_blocks(
        self,
        output: ArtifactOutput,
        during: str,
        again: Callable[[int, str], Awaitable[ArtifactOutput]],
    ) -> ArtifactOutput:
        """The custodiet's audits during a PRODUCE or REFINE (docs/loop.md#verdicts): each
        is an `audit_verdict`; a BLOCK holds the run, its work so far committed, until a
        person clears it, and then the step runs `again` from that work, told what
        happened."""
        attempt = 1
        while True:
            self._take_work_audits(output)
            block = output.block
            if block is None:
                return output
            memory = self.memory
            memory.commit = output.commit
            self.record.saved(output)
            audit = block.audit
            self.steering.block(
                ev.BlockedPayload(
                    reason=audit.reason,
                    violations=audit.violations,
                    report=block.report,
                    path=BLOCKED_PATH,
                    report_commit=output.commit,
                    during=during,
                    refused=block.refused,
                )
            )
            await self.steering.gate(self.request.budget)
            if note := self.state.block.cleared_note:
                self.cleared.setdefault(self.state.iteration, []).append(note)
            attempt += 1
            told = (
                f"The custodiet, the run's auditor, blocked this step's attempt {attempt - 1} "
                f"before its tool call `{block.refused}`, which was refused, as every later "
                f"one was: {audit.reason or 'no reason given'}. What that attempt had done "
                f"is in the workspace (committed, with the write-up in `{BLOCKED_PATH}`). "
                "A person has since cleared the block: carry on with the step."
            )
            output = await again(attempt, told)

    def _take_work_audits(self, output: ArtifactOutput) -> None:
        """Count the custodiet's calls a step made, and record each verdict."""
        memory, state = self.memory, self.state
        if not output.work_audits:
            return
        memory.calls[R.CUSTODIET] = memory.calls.get(R.CUSTODIET, 0) + len(output.work_audits)
        for verdict in output.work_audits:
            audit = verdict.audit
            payload = ev.AuditPayload(
                verdict=audit.verdict.value,
                reason=audit.reason,
                violations=audit.violations,
                before_call=verdict.before_call,
            )
            if output.block is not None and audit.verdict == AuditVerdict.BLOCK:
                payload.report, payload.report_commit = output.block.report, output.commit
            self.record.emit(EventName.AUDIT_VERDICT, payload)
            state.verdicts.custodiet = AuditView.of(audit, state.iteration)
            memory.guidance.append(f"custodiet: {audit.verdict.value} {audit.reason}".strip())

    async def maybe_audit(self, evaluation: Evaluation, plan_focus: str) -> None:
        """Step 7: the custodiet audits by chance; BLOCK parks the run until cleared."""
        if not decisions.should_audit(workflow.random().random(), self.request.audit_probability):
            return
        audited = await self.runner.model_step(
            Step.AUDIT,
            R.CUSTODIET,
            AuditActivities.audit_run,
            lambda f: AuditInput(
                **{**f, "operator_note": self._audit_note(f["operator_note"])},
                task=self.request.task,
                intent=self.memory.intent,
                plan_focus=plan_focus,
                evaluation=evaluation,
                workspace=self.workspace(),
                iteration_start=self.memory.iteration_start,
                declared_files=self.request.declared_files,
                committed_at=workflow.now(),
            ),
            MODEL_CALL,
            f"iteration {self.state.iteration} · custodiet audit",
            step_events.audited,
        )
        audit = audited.audit
        self.state.verdicts.custodiet = AuditView.of(audit, self.state.iteration)
        self.memory.guidance.append(f"custodiet: {audit.verdict.value} {audit.reason}".strip())
        if audit.verdict == AuditVerdict.BLOCK:
            if audited.commit:
                # The block's commit adds only the run's record to the work: the checks run
                # on the work before it hold for it.
                memory = self.memory
                if memory.checked_commit == memory.commit:
                    memory.checked_commit = audited.commit
                memory.commit = audited.commit
            self.steering.block(
                ev.BlockedPayload(
                    reason=audit.reason,
                    violations=audit.violations,
                    report=audited.report,
                    path=BLOCKED_PATH if audited.commit else None,
                    report_commit=audited.commit,
                )
            )
            await self.steering.gate(self.request.budget)

    def _audit_note(self, note: str | None) -> str | None:
        """The audit's note: a person's own for it, and those that cleared blocks during
        this iteration's work, whose commands it is shown again."""
        notes = [*self.cleared.get(self.state.iteration, []), note or ""]
        return "\n\n".join(dict.fromkeys(n for n in notes if n)) or None

    async def verify(self, evaluation: Evaluation, reason: StopReason) -> Critique:
        """Step 9: QA. VERIFIED ends the loop; ISSUES become the next refine's critique.

        In a run with a proof, QA's verdict must stand on its evidence
        (docs/loop.md#qas-evidence): one that does not is sent back once with the reason,
        and then counts as ISSUES. A verified run that changed code with nothing to prove
        it ends `unverified` unless its request allows it (docs/loop.md#the-runs-proof)."""
        state = self.state
        verified, judged = await self._qa(evaluation)
        if not judged.accepted:
            verified, judged = await self._qa(evaluation, judged.reason)
        report = verified.report
        if not judged.accepted:
            report = evidence.as_issues(report, judged.reason)
        state.verdicts.qa = QAView.of(report, state.iteration)
        if report.verdict == QAVerdict.VERIFIED:
            final, message, state.proof = proof.completed(
                state.proof, reason, verified.code_changed
            )
            raise Finished(final, message)
        if state.iteration >= state.max_iterations:
            raise Finished(StopReason.QA_REJECTED, report.summary)
        issues = report.issues or [
            Issue(rule_id="qa", problem=report.summary or "QA found issues", fix="address QA")
        ]
        return Critique(issues=issues)

    async def _qa(
        self, evaluation: Evaluation, rejected: str = ""
    ) -> tuple[QAOutput, evidence.Judgement]:
        """One ask of the QA verifier (`rejected`: why its previous verdict did not
        stand), its event, and whether its verdict stands on its evidence: always, in a
        run recorded before runs had a proof."""
        state, produced = self.state, self.memory.last_artifact
        verified = await self.runner.model_step(
            Step.QA,
            R.QA_VERIFIER,
            QAActivities.verify_result,
            lambda f: QAInput(
                **f,
                task=self.request.task,
                intent=self.memory.intent,
                acceptance_criteria=state.acceptance_criteria,
                evaluation=evaluation,
                workspace=self.workspace(),
                base_commit=self.memory.base_commit,
                changed=produced.changed if produced else [],
                producer_summary=produced.summary if produced else "",
                committed_at=workflow.now(),
                proof=state.proof,
                rejected=rejected,
            ),
            # QA is an agent now: it runs the tests, for as long as a producer may.
            AGENT_STEP,
            f"iteration {state.iteration} · QA verification",
        )
        judged = evidence.ACCEPTED
        if state.proof is not None:
            judged = evidence.judge(
                verified.report,
                verified.ran,
                verified.code_changed,
                verified.checkout_changed,
                proof.failures(state.proof),
            )
        self.record.emit(*step_events.verified(verified, judged))
        if verified.commit:  # its trajectory, on top of the commit it verified
            self.memory.commit = verified.commit
        return verified, judged

    async def critique(self, evaluation: Evaluation) -> Critique:
        state, memory = self.state, self.memory
        critique = (
            await self.runner.model_step(
                Step.CRITIQUE,
                R.ARTIFACT_CRITIC,
                CritiqueActivities.critique_artifact,
                lambda f: CritiqueInput(
                    **f,
                    task=self.request.task,
                    evaluation=evaluation,
                    rules=decisions.active_rules(state.rules, state.phase),
                    workspace=self.workspace(),
                ),
                MODEL_CALL,
                f"iteration {state.iteration} · critique",
                step_events.critiqued,
            )
        ).critique
        state.verdicts.artifact_critic = CritiqueView.of(critique, state.iteration)
        self.record.show_iteration(evaluation, memory.last_plan, memory.last_artifact, critique)
        return critique

    async def refine(self, critique: Critique) -> None:
        refined = await self._through_blocks(
            await self._refine(critique, 1, ""),
            "refine",
            lambda attempt, told: self._refine(critique, attempt, told),
        )
        self.accept_artifact(refined, EventName.REFINEMENT_DONE)

    async def _refine(self, critique: Critique, attempt: int, told: str) -> ArtifactOutput:
        memory = self.memory
        focus = memory.last_plan.focus if memory.last_plan else ""
        return await self.runner.model_step(
            Step.REFINE,
            R.REFINER,
            ProductionActivities.refine_artifact,
            lambda f: RefineInput(
                **f,
                task=self.request.task,
                critique=critique,
                workspace=self.workspace(),
                committed_at=workflow.now(),
                log=self.log(),
                graph_task=self.graph_task,
                base_commit=self.memory.base_commit,
                work_audit=self._work_audit(focus, memory.last_evaluation),
                attempt=attempt,
                blocked_attempt=told,
            ),
            AGENT_STEP,
            f"iteration {self.state.iteration} · refine · {len(critique.issues)} issues"
            + (f" · attempt {attempt}" if attempt > 1 else ""),
        )

    async def reflect(self) -> ReflectOutput | None:
        """Step 10 runs for every run that got a workspace, stopped ones included."""
        memory = self.memory
        try:
            reflected = await self.runner.model_step(
                Step.REFLECT,
                R.REFLECTOR,
                ReflectionActivities.reflect_on_run,
                lambda f: ReflectInput(
                    **f,
                    state=self.state,
                    critic_verdict=memory.critic_verdict,
                    subagents_invoked=[role.value for role in memory.calls],
                    guidance=memory.guidance,
                    playbook_items=memory.playbook_items,
                    workspace=self.workspace(),
                    committed_at=workflow.now(),
                ),
                MODEL_CALL,
                "reflect and write insights",
                step_events.reflected,
                gated=False,
            )
        except (Finished, ActivityError) as err:
            # A failed reflection must not cost the run its push.
            payload = ev.FailedPayload(step=Step.REFLECT.value, error=str(err))
            self.record.emit(EventName.FAILED, payload, status="error")
            return None
        memory.commit = reflected.commit
        self.record.saved(reflected)
        return reflected

    async def close(self, reflected: ReflectOutput | None) -> None:
        """Step 12, close: commit the run's record (its reflection too), push the run branch,
        verify the remote has it."""
        self.record.set_step(Step.CLOSE)
        state = self.state
        final = state.model_copy(
            update={"status": self.record.final_status(), "current_step": Step.DONE}
        )
        request = RecordAndCloseInput(
            run_id=state.run_id,
            origin=state.origin,
            branch=state.branch,
            commit=self.memory.commit,
            log=self.log(final),
            committed_at=workflow.now(),
            reflection=reflected.reflection if reflected else None,
            insights=reflected.insights if reflected else None,
            calls=self.memory.recorded_calls,
        )
        try:
            closed = await self.runner.activity(
                RepositoryActivities.record_and_close_run,
                request,
                GIT,
                f"push {state.branch}",
                gated=False,
            )
        except ActivityError as err:
            self.record.fail(f"push failed: {describe(err)}")
            return
        self.memory.commit = closed.commit
        self.record.saved(closed)
        self.record.emit(EventName.PUSHED, ev.PushedPayload(**closed.model_dump()))

    def accept_artifact(self, output: ArtifactOutput, event: EventName) -> None:
        """Take a PRODUCE's or REFINE's commit; one whose agent ran out of budget holds
        the work so far, and the run stops with it (docs/loop.md#budgets)."""
        self.memory.commit = output.commit
        self.memory.last_artifact = output
        self.record.accept_artifact(output, event)
        self.record.saved(output)
        if output.budget_exhausted is not None:
            raise Finished(StopReason.BUDGET_EXHAUSTED, output.budget_exhausted)

    def log(self, state: RunState | None = None) -> RunLog:
        """The events git lacks, after the last one the run's commit holds, and the state
        for run.json, for a step that commits."""
        memory = self.memory
        return RunLog(
            state=state or self.state,
            events=memory.unsaved(),
            saved_seq=memory.saved_seq,
            calls=dict(memory.carried_calls),
        )
