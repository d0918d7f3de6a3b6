"""What an activity hands Temporal, redacted: its result and its failure; and what a
workflow hands its clients: its result and its answers to queries and updates.

An activity's result becomes workflow history, and from there the run's state, its events
(`history.jsonl`, committed and served) and the API's answers; a failure's message does the
same (a step's error in an event, `loops show`). A model's summary, a check's detail, git's
message naming an origin with a token: each passes here on its way out, so no activity
can forget. The redaction is `loopworks.checks.redaction`'s, of the worker's secrets and
URL credentials.

A workflow's state also holds what clients wrote (a run's task, a stop reason), and a
client may paste one of the worker's secrets there, which the API, not holding the
worker's model key, cannot recognise. So every answer a workflow gives (the `status` and
`events` queries, an update's result, the workflow's result, which the API reads once it
has completed) leaves the worker redacted too. The state itself is left as it is: what
the workflow decides never depends on whether a worker held a secret.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError, FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from loopworks.checks.redaction import redact, redacted, worker_secrets


class RedactingInterceptor(Interceptor):
    """The worker interceptor that redacts every activity's result and failure, and every
    workflow's result and answers."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RedactingActivity(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        # Asked once, as the worker is built (after it remembered its settings' secrets):
        # the secrets travel with the class, so workflow code never reads the environment.
        secrets = worker_secrets()
        return type("RedactingWorkflow", (_RedactingWorkflow,), {"secrets": secrets})


class _RedactingActivity(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            result = await self.next.execute_activity(input)
        except Exception as exc:
            failure = redacted_failure(exc, worker_secrets())
            if failure is exc:
                raise
        else:
            return redacted(result)
        # Raised outside the handler: the original, unredacted, is not its context.
        raise failure


class _RedactingWorkflow(WorkflowInboundInterceptor):
    secrets: frozenset[str] = frozenset()

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return redacted(await self.next.execute_workflow(input), self.secrets)

    async def handle_query(self, input: HandleQueryInput) -> Any:
        return redacted(await self.next.handle_query(input), self.secrets)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        return redacted(await self.next.handle_update_handler(input), self.secrets)


def redacted_failure(exc: Exception, secrets: frozenset[str]) -> Exception:
    """`exc` when nothing in it or its causes needs redacting; else an ApplicationError
    that Temporal records just as it would `exc` (same type name, flags, traceback), with
    the message of each exception in the chain redacted.

    Temporal's own failures other than ApplicationError (cancellation, timeouts) are left
    as they are: their messages are Temporal's.
    """
    if not _needs_redacting(exc, secrets):
        return exc
    clean = _rebuilt(exc, secrets)
    assert isinstance(clean, Exception)  # an Exception is rebuilt as one
    return clean


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the causes Temporal records with it (`__cause__`, else `__context__`)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = _cause(current)
    return chain


def _message(exc: BaseException) -> str:
    return exc.message if isinstance(exc, FailureError) else str(exc)


def _needs_redacting(exc: BaseException, secrets: frozenset[str]) -> bool:
    for link in _chain(exc):
        if isinstance(link, FailureError) and not isinstance(link, ApplicationError):
            continue
        message = _message(link)
        if redact(message, secrets) != message:
            return True
        if isinstance(link, ApplicationError) and redacted(link.details, secrets) != link.details:
            return True
    return False


def _rebuilt(exc: BaseException, secrets: frozenset[str]) -> BaseException:
    if isinstance(exc, ApplicationError):
        clean = ApplicationError(
            redact(exc.message, secrets),
            *redacted(exc.details, secrets),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            category=exc.category,
        )
    elif isinstance(exc, FailureError) or not isinstance(exc, Exception):
        return exc
    else:
        # What Temporal makes of any other exception: its class name as the type.
        clean = ApplicationError(redact(str(exc), secrets), type=type(exc).__name__)
    clean.__traceback__ = exc.__traceback__
    cause = _cause(exc)
    if cause is not None:
        clean.__cause__ = _rebuilt(cause, secrets)  # which suppresses its context too
    else:
        clean.__suppress_context__ = True
    return clean


def _cause(exc: BaseException) -> BaseException | None:
    """The cause Temporal records with `exc`: `__cause__`, else an unsuppressed context."""
    return exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
