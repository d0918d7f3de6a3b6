"""Failures no retry can mend, wherever in a step they are raised: any step may clone
(a worker's clones are its cache, any step may find its run's gone), so this is one
interceptor around every activity rather than a guard in each."""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from loopworks.schemas.steps import CLONE_TOO_LARGE
from loopworks.workspace.runner import CloneTooLargeError


class PermanentFailures(Interceptor):
    """Fails a step at once, saying why, when its origin is over the clone size cap."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Activities(next)


class _Activities(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except CloneTooLargeError as err:
            raise ApplicationError(str(err), type=CLONE_TOO_LARGE, non_retryable=True) from err
