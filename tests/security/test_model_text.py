"""A model's answer that carries a secret (a prompt-injected model repeating what it was
shown) leaves its activity redacted: the events and the workflow history keep none of it.
Whatever the activity, its result passes the worker's redacting interceptor."""

from __future__ import annotations

import pytest

from loopworks.checks.redaction import REDACTED
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.events import EventName
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from tests.workflows.conftest import LoopHarness

pytestmark = pytest.mark.workflow

KEY = "sk-ant-api03-" + "m4" * 24
URL_TOKEN = "glpat-" + "Kq8" * 8
CRITIQUE = {
    "issues": [
        {
            "rule_id": "never",
            "problem": f"the guide leaves out the key {KEY}",
            "fix": f"clone https://ci:{URL_TOKEN}@git.example.com/team/app.git and add it",
        }
    ]
}


async def test_a_models_answer_reaches_events_and_history_redacted(harness: LoopHarness) -> None:
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_LLM="offline",
        ANTHROPIC_API_KEY=KEY,
    )
    models = OfflineModels(
        script=OfflineScript.model_validate({"artifact-critic": {"*": CRITIQUE}})
    )
    rule = {
        "id": "never",
        "description": "never passes",
        "check": {"kind": "pattern", "pattern": "XYZZY"},
    }
    async with build_worker(harness.env.client, settings, models=models):
        handle = await harness.start(task="Write a guide", rules=[rule], max_iterations=2)
        await handle.result()
        events = await harness.events(handle)
        history = await handle.fetch_history()

    critiques = [e for e in events if e.event == EventName.CRITIQUE_DONE]
    assert critiques, [e.event for e in events]
    shown = critiques[0].payload.model_dump_json()
    # The critique's text is in the event, its secrets are not.
    assert f"the guide leaves out the key {REDACTED}" in shown
    assert "https://***@git.example.com/team/app.git" in shown
    everything = "".join(e.model_dump_json() for e in events)
    recorded = b"".join(e.SerializeToString() for e in history.events)
    for secret in (KEY, URL_TOKEN):
        assert secret not in everything
        assert secret.encode() not in recorded
