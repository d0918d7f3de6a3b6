"""The gc's steps (docs/operations.md#retention): which origins to visit, then, for each,
survey it, ask Temporal about the runs that hold something removable, decide
(workspace/expiry.py) and remove (workspace/pruning.py).

The policy is the workers' (LOOPS_RETENTION_*), read here, never in the workflow; the plan
hands it to every origin's sweep so that one gc applies one policy.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.activities.deps import StepDeps
from loopworks.activities.heartbeat import heartbeating
from loopworks.schemas.git_names import is_url
from loopworks.schemas.playbook import workflow_id as playbook_workflow_id
from loopworks.schemas.retention import (
    REPORT_RUNS_CAP,
    ExpiredRun,
    KeptBecause,
    OriginReport,
    OriginSweep,
    RetentionInput,
    RetentionPlan,
    Totals,
)
from loopworks.service.started import started_on
from loopworks.workspace.default_origin import default_origin
from loopworks.workspace.expiry import OPEN, UNKNOWN, Known, Plan, decide, to_ask
from loopworks.workspace.pruning import RunRecords, Survey
from loopworks.workspace.refs import redact

log = logging.getLogger(__name__)

# Temporal calls in flight at once while a gc asks about runs.
ASKING_AT_ONCE = 16
# A playbook writer's workflow id, `playbook/<name>`, up to its name.
PLAYBOOK_IDS = playbook_workflow_id("")


class RetentionActivities:
    def __init__(self, deps: StepDeps, client: Client | None) -> None:
        self.deps = deps
        self.client = client

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError("this worker was built without a Temporal client")
        return self.client

    @activity.defn(name="plan_retention")
    async def plan_retention(self, params: RetentionInput) -> RetentionPlan:
        """The policy, and the origins to visit: the one asked, else the service's default
        origin and every origin a run, graph or playbook on this task queue that Temporal
        still knows was started on."""
        settings = self.deps.settings
        policy = settings.retention_policy()
        if params.branches is not None:
            policy = policy.model_copy(update={"branches": params.branches})
        if params.repo:
            return RetentionPlan(policy=policy, origins=[params.repo])
        if not policy.expires:
            return RetentionPlan(policy=policy)
        async with heartbeating():
            origins = [] if (own := self._default_origin()) is None else [own]
            for repo in await self._started_on():
                origins.append(repo or default_origin(settings))
        return RetentionPlan(policy=policy, origins=list(dict.fromkeys(origins)))

    def _default_origin(self) -> str | None:
        """The default origin, unless it is a path nothing has created yet."""
        origin = default_origin(self.deps.settings)
        return origin if is_url(origin) or Path(origin).exists() else None

    async def _started_on(self) -> list[str | None]:
        """The repository of each run, graph and playbook writer Temporal knows on this
        task queue (None: the default origin). Known by their ids, which their inputs
        name a repository in (service/started.py): a run's and a graph's are one segment,
        a playbook writer's `playbook/<name>`; a task loop (`<graph>/<task>/<n>`) works
        where its graph does, and the gc's own and the skill sub-loops' name none."""
        client = self._client()
        query = f'TaskQueue = "{self.deps.settings.task_queue}"'
        ids = {
            execution.id
            async for execution in client.list_workflows(query)
            if "/" not in execution.id or execution.id.startswith(PLAYBOOK_IDS)
        }
        asking = asyncio.Semaphore(ASKING_AT_ONCE)

        async def repo(workflow_id: str) -> tuple[bool, str | None]:
            async with asking:
                try:
                    found = await started_on(client, workflow_id)
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        return False, None  # its history expired since it was listed
                    raise
            return found is not None, None if found is None else found.repo

        answers = await asyncio.gather(*(repo(workflow_id) for workflow_id in sorted(ids)))
        return [repo for named, repo in answers if named]

    @activity.defn(name="sweep_origin")
    async def sweep_origin(self, sweep: OriginSweep) -> OriginReport:
        """Survey one origin, decide what has expired and (unless dry) remove it: its refs
        on the origin, its clones on this worker."""
        records = RunRecords.of(self.deps.workspaces)
        origin, policy = sweep.origin, sweep.policy
        async with heartbeating():
            survey = await asyncio.to_thread(records.survey, origin)
            found = survey.records({})
            known = await self._known(to_ask(found, policy))
            # A run Temporal forgot finished when its result branch did.
            branches = [
                held.branch
                for run_id, held in found.items()
                if held.branch is not None and known.get(run_id) == UNKNOWN
            ]
            times = await asyncio.to_thread(records.branch_times, origin, branches)
            now = sweep.now or datetime.now(UTC)
            plan = decide(survey.records(times), known, survey.pins, policy, now)
            if not sweep.dry_run and plan.remove:
                refs = [ref for removal in plan.remove for ref in survey.refs_of(removal)]
                await asyncio.to_thread(records.delete_refs, origin, refs)
                clones = [name for removal in plan.remove for name in removal.clones]
                await asyncio.to_thread(records.remove_clones, clones)
                log.info(
                    "retention removed the records of %d run(s) on %s",
                    len(plan.remove),
                    redact(origin),
                )
        return report(redact(origin), plan, survey)

    async def _known(self, workflow_ids: set[str]) -> dict[str, Known]:
        """What Temporal says of each id now (describe: not visibility, which lags)."""
        client = self._client()
        asking = asyncio.Semaphore(ASKING_AT_ONCE)

        async def known(workflow_id: str) -> tuple[str, Known]:
            async with asking:
                try:
                    described = await client.get_workflow_handle(workflow_id).describe()
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        return workflow_id, UNKNOWN
                    raise
            if described.close_time is None:
                return workflow_id, OPEN
            return workflow_id, Known.closed(described.close_time)

        return dict(await asyncio.gather(*(known(workflow_id) for workflow_id in workflow_ids)))


def report(origin: str, plan: Plan, survey: Survey) -> OriginReport:
    expired = [
        ExpiredRun(
            run_id=removal.run_id,
            reason=removal.reason,
            work_ref=removal.work_ref,
            call_refs=removal.call_refs,
            branch=removal.branch,
            clones=list(removal.clones),
            clone_bytes=removal.clone_bytes,
        )
        for removal in plan.remove
    ]
    totals = Totals(
        runs=len(expired),
        work_refs=sum(run.work_ref for run in expired),
        call_refs=sum(run.call_refs for run in expired),
        branches=sum(run.branch for run in expired),
        clones=sum(len(run.clones) for run in expired),
        clone_bytes=sum(run.clone_bytes for run in expired),
    )
    kept: dict[KeptBecause, int] = {}
    for why in plan.kept.values():
        kept[why] = kept.get(why, 0) + 1
    return OriginReport(
        origin=origin,
        totals=totals,
        expired=expired[:REPORT_RUNS_CAP],
        kept=kept,
        pinned=sorted(survey.pins)[:REPORT_RUNS_CAP],
    )
