"""Step 9: the QA verifier, an independent agent that checks the finished work."""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.deps import StepDeps
from schemas.roles import QAReport, Role
from schemas.steps import ARTIFACT_PATH, QAInput, QAOutput


class QAActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps

    @activity.defn(name="verify_result")
    async def verify_result(self, step: QAInput) -> QAOutput:
        artifact = await asyncio.to_thread(
            self.deps.workspaces.read_file,
            step.workspace.origin,
            step.workspace.commit,
            ARTIFACT_PATH,
        )
        context = {
            "task": step.task,
            "intent": step.intent,
            "acceptance_criteria": step.acceptance_criteria,
            "artifact": artifact or "",
            "evaluation": step.evaluation.model_dump(mode="json") if step.evaluation else None,
        }
        report, usage = await self.deps.consult(Role.QA_VERIFIER, step, context, QAReport)
        return QAOutput(report=report, usage=usage)
