"""A blocked run shows the custodiet's write-up: `loops status` prints it under the
block's note, and `GET /runs/{id}` serves it in the run's block state."""

from __future__ import annotations

from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.cli.render import status_notes
from loopworks.schemas.actions import BLOCKED_PATH
from loopworks.schemas.run import BlockInfo, RunState, RunStatus
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient, FakeHandle, run_state

pytestmark = pytest.mark.unit

RUN = "fake-20250101-000000-abcdef"
REPORT = "# Blocked by the custodiet at iteration 1\n\nran curl\n\n## Violations\n\n- curl\n"


def blocked(run_id: str) -> RunState:
    block = BlockInfo(blocked=True, reason="ran curl", count=1, report=REPORT, path=BLOCKED_PATH)
    return run_state(run_id).model_copy(
        update={"status": RunStatus.BLOCKED, "blocked": True, "block": block}
    )


def test_loops_status_shows_where_the_write_up_is_and_the_write_up() -> None:
    notes = status_notes(blocked(RUN))
    assert notes[0] == f"blocked: ran curl (release with: loops clear-block {RUN} --note '...')"
    assert notes[1] == f"the state of the work: {BLOCKED_PATH} on the run's work ref"
    assert notes[2:] == ["", *REPORT.rstrip().splitlines()]


def test_loops_status_says_which_tool_call_a_block_during_the_work_refused() -> None:
    state = blocked(RUN)
    during = state.block.model_copy(update={"during": "produce", "refused": "run_command: curl x"})
    notes = status_notes(state.model_copy(update={"block": during}))
    assert notes[1] == "blocked during produce, refusing run_command: curl x"
    assert notes[2] == f"the state of the work: {BLOCKED_PATH} on the run's work ref"


class BlockedHandle(FakeHandle):
    async def query(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query.__name__ == "status":
            return blocked(self.id)
        return await super().query(query, *args, **kwargs)


async def test_get_run_serves_the_write_up() -> None:
    fake = FakeClient()
    fake.handles[RUN] = BlockedHandle(RUN)
    app = create_app(Settings(), client=cast(Client, fake))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        response = await http.get(f"/runs/{RUN}")
    assert response.status_code == 200, response.text
    block = response.json()["block"]
    assert block["report"] == REPORT and block["path"] == BLOCKED_PATH
