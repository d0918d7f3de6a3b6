"""The run states behind a page of the run list: spend, budget and model are in a run's
state, not in visibility's search attributes, so each row's run is asked for it.

A page asks for its rows at once (a few at a time), each with a short deadline: a row
whose run does not answer in time shows without them rather than holding the page. A
finished run's state never changes again, so it is kept (a bounded number of them): a
page read again, or refreshed live, asks Temporal only about the runs still going. The
API keeps no state of its own; this is a cache of facts that cannot change.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence

from temporalio.client import Client
from temporalio.service import RPCError

from loopworks.api import run_handles
from loopworks.api.errors import ApiError
from loopworks.api.models import RunSummary
from loopworks.schemas.run import RunState
from loopworks.workflows.loop import LoopWorkflow

log = logging.getLogger("loopworks.api.dashboard")

ROW_DEADLINE_SECONDS = 3.0
AT_ONCE = 8


class RunStates:
    def __init__(self, keep: int = 5_000) -> None:
        self._keep = keep
        self._finished: OrderedDict[str, RunState] = OrderedDict()

    def kept(self, run_id: str) -> RunState | None:
        state = self._finished.get(run_id)
        if state is not None:
            self._finished.move_to_end(run_id)
        return state

    def remember(self, state: RunState) -> None:
        if not state.status.is_terminal:
            return
        self._finished[state.run_id] = state
        self._finished.move_to_end(state.run_id)
        while len(self._finished) > self._keep:
            self._finished.popitem(last=False)

    async def read(self, client: Client, run_id: str) -> RunState | None:
        """The run's state, or None when it does not answer in time."""
        if (state := self.kept(run_id)) is not None:
            return state
        handle = client.get_workflow_handle_for(LoopWorkflow.run, run_id)
        try:
            state = await asyncio.wait_for(run_handles.read_state(handle), ROW_DEADLINE_SECONDS)
        except (ApiError, RPCError, TimeoutError) as err:
            log.info("the run list shows %s without its state: %s", run_id, err)
            return None
        self.remember(state)
        return state

    async def read_all(
        self, client: Client, summaries: Sequence[RunSummary]
    ) -> list[RunState | None]:
        gate = asyncio.Semaphore(AT_ONCE)

        async def one(run_id: str) -> RunState | None:
            async with gate:
                return await self.read(client, run_id)

        return list(await asyncio.gather(*(one(summary.run_id) for summary in summaries)))
