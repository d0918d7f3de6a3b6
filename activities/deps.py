"""What the worker injects into activities, and the one path every model call takes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.catalog import AgentDefinition, WorkflowTemplate
from activities.llm.base import InvalidOutput, LanguageModel, ModelCall, ask, render_context
from activities.workspace import GitWorkspaces
from schemas.roles import Role
from schemas.run import TokenUsage
from schemas.settings import Settings
from schemas.steps import ModelStep

Answer = TypeVar("Answer", bound=BaseModel)

INVALID_OUTPUT = "InvalidOutput"
HEARTBEAT_EVERY_SECONDS = 1.0


@dataclass(frozen=True)
class StepDeps:
    settings: Settings
    model: LanguageModel
    agents: dict[str, AgentDefinition]
    templates: dict[str, WorkflowTemplate]
    workspaces: GitWorkspaces

    async def consult(
        self, role: Role, step: ModelStep, context: dict[str, Any], answer_type: type[Answer]
    ) -> tuple[Answer, TokenUsage]:
        """Ask the role's model, heartbeating meanwhile so a stop cancels it promptly.

        Invalid output is not retried by Temporal: the workflow owns seed 001's
        "retry the phase once, then phase_error".
        """
        agent = self.agents[role.value]
        if step.operator_note:
            context = {**context, "operator_note": step.operator_note}
        call = ModelCall(
            role=role,
            run_id=step.run_id,
            call_index=step.call_index,
            iteration=step.iteration,
            model=self.settings.model_for(agent.model),
            system=agent.prompt,
            prompt=render_context(context),
            context=context,
            output_schema=answer_type.model_json_schema(),
        )
        try:
            async with heartbeating():
                answer, usage = await ask(self.model, call, answer_type)
        except InvalidOutput as exc:
            raise ApplicationError(str(exc), type=INVALID_OUTPUT, non_retryable=True) from exc
        usage.cost_usd = self.settings.cost_usd(call.model, usage)
        return answer, usage


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background: cancellation reaches an activity only through one."""
    if not activity.in_activity():
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def now() -> float:
    return time.time()
