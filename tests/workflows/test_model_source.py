"""Every run names the model that answers it, in its state and in its first model step's
event: a run on the offline model's canned answers cannot pass for a real one."""

from __future__ import annotations

from typing import Any

import pytest

from loopworks.schemas.events import EventName, HydrationDone
from loopworks.schemas.run import RunStatus
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow


@pytest.mark.parametrize(
    ("script", "source"),
    [
        (None, "offline"),
        ({"critic": {"*": {"delay_ms": 1}}}, "offline (scripted)"),
    ],
)
async def test_a_runs_state_and_events_name_its_model_source(
    harness: LoopHarness, script: dict[str, Any] | None, source: str
) -> None:
    async with harness.worker(script):
        handle = await harness.start(task="Write a short guide")
        state = (await handle.result()).state
        events = await harness.events(handle)
    assert state.status == RunStatus.COMPLETED
    assert state.model_source == source
    hydrated = [e for e in events if e.event == EventName.HYDRATION_DONE]
    assert hydrated, [e.event for e in events]
    assert all(isinstance(e, HydrationDone) and e.payload.model_source == source for e in hydrated)
