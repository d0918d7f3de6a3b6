"""Steps 5 and 6 for the checks: PREPARE makes them from the rules, EVALUATE runs them in
parallel groups and scores the results.

Both remember what they did so a repeat costs nothing: PREPARE's checks are a function of
the task and the active rules, so while those stay the same the checks do too; and a
check's result is a function of the check and the commit, so evaluating the same commit
again (the phase switch re-evaluates the artifact with phase B's rules) runs only the
checks it has not run on that commit.

Used from inside the workflow only.
"""

from __future__ import annotations

from collections.abc import Awaitable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.evaluation import EvaluationActivities
    from loopworks.activities.preparation import PreparationActivities
    from loopworks.schemas.detail import EvaluationView
    from loopworks.schemas.evaluation import CheckResult, Evaluation
    from loopworks.schemas.events import EventName
    from loopworks.schemas.roles import Role as R
    from loopworks.schemas.rules import (
        CheckGroup,
        PreparedCheck,
        concrete_checks,
        described_rules,
    )
    from loopworks.schemas.run import RunRequest, Step
    from loopworks.schemas.steps import (
        EvaluateGroupInput,
        EvaluateGroupOutput,
        PrepareInput,
    )
    from loopworks.workflows import decisions, proof, step_events
    from loopworks.workflows.policies import CHECK_GROUP, MODEL_CALL
    from loopworks.workflows.record import OnRecord, RunRecord
    from loopworks.workflows.steps import StepRunner, gather_all


class Checking(OnRecord):
    def __init__(self, record: RunRecord, runner: StepRunner, request: RunRequest) -> None:
        self.record = record
        self.runner = runner
        self.request = request

    def asks_model(self) -> bool:
        """Whether `prepare` will ask the preparer now: the active rules changed, and one
        of them still needs its check made."""
        rules = decisions.active_rules(self.state.rules, self.state.phase)
        return self.memory.prepared_for != decisions.rules_key(rules) and bool(
            described_rules(rules)
        )

    async def prepare(self, set_step: bool = True) -> list[PreparedCheck]:
        """Step 5's PREPARE: checks from the task and the active rules, made anew only when
        those rules change (the first iteration, the phase switch, an approval), so later
        iterations make no model call and their scores compare like with like; rules that
        all carry their check need no model at all, and no activity."""
        state, memory = self.state, self.memory
        rules = decisions.active_rules(state.rules, state.phase)
        key = decisions.rules_key(rules)
        if memory.prepared_for == key:
            self.record.emit(
                *step_events.prepared_without_activity(rules, memory.prepared_checks, reused=True)
            )
            return memory.prepared_checks
        if not described_rules(rules):
            # Every rule carries its check: nothing for a model to do, so no activity.
            if set_step:
                self.record.set_step(Step.PREPARE)
            checks = concrete_checks(rules)
            self.record.emit(*step_events.prepared_without_activity(rules, checks, reused=False))
        else:
            prepared = await self.runner.model_step(
                Step.PREPARE,
                R.PREPARER,
                PreparationActivities.prepare_checks,
                lambda f: PrepareInput(**f, task=self.request.task, rules=rules),
                MODEL_CALL,
                f"iteration {state.iteration} · prepare · {len(rules)} rules",
                step_events.prepared(rules),
                set_step=set_step,
            )
            checks = prepared.checks
        memory.prepared_checks, memory.prepared_for = checks, key
        return checks

    async def evaluate(self, checks: list[PreparedCheck]) -> Evaluation:
        """Step 6: one activity per independent check group, in parallel, then score. On a
        commit evaluated before, only the checks not run on it yet."""
        self.record.set_step(Step.EVALUATE)
        state, memory = self.state, self.memory
        known = self._known_results()
        pending = [check for check in checks if _key(check) not in known]
        groups = decisions.group_checks(pending)
        outputs = await gather_all(*(self._evaluate_group(g, members) for g, members in groups))
        for (_, members), output in zip(groups, outputs, strict=True):
            known.update(zip(map(_key, members), output.results, strict=True))
        results = [known[_key(check)] for check in checks]
        memory.checked_commit = memory.commit
        memory.checked = list(zip(checks, results, strict=True))
        if state.proof is not None:
            # The proof's results on this commit (docs/loop.md#the-runs-proof).
            read = next((o.code_changed for o in outputs if o.code_changed is not None), None)
            state.proof = proof.evaluated(
                state.proof, memory.checked, read, memory.commit, state.iteration
            )
        evaluation = decisions.score_results(state.rules, results, state.phase, state.thresholds)
        memory.last_evaluation = evaluation
        # The score reaches the Temporal UI with the run's next upsert (the next iteration,
        # a phase switch, a block, the end), not in a workflow task of its own: each one
        # that upserts is a visibility write. The API's status has it at once.
        state.last_score = evaluation.score
        state.evaluation = EvaluationView.of(evaluation, state.iteration)
        self.record.show_iteration(evaluation, memory.last_plan, memory.last_artifact)
        payload = step_events.evaluated(evaluation, outputs, reused=len(checks) - len(pending))
        self.record.emit(EventName.EVALUATION_DONE, payload)
        return evaluation

    def _known_results(self) -> dict[str, CheckResult]:
        memory = self.memory
        return known_results(memory.checked, memory.checked_commit, memory.commit)

    def _evaluate_group(
        self, group: CheckGroup, members: list[PreparedCheck]
    ) -> Awaitable[EvaluateGroupOutput]:
        return self.runner.model_step(
            Step.EVALUATE,
            R.EVALUATOR,
            EvaluationActivities.evaluate_group,
            lambda f: EvaluateGroupInput(
                **f,
                task=self.request.task,
                group=group,
                checks=members,
                workspace=self.workspace(),
                base_commit=self.memory.base_commit,
                proof_rules=proof.orchestrator_rules(self.state.rules),
            ),
            CHECK_GROUP,
            f"iteration {self.state.iteration} · evaluate {group.value} · {len(members)} checks",
            set_step=False,
            # Commands ask no model: the content group, beside them, may spend what is left.
            share=0.0 if group is CheckGroup.EXEC else 1.0,
        )


def known_results(
    checked: list[tuple[PreparedCheck, CheckResult]], checked_commit: str, commit: str
) -> dict[str, CheckResult]:
    """The results of the checks already run on `commit`, by check; a check the budget
    left unchecked was not run, so it is not known and runs again."""
    if checked_commit != commit or not checked:
        return {}
    return {_key(check): result for check, result in checked if not result.unchecked}


def _key(check: PreparedCheck) -> str:
    return check.model_dump_json()
