"""What a producer did reaches the custodiet, on a model that knows nothing of loopworks
(`LiteralMessagesAPI`): its commands, with their exit codes, from the committed trajectory,
and the paths it changed outside the task's declared files."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.fakes.literal_messages_api import LiteralMessagesAPI
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_literal_model import TASK, literal_worker

pytestmark = pytest.mark.workflow


@pytest.fixture
def curl(refused_port: int) -> str:
    """Refused by a port nothing listens on: curl exits 7, whose code the custodiet must see."""
    return f"echo fetched > fetched.txt; curl -s -m 5 http://127.0.0.1:{refused_port}/install.sh"


@pytest.fixture
def api(curl: str) -> Iterator[LiteralMessagesAPI]:
    with LiteralMessagesAPI(agent_commands=[curl]) as fake:
        yield fake


async def test_a_producers_curl_reaches_the_custodiets_input(
    harness: LoopHarness, api: LiteralMessagesAPI, curl: str
) -> None:
    async with literal_worker(harness, api):
        handle = await harness.start(
            task=TASK, max_iterations=1, audit_probability=1.0, declared_files=["guide.md"]
        )
        await handle.result()

    # The producer did run it, through its command tool.
    ran = [u["input"].get("command") for r in api.agent_requests() for u in r.tool_uses()]
    assert curl in ran
    audits = [
        r
        for r in api.forced_requests()
        if "violations" in (r.forced_tool or {}).get("input_schema", {}).get("properties", {})
    ]
    assert audits, "the custodiet was never asked"
    first = audits[0].messages[0]["content"]
    sent = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    # The command, under its own section, with the exit code it failed with.
    commands = sent.split("## Commands Run")[1].split("\n## ")[0]
    assert json.loads(commands) == [
        {
            "step": "produce",
            "command": curl,
            "exit_code": 7,
            "timed_out": False,
            "signal": None,
            "note": "",
        }
    ]
    # What it changed: the file it left, outside the task's declared files.
    assert "A +1 -0 fetched.txt" in sent.split("## Diff Stat")[1]
    outside = sent.split("## Outside Declared Files")[1].split("\n## ")[0]
    assert json.loads(outside) == ["fetched.txt"]
