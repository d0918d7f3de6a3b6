"""An `llm` check of a code task is judged on the change, not only on the artifact: the
evaluator is given the run's diff (stat and capped patch) beside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.literal_messages_api import LiteralMessagesAPI, RecordedRequest
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_literal_model import TASK, literal_worker

pytestmark = pytest.mark.workflow

WRITE_CODE = "printf 'def parse(text):\\n    return text.split()\\n' > parse.py"
JUDGED = [
    {
        "id": "handles-empty",
        "description": "parse handles empty input",
        "severity": "info",
        "check": {"kind": "llm", "question": "Does parse handle empty input?"},
    }
]


@pytest.fixture
def api() -> Iterator[LiteralMessagesAPI]:
    with LiteralMessagesAPI(agent_commands=[WRITE_CODE]) as fake:
        yield fake


def user_text(request: RecordedRequest) -> str:
    content = request.messages[0]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


async def test_a_judge_of_a_code_task_is_given_the_diff(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1, rules=JUDGED)
        await handle.result()

    judged = [r for r in api.forced_requests() if "You are an evaluator" in r.system_text]
    assert judged, "no judge was asked"
    sent = user_text(judged[0])
    stat = sent.split("## Diff Stat")[1].split("\n## ")[0]
    assert "A +2 -0 parse.py" in stat and "artifact.md" not in stat
    patch = sent.split("## Patch")[1].split("\n## ")[0]
    assert "+def parse(text):" in patch and "+    return text.split()" in patch


async def test_a_judge_of_a_document_task_is_given_no_diff(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    api.agent_commands = []
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1, rules=JUDGED)
        await handle.result()

    judged = [r for r in api.forced_requests() if "You are an evaluator" in r.system_text]
    assert judged and all("## Patch\n+" not in user_text(r) for r in judged)
    assert all("parse.py" not in user_text(r) for r in judged)
