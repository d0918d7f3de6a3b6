"""What a run takes from its repository's playbook and what it gives back
(docs/playbook.md#how-hydration-reads-it, docs/playbook.md#what-a-run-sends-back).

At hydration the run reads the playbook (the current version, or a pinned one) and
records the version and the items it was given. After reflection the task curator
decides; the reflector's tags and the curator's updates go to the playbook as one batch,
and a curator that asks for helpers or reference notes starts the skill sub-loop, whose
kept files join the run's branch and whose deltas go as a second batch. None of this can
fail the run: an error is an event, and the run goes on to push.

Used from inside `LoopWorkflow` only.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from loopworks.activities.curation import CurationActivities
    from loopworks.playbook.delivery import PlaybookDeliveryActivities
    from loopworks.schemas import events as ev
    from loopworks.schemas.curation import (
        CuratorPayload,
        curated_deltas,
        helper_names,
        helper_path,
        reference_paths,
        tag_deltas,
    )
    from loopworks.schemas.events import EventName
    from loopworks.schemas.learning import CurateInput, SkillLoopInput, SkillLoopResult
    from loopworks.schemas.playbook import (
        MAX_BATCH_DELTAS,
        AddDelta,
        Delta,
        DeltaBatch,
        PlaybookDelivery,
        PlaybookRead,
        UpdateDelta,
    )
    from loopworks.schemas.roles import Role
    from loopworks.schemas.run import RunRequest, Step
    from loopworks.schemas.steps import HydrateOutput, ModelOutput, ReflectOutput
    from loopworks.workflows.policies import GIT, MODEL_CALL
    from loopworks.workflows.record import OnRecord, RunRecord
    from loopworks.workflows.skills import SkillLoopWorkflow
    from loopworks.workflows.skills import recorded_calls as skill_calls
    from loopworks.workflows.steering import Finished
    from loopworks.workflows.steps import StepRunner, describe, spent_by


class Learning(OnRecord):
    def __init__(self, record: RunRecord, runner: StepRunner, request: RunRequest) -> None:
        self.record = record
        self.runner = runner
        self.request = request

    # -- hydration ------------------------------------------------------------------------

    def playbook_to_read(self) -> PlaybookRead | None:
        """The playbook hydration draws on; None when the run opted out."""
        if not self.request.playbook or not self.memory.playbook:
            return None
        return PlaybookRead(
            name=self.memory.playbook,
            origin=self.state.origin,
            version=self.request.playbook_version,
        )

    def for_hydration(self) -> PlaybookRead | None:
        """What a hydration round reads: the run's playbook, and after the first round the
        version that round read, so that every round is given what the run records (a run
        that finished meanwhile may have made a newer one). None: nothing to read."""
        read, used = self.playbook_to_read(), self.state.playbook
        if read is None or used is None:
            return read
        if used.version == 0:
            return None  # the first round found no playbook: later rounds get none either
        return read.model_copy(update={"version": used.version})

    def hydrated(self, output: HydrateOutput) -> None:
        """Record the version and the items hydration was given (the first round's: later
        rounds read the same version, `for_hydration`)."""
        if output.playbook is None or self.state.playbook is not None:
            return
        self.state.playbook = output.playbook
        self.memory.playbook_items = output.playbook_items
        use = output.playbook
        payload = ev.PlaybookLoadedPayload(
            name=use.name, version=use.version, item_ids=use.item_ids, pinned=use.pinned
        )
        self.record.emit(EventName.PLAYBOOK_LOADED, payload)

    # -- after reflection -------------------------------------------------------------------

    async def learn(self, reflected: ReflectOutput | None, no_skills: str | None = None) -> None:
        """Curate, run the skill sub-loop if asked, send the deltas. `no_skills`: why the
        run may start no skill sub-loop (`decisions.no_skill_loop`), each file asked for
        then rejected with it."""
        playbook = self.playbook_to_read()
        if reflected is None or playbook is None:
            return
        self.record.set_step(Step.CURATE)
        given = [item.id for item in self.memory.playbook_items]
        payload = await self._curate(reflected, playbook.model_copy(update={"version": None}))
        try:
            deltas = tag_deltas(reflected.playbook_tags, given)
            if payload is not None:
                deltas += curated_deltas(payload)
        except ValidationError as err:
            # Raised in a workflow, it would fail the run's task on every retry.
            self._failed(err)
            deltas = []
        await self._send("run", deltas)
        if payload is not None and (helper_names(payload) or payload.reference_requests):
            # A run recorded before this started its sub-loop all the same.
            if no_skills is not None and workflow.patched("no-skill-loop-after-halt-or-block"):
                self._no_skill_loop(payload, no_skills)
                return
            result = await self._skill_loop(payload, playbook)
            if result is not None:
                await self._send("skill", result.deltas, result.files)

    async def _curate(
        self, reflected: ReflectOutput, playbook: PlaybookRead
    ) -> CuratorPayload | None:
        insights = reflected.insights
        try:
            curated = await self.runner.model_step(
                Step.CURATE,
                Role.TASK_CURATOR,
                CurationActivities.curate_run,
                lambda f: CurateInput(
                    **f,
                    task=self.request.task,
                    outcome=insights.outcome,
                    summary=insights.summary,
                    friction_points=insights.friction_points,
                    proposed_changes=insights.proposed_changes,
                    acceptance_criteria=self.state.acceptance_criteria,
                    playbook=playbook,
                ),
                MODEL_CALL,
                "task curator",
                gated=False,
            )
        except (Finished, ActivityError) as err:
            self._failed(err)
            return None
        payload = curated.payload
        self.record.emit(
            EventName.CURATED,
            ev.CuratedPayload(
                summary=payload.summary,
                proposed_updates=len(payload.proposed_updates),
                python_helpers=helper_names(payload),
                reference_requests=payload.reference_requests,
            ),
        )
        return payload

    def _no_skill_loop(self, payload: CuratorPayload, why: str) -> None:
        helpers = [helper_path(name) for name in helper_names(payload)]
        asked = [*helpers, *reference_paths(payload.reference_requests)]
        rejected = {path: why for path in asked}
        self.record.emit(EventName.SKILL_LOOP_DONE, ev.SkillLoopPayload(rejected=rejected))

    async def _skill_loop(
        self, payload: CuratorPayload, playbook: PlaybookRead
    ) -> SkillLoopResult | None:
        state = self.state
        params = SkillLoopInput(
            run_id=state.run_id,
            iteration=state.iteration,
            task=self.request.task,
            payload=payload,
            workspace=self.workspace(),
            playbook=playbook,
            allowance=self.runner.left(),
        )
        self.memory.recorded_calls += skill_calls(state.iteration)
        try:
            result = await workflow.execute_child_workflow(
                SkillLoopWorkflow.run,
                params,
                id=f"{state.run_id}/skills",
                static_summary=f"skill sub-loop of {state.run_id}",
            )
        except ChildWorkflowError as err:
            cause = err.cause
            error = str(getattr(cause, "message", None) or cause or err)
            self.record.emit(EventName.SKILL_LOOP_DONE, ev.SkillLoopPayload(error=error))
            # What its calls were billed, which a failed child carries in its failure.
            self.record.add_usage(spent_by(err))
            return None
        self.record.add_output(ModelOutput(usage=result.usage))
        if result.commit:
            self.memory.commit = result.commit
        self.record.emit(
            EventName.SKILL_LOOP_DONE,
            ev.SkillLoopPayload(
                accepted=result.accepted,
                rejected=result.rejected,
                commit=result.commit,
                deltas=len(result.deltas),
            ),
        )
        return result

    async def _send(
        self, part: str, deltas: list[Delta], files: dict[str, str] | None = None
    ) -> None:
        """The deltas to the playbook's workflow, in batches id'd by the run: sent twice,
        applied once. `files`: the skill sub-loop's kept files, stored with the items that
        name them.

        A batch holds at most `MAX_BATCH_DELTAS`, and a run given more items than that
        tags each of them: the deltas go in batches of that many, in order, the first
        `<run id>:<part>` as a run's one batch always was, the next `<part>-2`, `<part>-3`."""
        for number, start in enumerate(range(0, len(deltas), MAX_BATCH_DELTAS), start=1):
            chunk = deltas[start : start + MAX_BATCH_DELTAS]
            named = {path: text for path, text in (files or {}).items() if names(chunk, path)}
            batch_id = f"{self.state.run_id}:{part}" + (f"-{number}" if number > 1 else "")
            try:
                batch = DeltaBatch(
                    batch_id=batch_id, source=self.state.run_id, deltas=chunk, files=named
                )
                delivery = PlaybookDelivery(
                    name=self.memory.playbook, origin=self.state.origin, batch=batch
                )
            except ValidationError as err:
                # Raised in a workflow, it would fail the run's task on every retry.
                self._failed(err)
                return
            await self._deliver(delivery)

    async def _deliver(self, delivery: PlaybookDelivery) -> None:
        deltas = delivery.batch.deltas
        try:
            applied = await self.runner.activity(
                PlaybookDeliveryActivities.send_playbook_batch,
                delivery,
                GIT,
                f"playbook {delivery.name} · {len(deltas)} deltas",
                gated=False,
            )
        except ActivityError as err:
            self._failed(err)
            return
        self.record.emit(
            EventName.PLAYBOOK_UPDATED,
            ev.PlaybookUpdatedPayload(
                name=delivery.name,
                batch_id=applied.batch_id,
                version=applied.version,
                changed=applied.changed,
                results=dict(applied.results),
                pruned=applied.pruned,
            ),
        )

    def _failed(self, err: Exception) -> None:
        error = describe(err) if isinstance(err, ActivityError) else str(err)
        payload = ev.FailedPayload(step=Step.CURATE.value, error=error)
        self.record.emit(EventName.FAILED, payload, status="error")


def names(deltas: list[Delta], path: str) -> bool:
    """Whether an ADD or UPDATE of `deltas` names the file `path`: the batch holding it
    is the one to carry the file."""
    return any(isinstance(d, AddDelta | UpdateDelta) and path in d.content for d in deltas)
