"""A model that runs `ln -sf /proc/self/environ artifact.md` through its command tool.

The command itself is harmless where it runs (the guard and the sandbox allow it): the
danger is the worker's own process reading `artifact.md` afterwards, its own environment
then going into the next prompt and the trajectory that is committed, pushed and served.
Every process is real: the worker (with a recognisable secret in its environment), the API
over HTTP, the dev server, and the literal stand-in model, scripted to run that command.
Whatever LOOPS_SANDBOX the machine gives, the worker's own reads must hold without it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from loopworks.schemas.run import TERMINAL_STATUSES
from tests.fakes.literal_messages_api import LiteralMessagesAPI
from tests.integration.conftest import dev_server, stack  # noqa: F401 - the fixtures
from tests.integration.stack import Stack, git

pytestmark = pytest.mark.integration

TERMINAL = {status.value for status in TERMINAL_STATUSES}
LINK = "ln -sf /proc/self/environ artifact.md"
# A rule the first draft fails, so that the loop goes on to a step that reads the artifact.
RULES = [
    {
        "id": "has-tests",
        "description": "a Tests section",
        "severity": "fail",
        "check": {"kind": "pattern", "pattern": "^## Tests"},
    }
]


@pytest.fixture
def api() -> Iterator[LiteralMessagesAPI]:
    with LiteralMessagesAPI(agent_commands=[LINK]) as fake:
        yield fake


def test_a_link_to_the_workers_environment_leaks_nothing(
    stack: Stack,  # noqa: F811 - the fixture imported above
    api: LiteralMessagesAPI,
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    key = f"sk-ant-canary-{uuid.uuid4().hex}"
    model_env = {
        "LOOPS_LLM": "anthropic",
        "ANTHROPIC_API_KEY": key,
        "ANTHROPIC_BASE_URL": api.base_url,
    }
    # A variable no redaction knows of: only not reading it keeps it in.
    worker = stack.start_worker(**model_env, PROJECT_DEPLOY_NOTE=canary)
    _, base = stack.start_api(**model_env)
    with httpx.Client(base_url=base, timeout=30) as http:
        created = http.post(
            "/runs",
            json={
                "task": "Write a guide to the release process",
                "rules": RULES,
                "max_iterations": 2,
                "audit_probability": 0,
            },
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        deadline = time.monotonic() + 120
        while (answer := http.get(f"/runs/{run_id}")).status_code != 200 or (
            answer.json()["status"] not in TERMINAL
        ):
            assert time.monotonic() < deadline, f"still {answer.text}\n{worker.output()}"
            time.sleep(0.5)
        state = answer.json()
        events = http.get(f"/runs/{run_id}/events")
        trajectory = http.get(f"/runs/{run_id}/trajectory")
        artifact = http.get(f"/runs/{run_id}/artifact")

    # The model did run the command: the stand-in asked for it and got its result.
    ran = [u for r in api.agent_requests() for u in r.tool_uses() if u["input"].get("command")]
    assert any(u["input"]["command"] == LINK for u in ran)

    secrets = (canary, key)
    sent = [json.dumps(r.body) for r in api.requests]
    assert not [body for body in sent if any(s in body for s in secrets)], "a prompt leaked"
    served = events.text + trajectory.text + artifact.text + json.dumps(state)
    assert not [s for s in secrets if s in served]
    origin = stack.data_dir / "origin.git"
    pushed = git("--git-dir", str(origin), "log", "--all", "-p", "--format=%H %s%n%b")
    assert not [s for s in secrets if s in pushed]

    # The step that met the link failed, saying which path and why.
    assert state["status"] == "failed", state
    failed = [e for e in events.json() if e["event"] == "failed"]
    assert any("artifact.md" in json.dumps(e["payload"]) for e in failed), events.text
    assert any("out of the workspace" in json.dumps(e["payload"]) for e in failed), events.text
