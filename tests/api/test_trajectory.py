"""`GET /runs/{id}/trajectory` serves the run's `.loops/trajectory/*.jsonl` as it finds
them, a repository's own file there among them (docs/observability.md#the-trajectory):
the lines are served as they are, and `?loop_type=` keeps the records of that loop."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import CarryingHandle, FakeClient

pytestmark = pytest.mark.unit

RUN_ID = "fake-20250101-000000-abcdef"


def record(**fields: Any) -> str:
    line = {
        "run_id": RUN_ID,
        "step": "plan",
        "iteration": 1,
        "turn": 0,
        "kind": "user",
        "input": "plan it",
        "ts": "2025-01-01T00:00:00Z",
    }
    return json.dumps({**line, **fields})


# Lines a repository (or a command) may write under .loops/trajectory/ itself.
NOT_RECORDS = [
    "our own notes, not JSON",
    '["a list"]',
    '"a string"',
    json.dumps({"iteration": "two"}),
    record(role=7),
]


async def trajectory(carried: dict[str, str], **params: str) -> httpx.Response:
    fake = FakeClient()
    fake.handles[RUN_ID] = CarryingHandle(RUN_ID, carried=carried)
    app = create_app(Settings(), client=cast(Client, fake))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        return await http.get(f"/runs/{RUN_ID}/trajectory", params=params)


@pytest.mark.parametrize(
    "line", NOT_RECORDS, ids=["not JSON", "a list", "a string", "a field's type", "a role"]
)
async def test_a_line_that_is_not_a_record_is_left_out_of_one_loop_types_lines(
    line: str,
) -> None:
    """It has no loop type; one such line answered the filtered route 500."""
    task, skill = record(), record(step="skill", loop_type="skill", turn=1)
    carried = {"01-plan": f"{task}\n", "notes": f"{line}\n", "02-skill": f"{skill}\n"}

    task_only = await trajectory(carried, loop_type="task")
    skill_only = await trajectory(carried, loop_type="skill")
    everything = await trajectory(carried)

    assert task_only.status_code == 200, task_only.text
    assert task_only.text == f"{task}\n"
    assert skill_only.text == f"{skill}\n"
    # Unfiltered, every line is served as it is.
    assert everything.status_code == 200, everything.text
    assert sorted(everything.text.splitlines()) == sorted([task, line, skill])
