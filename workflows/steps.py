"""The step adapter: how the loop runs an activity, and a model step under its policy.

Every model step has one shape: mark the run's current step, pass the gate, run the activity
with the fields every model call carries (`ModelStep`), turn "invalid output twice" into a
phase error (docs/loop.md#invalid-answers), count the answer's usage and repairs, and emit
the step's typed event. `StepRunner.model_step` is that shape, once. Used from inside the
workflow only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from loopworks.schemas.events import EventName, Payload, PhaseErrorPayload
    from loopworks.schemas.roles import Role
    from loopworks.schemas.run import Allowance, Budget, Step, StopReason, TokenUsage
    from loopworks.schemas.steps import (
        BUDGET_EXHAUSTED,
        INVALID_OUTPUT,
        STEP_OF_ROLE,
        ModelOutput,
        ModelStep,
        call_name,
    )
    from loopworks.workflows import allowances
    from loopworks.workflows.policies import StepPolicy, start
    from loopworks.workflows.record import RunRecord
    from loopworks.workflows.steering import Finished, Steering, Stopped

T = TypeVar("T")
Output = TypeVar("Output", bound=ModelOutput)

# What the run holds of its calls' records at most before its steps stop handing them back:
# each commit's input and a continue-as-new carry them all, under Temporal's 2 MB a payload.
HELD_CALLS_CAP = 512 << 10

# What a model step announces once its answer is in: an event, or nothing.
Announce = Callable[[Output], tuple[EventName, Payload] | None]


class InvalidOutput(Exception):
    pass


class StepRunner:
    def __init__(self, record: RunRecord, steering: Steering, budget: Budget | None) -> None:
        self.record = record
        self.steering = steering
        self.budget = budget
        # The allowances of the model steps in flight, held back from the steps that start
        # beside them (workflows/allowances.py); none is held across continue-as-new.
        self.held: dict[int, Allowance] = {}
        self._holds = 0

    def left(self, share: float = 1.0) -> Allowance | None:
        """What a model step starting now may spend (docs/loop.md#budgets)."""
        usage = self.record.state.usage
        return allowances.allowance(self.budget, usage, self.held.values(), share)

    def fields(self, role: Role) -> dict[str, Any]:
        """The `ModelStep` fields of the role's next call; counting it here, in the
        workflow, makes an activity retry repeat the call and a new step make a new one."""
        memory = self.record.memory
        memory.calls[role] = memory.calls.get(role, 0) + 1
        step = STEP_OF_ROLE.get(role)
        if step is not None:
            # A single-shot call: its record is on a ref the close looks up by this name.
            name = call_name(memory.state.iteration, step, memory.calls[role])
            memory.recorded_calls.append(name)
        return {
            "run_id": memory.state.run_id,
            "iteration": memory.state.iteration,
            "phase": memory.state.phase,
            "call_index": memory.calls[role],
            "operator_note": self.steering.take_note(),
            "origin": memory.state.origin or None,
        }

    def carries(self) -> bool:
        """Whether the next model step hands its single-shot calls' records back in its
        answer (`add_output`) for the run's next commit (docs/observability.md#the-trajectory):
        while the run holds less than HELD_CALLS_CAP of them; past it, they go to their
        refs until a commit has taken what is held."""
        held = self.record.memory.carried_calls.values()
        return sum(len(text.encode()) for text in held) < HELD_CALLS_CAP

    async def model_step(
        self,
        step: Step,
        role: Role,
        method: Callable[[Any, Any], Awaitable[Output]],
        build: Callable[[dict[str, Any]], ModelStep],
        policy: StepPolicy,
        summary: str,
        announce: Announce[Output] | None = None,
        *,
        set_step: bool = True,
        gated: bool = True,
        share: float = 1.0,
    ) -> Output:
        """Run one model step: `build` turns the call's fields into the activity's input.
        `share`: how much of what is left of the budget it may spend, when steps that start
        after it run beside it."""
        if set_step:
            self.record.set_step(step)
        allowance = self.left(share)
        self._holds += 1
        hold = self._holds
        if allowance is not None:
            self.held[hold] = allowance
        try:
            fields = {**self.fields(role), "allowance": allowance, "carry_calls": self.carries()}
            output = await self.activity(method, build(fields), policy, summary, gated=gated)
        except InvalidOutput as err:
            # The repair inside the step was the one retry: this is the second miss.
            payload = PhaseErrorPayload(step=step.value, error=str(err))
            self.record.emit(EventName.PHASE_ERROR, payload, status="error")
            raise Finished(
                StopReason.PHASE_ERROR, f"{step.value} produced invalid output twice"
            ) from err
        finally:
            # Its usage is counted below, or was with its failure: its hold goes.
            self.held.pop(hold, None)
        self.record.add_output(output)
        event = announce(output) if announce else None
        if event is not None:
            self.record.emit(*event)
        return output

    async def activity(
        self,
        method: Callable[..., Awaitable[T]],
        arg: Any,
        policy: StepPolicy,
        summary: str,
        gated: bool = True,
        local: bool = False,
    ) -> T:
        """Run one activity, unless the run is stopping; a stop cancels it mid-flight.
        `local`: as a local activity (`policies.start`)."""
        if gated:
            await self.steering.gate(self.budget)
        # Wait for the activity to acknowledge a cancel: close then reuses its workspace.
        cancellation = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        handle = start(method, arg, policy, summary, cancellation=cancellation, local=local)
        inflight = self.steering.inflight
        inflight.add(handle)
        try:
            return await _settled(handle, method, local)
        except (ActivityError, asyncio.CancelledError) as err:
            if gated and self.steering.stop_requested:
                raise Stopped() from err
            cause = getattr(err, "cause", None)
            if isinstance(cause, ApplicationError) and cause.type == INVALID_OUTPUT:
                # What the step's requests spent before it gave up counts, as a budget's end.
                self.record.add_usage(spent_by(cause))
                raise InvalidOutput(cause.message) from err
            if isinstance(cause, ApplicationError) and cause.type == BUDGET_EXHAUSTED:
                # A call the budget refused or cut: what the step spent first still counts.
                self.record.add_usage(spent_by(cause))
                raise Finished(StopReason.BUDGET_EXHAUSTED, cause.message) from err
            raise
        finally:
            inflight.discard(handle)


def spent_by(failure: BaseException | None) -> TokenUsage:
    """What a model step that failed had spent: an invalid answer's, or a budget's end,
    carry it in their failure's details (an activity's error, or its cause); any other
    failure, nothing known."""
    cause = failure.cause if isinstance(failure, (ActivityError, ChildWorkflowError)) else failure
    details = cause.details if isinstance(cause, ApplicationError) else ()
    if details and isinstance(details[0], dict):
        return TokenUsage.model_validate(details[0])
    return TokenUsage()


async def _settled(handle: Awaitable[T], method: Callable[..., Any], local: bool) -> T:
    """The activity's result, or its failure as an ActivityError, local or not.

    A local activity's last failure reaches the workflow as the error the activity raised
    (or its timeout or cancellation), not wrapped as a normal activity's is: wrapped here,
    a step that cannot be done fails the run that says why, like any other step's, instead
    of failing the workflow with the run's state left `running`."""
    try:
        return await handle
    except FailureError as err:
        if not local or isinstance(err, ActivityError):
            raise
        name = getattr(method, "__name__", "local activity")
        raise ActivityError(
            f"local activity {name} failed",
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type=name,
            activity_id="",
            retry_state=None,
        ) from err


async def gather_all(*awaitables: Awaitable[Any]) -> list[Any]:
    """Like gather, but every branch finishes before an error propagates, so a stop never
    leaves a sibling activity running behind the workflow's back."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for priority in (Stopped, Finished, BaseException):
        for result in results:
            if isinstance(result, priority):
                raise result
    return list(results)


def describe(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError | CancelledError):
        return cause.message
    return str(cause or err)
