"""What the worker injects into activities, and the one path every model call takes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from opentelemetry import trace
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from loopworks.agent.loop import AgentOutcome, run_agent
from loopworks.agent.trajectory import AgentStep
from loopworks.checks.redaction import redacted, remember, settings_secrets
from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource
from loopworks.llm.structured import Answered, ask
from loopworks.prompts.catalog import AgentDefinition, WorkflowTemplate
from loopworks.schemas.contexts import CONTEXTS, RoleContext
from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import (
    ARTIFACT_PATH,
    INVALID_OUTPUT,
    ORIGIN_LACKS,
    ORIGIN_REFUSED,
    UNSAFE_PATH,
    GitLocation,
    ModelStep,
)
from loopworks.workspace.files import UnsafePath
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.origin_access import OriginRefusedError
from loopworks.workspace.runner import OriginLacksError

Answer = TypeVar("Answer", bound=BaseModel)

# How often a running step tells Temporal it is alive. Cancellation (a stop) reaches a
# step only in a heartbeat's reply, so this is how long a stop waits on a model call; and
# each beat is a call the server records: the benchmark's run makes 17 model calls, which
# at 20 s each and a beat a second would be 340 calls; at 3 s a stop still lands within
# seconds, for a third of them.
# Three beats fit in the steps' 10-second heartbeat timeout (workflows/policies.py).
HEARTBEAT_EVERY_SECONDS = 3.0
WORKSPACE_LOST = "WorkspaceLost"

# Follows the process-wide provider (`worker.telemetry.configure_tracing`); no-op without one.
DEFAULT_TRACER = trace.get_tracer("loopworks")


@dataclass(frozen=True)
class StepDeps:
    settings: Settings
    models: ModelSource
    agents: dict[str, AgentDefinition]
    templates: dict[str, WorkflowTemplate]
    workspaces: GitWorkspaces
    # Tests trace into a provider of their own; None is the process-wide one.
    tracer: trace.Tracer | None = None

    def __post_init__(self) -> None:
        # Built once at worker start: from now on every command's output is redacted of the
        # settings' secrets, the agents' tools included, which never see the settings.
        remember(settings_secrets(self.settings))

    async def consult(
        self,
        role: Role,
        step: ModelStep,
        context: RoleContext,
        answer_type: type[Answer],
        check: Callable[[Answer], None] | None = None,
    ) -> Answered[Answer]:
        """Ask the role's model, heartbeating meanwhile so a stop cancels it promptly.

        An answer that does not fit `answer_type`, or that `check` refuses (ValueError),
        goes back to the model once with the errors; if the repair fails too, the step
        answers InvalidOutput, which Temporal does not retry: the workflow owns seed 001's
        "retry once, then phase_error", and the repair was that retry.
        """
        agent, call = self.for_role(role, step, context)
        with self.model_span("llm", role, step, call.model) as span:
            async with heartbeating():
                answered = await ask(self.models, call, agent.prompt, answer_type, check)
            self.price(call.model, answered.usage, span)
        return answered

    def for_role(
        self, role: Role, step: ModelStep, context: RoleContext
    ) -> tuple[AgentDefinition, ModelCall]:
        """The role's agent definition and the call to its model: the model id of its tier,
        and the context it is given (with the operator's note from a cleared block or an
        approval, when there is one), as the JSON the model layer renders."""
        if not isinstance(context, CONTEXTS[role]):
            raise TypeError(
                f"{role.value} takes a {CONTEXTS[role].__name__}, not a {type(context).__name__}"
            )
        agent = self.agents[role.value]
        if step.operator_note:
            context = context.model_copy(update={"operator_note": step.operator_note})
        call = ModelCall(
            role=role,
            run_id=step.run_id,
            call_index=step.call_index,
            iteration=step.iteration,
            model=self.settings.model_for(agent.model),
            # Every model call's inputs pass here (files, earlier answers, command output):
            # no secret of the worker's goes to a model, nor into a recorded prompt.
            context=redacted(context.model_dump(mode="json")),
        )
        return agent, call

    @contextlib.contextmanager
    def model_span(
        self, kind: str, role: Role, step: ModelStep, model: str
    ) -> Iterator[trace.Span]:
        """A span around one model interaction (a child of the activity's span when the
        Temporal tracing interceptor is on); invalid output leaves it as a non-retryable
        error for the workflow's retry-once."""
        with (self.tracer or DEFAULT_TRACER).start_as_current_span(
            f"{kind} {role.value}",
            kind=trace.SpanKind.CLIENT,
            attributes={
                "loops.role": role.value,
                "loops.run_id": step.run_id,
                "loops.call_index": step.call_index,
                "loops.iteration": step.iteration,
                "gen_ai.request.model": model,
            },
        ) as span:
            try:
                yield span
            except InvalidOutput as exc:
                raise ApplicationError(str(exc), type=INVALID_OUTPUT, non_retryable=True) from exc

    def price(self, model: str, usage: TokenUsage, span: trace.Span) -> None:
        """Set the usage's cost from the price table, and show both on the span."""
        usage.cost_usd = self.settings.cost_usd(model, usage)
        if span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                    "loops.usage.cache_read_input_tokens": usage.cache_read_input_tokens,
                    "loops.usage.cache_creation_input_tokens": usage.cache_creation_input_tokens,
                    "loops.cost_usd": usage.cost_usd,
                }
            )

    async def run_agent(
        self,
        role: Role,
        step: ModelStep,
        context: RoleContext,
        workdir: Path,
        verb: AgentStep,
        deliverable: str | None = ARTIFACT_PATH,
    ) -> AgentOutcome:
        """The role's agent over the workspace: its prompt as the system, the step's inputs
        as the first message, the workspace tools; usage priced as `consult` prices it."""
        agent, call = self.for_role(role, step, context)
        with self.model_span("agent", role, step, call.model) as span:
            # The agent runs for minutes: heartbeats carry a stop's cancellation to it.
            async with heartbeating():
                try:
                    outcome = await run_agent(
                        self.models,
                        call,
                        agent.prompt,
                        workdir,
                        self.settings.agent_max_turns,
                        verb,
                        deliverable,
                    )
                except Exception:
                    _still_a_clone(workdir)
                    raise
                _still_a_clone(workdir)
            self.price(call.model, outcome.usage, span)
            if outcome.limit_reached:
                activity.logger.warning(
                    "%s stopped at the turn limit (%d turns)", role.value, outcome.turns
                )
            if span.is_recording():
                span.set_attributes(
                    {
                        "loops.agent.turns": outcome.turns,
                        "loops.agent.turn_limit_reached": outcome.limit_reached,
                    }
                )
        return outcome

    async def read_artifact(self, location: GitLocation) -> str:
        """The artifact at a commit, empty when the commit has none yet."""
        text = await asyncio.to_thread(
            self.workspaces.read_file, location.origin, location.commit, ARTIFACT_PATH
        )
        return text or ""


