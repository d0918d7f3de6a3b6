"""A run waits for its batch with the `applied` query; a server that turns a query away
because the workflow's query buffer is full (many runs finishing at once, seen in the
suite under load) is a "not yet", never a failed delivery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from temporalio.service import RPCError, RPCStatusCode

from loopworks.playbook.writer import wait_until_applied
from loopworks.schemas.playbook import AppliedBatch

pytestmark = pytest.mark.unit

APPLIED = AppliedBatch(batch_id="run-1:run", version=3, changed=True)
BUFFER_FULL = RPCError(
    "consistent query buffer is full, this may be caused by too many queries and "
    "workflow not able to process query fast enough",
    RPCStatusCode.RESOURCE_EXHAUSTED,
    b"",
)


class Answers:
    """The query's answers in turn: a value, or an error to raise."""

    def __init__(self, *answers: AppliedBatch | Exception | None) -> None:
        self._answers: Iterator[AppliedBatch | Exception | None] = iter(answers)
        self.asked = 0

    async def __call__(self) -> AppliedBatch | None:
        self.asked += 1
        answer = next(self._answers)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_a_full_query_buffer_is_asked_again() -> None:
    answers = Answers(BUFFER_FULL, None, BUFFER_FULL, APPLIED)
    assert await wait_until_applied(answers, 10, first_delay=0, max_delay=0) == APPLIED
    assert answers.asked == 4


TASK_RETRYING = RPCError(
    "Unable to query workflow due to Workflow Task in failed state.",
    RPCStatusCode.FAILED_PRECONDITION,
    b"",
)


async def test_a_workflow_task_waiting_for_its_retry_is_asked_again() -> None:
    """Seen in CI on a loaded machine: thirty runs delivering at once, and the playbook's
    workflow task timed out; its retry applied every batch, but one run had given up."""
    answers = Answers(TASK_RETRYING, TASK_RETRYING, APPLIED)
    assert await wait_until_applied(answers, 10, first_delay=0, max_delay=0) == APPLIED


async def test_any_other_error_fails_the_delivery() -> None:
    gone = RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
    with pytest.raises(RPCError, match="not found"):
        await wait_until_applied(Answers(None, gone), 10, first_delay=0, max_delay=0)


async def test_a_batch_never_applied_times_out() -> None:
    forever = Answers(*[BUFFER_FULL, None] * 50)
    with pytest.raises(TimeoutError):
        await wait_until_applied(forever, 0.05, first_delay=0.01, max_delay=0.01)
    assert forever.asked > 1
