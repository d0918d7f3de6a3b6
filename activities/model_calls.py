"""The one path every model call takes: the role's agent definition and model, the step's
inputs redacted, heartbeats meanwhile so a stop cancels it promptly, a span, a price, and
the conversation in the run's trajectory (docs/observability.md#the-trajectory)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple, TypeVar

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage
from temporalio import activity

from loopworks.activities.deps import StepDeps
from loopworks.activities.errors import budget_exhausted, final_when_invalid_output, still_a_clone
from loopworks.activities.heartbeat import heartbeating
from loopworks.agent.loop import AgentOutcome, AnsweredOutcome, ToolGate
from loopworks.agent.loop import run_agent as run_agent_loop
from loopworks.agent.loop import run_answering_agent as answering_loop
from loopworks.agent.trajectory import AgentStep, to_jsonl, trajectory
from loopworks.checks.redaction import redacted
from loopworks.llm.base import InvalidOutput, ModelCall
from loopworks.llm.budget import BudgetSpent, Meter
from loopworks.llm.pricing import price
from loopworks.llm.structured import Answered, ask
from loopworks.prompts.catalog import AgentDefinition
from loopworks.schemas.contexts import CONTEXTS, RoleContext
from loopworks.schemas.roles import Role
from loopworks.schemas.steps import ARTIFACT_PATH, STEP_OF_ROLE, ModelOutput, ModelStep, call_name
from loopworks.service.tracing import model_span, record_usage
from loopworks.workspace.call_records import CallRecords

Answer = TypeVar("Answer", bound=BaseModel)


async def consult(
    deps: StepDeps,
    role: Role,
    step: ModelStep,
    context: RoleContext,
    answer_type: type[Answer],
    check: Callable[[Answer], None] | None = None,
    meter: Meter | None = None,
) -> Answered[Answer]:
    """Ask the role's model, heartbeating meanwhile so a stop cancels it promptly.

    An answer that does not fit `answer_type`, or that `check` refuses (ValueError),
    goes back to the model once with the errors; if the repair fails too, the step
    answers InvalidOutput, which Temporal does not retry: the workflow owns the one retry
    an invalid answer gets (docs/loop.md#invalid-answers), and the repair was that retry.

    The call spends from `meter`, the step's that makes other calls too (the custodiet's
    during an agent's work), which then hears of a spent budget as `BudgetSpent`; else
    from the step's own allowance, and a spent budget ends the step (`budget_exhausted`).
    """
    agent, call = for_role(deps, role, step, context)
    own = meter is None
    meter = meter or step_meter(deps, step)
    # Invalid output leaves the span as a non-retryable error for the workflow's retry-once.
    span_of_call = model_span(deps.tracer, "llm", role, step, call.model)
    with span_of_call as span, final_when_invalid_output(meter if own else None):
        async with heartbeating():
            try:
                answered = await ask(deps.models, call, agent.prompt, answer_type, check, meter)
            except InvalidOutput as invalid:
                await _record_failed(deps, step, call, agent.prompt, invalid)
                raise
            except BudgetSpent as spent:
                price(spent.usage, call.model, deps.settings)
                if own:
                    raise budget_exhausted(spent) from spent
                raise
        price(answered.usage, call.model, deps.settings)
        record_usage(span, answered.usage)
        await _record(deps, step, call, agent.prompt, answered.messages)
    return answered


class CallRecord(NamedTuple):
    """A call's record, and where it goes when it is put on its ref."""

    origin: str
    run_id: str
    name: str
    text: str
    when: datetime


class CarriedCalls:
    """The records of the single-shot calls an activity makes for a step that carries
    them (`ModelStep.carry_calls`): handed back in the step's result (`ModelOutput.calls`)
    for the run's next commit, instead of a ref (and off the service's own origin, a push)
    each (docs/observability.md#the-trajectory).
    What cannot be handed back (the activity failed, or its result is no model step's) is
    put on the calls' refs as any other record is: no record is lost either way."""

    def __init__(self, workspaces: CallRecords) -> None:
        self._workspaces = workspaces
        self._records: dict[str, CallRecord] = {}

    def take(self, record: CallRecord) -> bool:
        """Keep `record` for the step's result; False when the result is full (its
        records past CARRIED_STEP_CAP) and the record is to go to its ref."""
        held = sum(len(r.text.encode()) for n, r in self._records.items() if n != record.name)
        if held + len(record.text.encode()) > CARRIED_STEP_CAP:
            return False
        self._records[record.name] = record  # a call repeated within the step: its latest
        return True

    async def handed_back(self, result: object) -> object:
        """`result`, carrying the records when it is a model step's answer."""
        if not self._records:
            return result
        if isinstance(result, ModelOutput):
            calls = {**result.calls, **{name: r.text for name, r in self._records.items()}}
            return result.model_copy(update={"calls": calls})
        await put_on_refs(self._workspaces, self._records.values())
        return result

    async def failed(self) -> None:
        """The activity failed: its records on their refs."""
        await put_on_refs_after_failure(self._workspaces, self._records.values(), "step")


async def put_on_refs(workspaces: CallRecords, records: Iterable[CallRecord]) -> None:
    """Each record on its call's ref; those bound for one origin share a push."""
    record = workspaces.record_call
    await asyncio.gather(*(asyncio.to_thread(record, *r) for r in records))


async def put_on_refs_after_failure(
    workspaces: CallRecords, records: Iterable[CallRecord], failed: str
) -> None:
    """`put_on_refs` for the records of a `failed` step, whose results never reach a
    commit; the step's own failure is the one to report, so records that cannot be put
    there are logged, not raised in its place."""
    try:
        await put_on_refs(workspaces, records)
    except Exception as exc:
        activity.logger.warning("could not record the calls of a failed %s: %s", failed, exc)


# The current activity's carried calls (set around each activity by the worker,
# worker/carried_calls.py); None outside one.
CARRIED: ContextVar[CarriedCalls | None] = ContextVar("carried_calls", default=None)

# A record past this goes to its ref even for a step that carries its calls, and so do
# those past the second bound in one step's result (a PRODUCE audited at every tool call
# makes many): a carried record is in workflow history at least twice (the step's result,
# the next commit's input), and Temporal refuses a payload past 2 MB. The workflow bounds
# what it holds itself (workflows/steps.py). In bytes of UTF-8.
CARRIED_CALL_CAP = 64 << 10
CARRIED_STEP_CAP = 256 << 10


async def _record(
    deps: StepDeps,
    step: ModelStep,
    call: ModelCall,
    instructions: str,
    messages: Sequence[ModelMessage],
    *,
    carried: bool = True,
) -> None:
    """The call's conversation, as a trajectory file of its own for the run's record: a
    single-shot call changes no file of the run. A step that carries its calls hands it
    back for the run's next commit (`CarriedCalls`); otherwise it goes to a ref of its own
    on the run's origin (workspace/call_records.py). `carried=False`: put on its ref
    whatever the step, for a call whose step fails. A retried call rewrites its own record; one that
    cannot be recorded fails the step, as an agent's commit that cannot be published does."""
    if not step.origin:
        return  # a step sent before every call was recorded
    call_step = STEP_OF_ROLE[call.role]
    text = to_jsonl(trajectory(messages, call, instructions, call_step))
    name = call_name(step.iteration, call_step, step.call_index)
    record = CallRecord(step.origin, step.run_id, name, text, datetime.now(UTC))
    carrier = CARRIED.get()
    if (
        carried
        and step.carry_calls
        and carrier is not None
        and len(text.encode()) <= CARRIED_CALL_CAP
        and carrier.take(record)
    ):
        return
    await asyncio.to_thread(deps.workspaces.record_call, *record)


async def _record_failed(
    deps: StepDeps, step: ModelStep, call: ModelCall, instructions: str, invalid: InvalidOutput
) -> None:
    """The conversation of a call whose answer stayed invalid after its repair, the one
    most worth reading, recorded before the step fails. The step fails as InvalidOutput
    either way: a record that cannot be written is logged, not raised in its place."""
    if not invalid.messages:
        return
    try:
        await _record(deps, step, call, instructions, invalid.messages, carried=False)
    except Exception as exc:  # the step's own failure is the one to report
        activity.logger.warning("could not record the failed %s call: %s", call.role.value, exc)


def step_meter(deps: StepDeps, step: ModelStep) -> Meter | None:
    """What the step's model calls spend from: its allowance (docs/loop.md#budgets), at the
    settings' prices; None when it has none."""
    return Meter(step.allowance, deps.settings.prices)


def for_role(
    deps: StepDeps, role: Role, step: ModelStep, context: RoleContext
) -> tuple[AgentDefinition, ModelCall]:
    """The role's agent definition and the call to its model: the model id of its tier,
    and the context it is given (with the operator's note from a cleared block or an
    approval, when there is one), as the JSON the model layer renders."""
    if not isinstance(context, CONTEXTS[role]):
        raise TypeError(
            f"{role.value} takes a {CONTEXTS[role].__name__}, not a {type(context).__name__}"
        )
    agent = deps.agents[role.value]
    if step.operator_note:
        context = context.model_copy(update={"operator_note": step.operator_note})
    call = ModelCall(
        role=role,
        run_id=step.run_id,
        call_index=step.call_index,
        iteration=step.iteration,
        model=deps.settings.model_for(agent.model),
        # Every model call's inputs pass here (files, earlier answers, command output):
        # no secret of the worker's goes to a model, nor into a recorded prompt.
        context=redacted(context.model_dump(mode="json")),
    )
    return agent, call


async def run_agent(
    deps: StepDeps,
    role: Role,
    step: ModelStep,
    context: RoleContext,
    workdir: Path,
    verb: AgentStep,
    deliverable: str | None = ARTIFACT_PATH,
    *,
    graph_task: bool = False,
    graph_base: str | None = None,
    gate: ToolGate | None = None,
    meter: Meter | None = None,
) -> AgentOutcome:
    """The role's agent over the workspace: its prompt as the system, the step's inputs
    as the first message, the workspace tools (refusing a task graph's records in its
    loop, `graph_task`, and keeping them as `graph_base` has them; asking `gate` before
    each call); usage priced as `consult` prices it. Its requests spend from `meter`
    (else the step's allowance); a spent budget ends the agent with its work so far
    (`AgentOutcome.budget_exhausted`)."""
    agent, call = for_role(deps, role, step, context)
    span_of_agent = model_span(deps.tracer, "agent", role, step, call.model)
    meter = meter or step_meter(deps, step)
    with span_of_agent as span, final_when_invalid_output(meter):
        # The agent runs for minutes: heartbeats carry a stop's cancellation to it.
        async with heartbeating():
            try:
                outcome = await run_agent_loop(
                    deps.models,
                    call,
                    agent.prompt,
                    workdir,
                    deps.settings.agent_max_turns,
                    verb,
                    deliverable,
                    graph_task=graph_task,
                    graph_base=graph_base,
                    gate=gate,
                    meter=meter,
                )
            except Exception:
                still_a_clone(workdir)
                raise
            still_a_clone(workdir)
        price(outcome.usage, call.model, deps.settings)
        record_usage(span, outcome.usage)
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


async def run_answering_agent(
    deps: StepDeps,
    role: Role,
    step: ModelStep,
    context: RoleContext,
    workdir: Path,
    verb: AgentStep,
    answer_type: type[Answer],
) -> AnsweredOutcome[Answer]:
    """A verifier's read-only agent over `workdir`, answering an `answer_type` through
    the forced answer tool; priced and traced as `run_agent`."""
    agent, call = for_role(deps, role, step, context)
    span_of_agent = model_span(deps.tracer, "agent", role, step, call.model)
    meter = step_meter(deps, step)
    with span_of_agent as span, final_when_invalid_output(meter):
        async with heartbeating():
            try:
                outcome = await answering_loop(
                    deps.models,
                    call,
                    agent.prompt,
                    workdir,
                    deps.settings.qa_max_turns,
                    verb,
                    answer_type,
                    meter,
                )
            except BudgetSpent as spent:
                price(spent.usage, call.model, deps.settings)
                raise budget_exhausted(spent) from spent
        price(outcome.usage, call.model, deps.settings)
        record_usage(span, outcome.usage)
        if span.is_recording():
            span.set_attributes({"loops.agent.turns": outcome.turns})
    return outcome