def _still_a_clone(workdir: Path) -> None:
    """The data directory is a cache the worker may lose at any moment (issue 14): when the
    clone vanished while the agent worked in it, the step failed for that, not for the
    model's answer (a deliverable "not written" included). A plain ApplicationError is
    retried, from the same commit, in a fresh clone on whichever worker takes it."""
    if not (workdir / ".git").is_dir():
        raise ApplicationError(
            f"the workspace {workdir.name} was removed while the agent worked in it",
            type=WORKSPACE_LOST,
        )


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background: cancellation reaches an activity only through one.
    A local activity has nothing to beat to: the worker running it holds its workflow's
    task, and a cancel reaches it from there."""
    if not activity.in_activity() or activity.info().is_local:
        yield
        return

    async def beat() -> None:
        # Not at once: a step done within the interval needs none (each heartbeat is a
        # call to the server), and a longer one is still reached by a stop within it.
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.contextmanager
def failing_at_once_when_origin_lacks() -> Iterator[None]:
    """An origin that answered without the branch or commit a run starts from will not
    have it on the next attempt either, nor will an origin the deployment refuses become
    allowed: fail the step now, saying so, rather than retry for the policy's schedule."""
    try:
        yield
    except OriginLacksError as err:
        raise ApplicationError(str(err), type=ORIGIN_LACKS, non_retryable=True) from err
    except OriginRefusedError as err:
        # The deployment does not allow the origin (a workflow started around the API, by
        # the temporal CLI, is checked here too): no retry changes the settings.
        raise ApplicationError(str(err), type=ORIGIN_REFUSED, non_retryable=True) from err


@contextlib.contextmanager
def refusing_unsafe_paths() -> Iterator[None]:
    """A path in the workspace the worker will not read or write (workspace/files.py) fails
    the step at once, saying which and why: the same tree would be refused again."""
    try:
        yield
    except UnsafePath as err:
        raise ApplicationError(str(err), type=UNSAFE_PATH, non_retryable=True) from err


def now() -> float:
    return time.time()
