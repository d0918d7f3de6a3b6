"""A whole run with `LOOPS_LLM=anthropic`, every process real, on a model that knows
nothing of loopworks.

The worker and the API are the processes `./scripts/up.sh` starts; the worker's model is
the real anthropic SDK talking HTTP to `LiteralMessagesAPI`, which answers only from the
prompts, step inputs and tool schemas it is sent. A run that goes from `POST /runs` to a
pushed branch shows that the prompts alone carry what the loop needs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from loopworks.schemas.run import TERMINAL_STATUSES
from tests.fakes.literal_messages_api import LiteralMessagesAPI
from tests.integration.stack import Stack, git

pytestmark = pytest.mark.integration

TASK = "Write a one-page guide to rate limiting an HTTP API"
TERMINAL = {status.value for status in TERMINAL_STATUSES}


@pytest.fixture
def api() -> Iterator[LiteralMessagesAPI]:
    with LiteralMessagesAPI() as fake:
        yield fake


def test_a_literal_model_takes_a_run_from_post_to_a_pushed_branch(
    stack: Stack, api: LiteralMessagesAPI
) -> None:
    model_env = {
        "LOOPS_LLM": "anthropic",
        "ANTHROPIC_API_KEY": "not-checked",
        "ANTHROPIC_BASE_URL": api.base_url,
    }
    worker = stack.start_worker(**model_env)
    _, base = stack.start_api(**model_env)
    with httpx.Client(base_url=base, timeout=30) as http:
        created = http.post(
            "/runs", json={"task": TASK, "max_iterations": 2, "audit_probability": 1.0}
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        deadline = time.monotonic() + 120
        # A status query the worker does not answer in time is a 503 to retry (seen once
        # under load in CI); the run's outcome is what this test is about.
        while (answer := http.get(f"/runs/{run_id}")).status_code != 200 or (
            answer.json()["status"] not in TERMINAL
        ):
            assert time.monotonic() < deadline, f"still {answer.text}\n{worker.output()}"
            time.sleep(0.5)
        state = answer.json()
        events = http.get(f"/runs/{run_id}/events").json()

    names = [e["event"] for e in events]
    assert "phase_error" not in names, worker.output()[-3000:]
    assert names[-1] == "pushed"
    origin = stack.data_dir / "origin.git"
    artifact = git("--git-dir", str(origin), "show", f"loops/{run_id}:artifact.md")
    assert TASK in artifact
    # No step fell back to anything else: every model call the run counted reached the
    # stand-in, the producer's among them.
    assert state["usage"]["calls"] == len(api.requests) > 0
    assert any("PRODUCE" in r.system_text for r in api.agent_requests())
