"""RetentionWorkflow: the gc of finished runs' records (docs/operations.md#retention).

A Temporal Schedule starts it (a worker creates the Schedule at start:
worker/schedule.py), and `POST /gc` (`loops gc`) does on demand. It plans (the workers'
policy, the origins to visit), then sweeps one origin after another, each an activity of
its own: an origin that cannot be swept is reported with why, and the others still are.
What expires is decided by code (workspace/expiry.py), in the activity.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from loopworks.activities.retention import RetentionActivities
    from loopworks.schemas.git_names import redact_url_credentials
    from loopworks.schemas.retention import (
        GcReport,
        OriginReport,
        OriginSweep,
        RetentionInput,
    )
    from loopworks.workflows.policies import RETENTION, execute

# The workflow's type: the Schedule and the API start it by it.
RETENTION_WORKFLOW = "RetentionWorkflow"


@workflow.defn(name=RETENTION_WORKFLOW)
class RetentionWorkflow:
    @workflow.run
    async def run(self, params: RetentionInput) -> GcReport:
        plan = await execute(
            RetentionActivities.plan_retention, params, RETENTION, "which origins to sweep"
        )
        report = GcReport(
            dry_run=params.dry_run, policy=plan.policy, workflow_id=workflow.info().workflow_id
        )
        for number, origin in enumerate(plan.origins, 1):
            sweep = OriginSweep(
                origin=origin, policy=plan.policy, dry_run=params.dry_run, now=workflow.now()
            )
            try:
                swept = await execute(
                    RetentionActivities.sweep_origin,
                    sweep,
                    RETENTION,
                    f"origin {number} of {len(plan.origins)}",
                )
            except ActivityError as err:
                cause = getattr(err.cause, "message", None) or str(err.cause or err)
                workflow.logger.warning("retention could not sweep origin %d: %s", number, cause)
                swept = OriginReport(origin=redact_url_credentials(origin), error=cause)
            report.origins.append(swept)
            report.totals = report.totals.add(swept.totals)
        return report
