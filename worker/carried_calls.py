"""Each activity runs with a `CarriedCalls` of its own (activities/model_calls.py): the
single-shot calls it makes for a step that carries them leave in its result, or, when the
activity fails or its result cannot hold them, on their refs as any record does.

Outermost of the worker's interceptors: the records were redacted as they were written
(`agent.trajectory.to_jsonl`), so they join the result after its redaction, not scanned
again (worker/redacting.py).
"""

from __future__ import annotations

from typing import Any

from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from loopworks.activities.model_calls import CARRIED, CarriedCalls
from loopworks.workspace.call_records import CallRecords


class CarriedCallsInterceptor(Interceptor):
    def __init__(self, workspaces: CallRecords) -> None:
        self.workspaces = workspaces

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CarryingActivity(next, self.workspaces)


class _CarryingActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, workspaces: CallRecords) -> None:
        super().__init__(next)
        self.workspaces = workspaces

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        carried = CarriedCalls(self.workspaces)
        token = CARRIED.set(carried)
        try:
            result = await self.next.execute_activity(input)
        except BaseException:
            await carried.failed()
            raise
        finally:
            CARRIED.reset(token)
        return await carried.handed_back(result)
