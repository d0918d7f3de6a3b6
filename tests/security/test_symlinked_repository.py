"""A run on a repository whose `artifact.md` and `.loops/` records are symlinks out of it:
to a secret-bearing file, and to a file the run would overwrite. The worker reads and
writes those paths in its own process; nothing may leak and nothing outside may change.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo

from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from tests.workflows.conftest import (  # noqa: F401 - the workflow tests' fixtures
    LoopHarness,
    commit_all,
    harness,
    inside_the_workflow_sandbox,
)

pytestmark = pytest.mark.workflow

SECRET = "SECRET-canary-5d1e0b7a"


class RecordingModels(OfflineModels):
    """The offline model, keeping everything each request sent it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    async def respond(
        self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        self.sent.append(json.dumps(call.context) + repr(messages))
        return await super().respond(call, messages, info)


def git_out(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def everything_in(repo: Path) -> str:
    """Every commit's patch on every ref of `repo`: what a run pushed there."""
    return git_out(repo, "log", "--all", "-p", "--no-textconv", "--format=%H %s%n%b")


async def test_a_repository_of_symlinks_leaks_nothing(
    harness: LoopHarness,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret, bystander = outside / "secret.env", outside / "bashrc"
    secret.write_text(f"API_KEY={SECRET}\n")
    bystander.write_text("# a file the worker must never write\n")
    repo = tmp_path / "project"
    (repo / ".loops").mkdir(parents=True)
    (repo / "README.md").write_text("# a project\n")
    (repo / "artifact.md").symlink_to(secret)
    (repo / ".loops" / "history.jsonl").symlink_to(secret)
    (repo / ".loops" / "run.json").symlink_to(bystander)
    commit_all(repo)
    before = {path: path.read_bytes() for path in (secret, bystander)}

    models = RecordingModels()
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_WORKFLOW_SANDBOX=True,
    )
    async with build_worker(harness.env.client, settings, models=models):
        handle = await harness.start(task="Improve the artifact", repo=str(repo), max_iterations=1)
        result = await handle.result()
    events: list[Any] = [e.model_dump(mode="json") for e in result.log]
    state = result.state

    # Nothing outside the repository changed, and no secret went anywhere.
    assert {path: path.read_bytes() for path in (secret, bystander)} == before
    assert models.sent, "the run asked its model nothing"
    assert not [sent for sent in models.sent if SECRET in sent]
    assert SECRET not in json.dumps(events) + state.model_dump_json()
    assert SECRET not in everything_in(repo)
    assert SECRET not in "".join(
        p.read_text(errors="replace") for p in harness.data_dir.rglob("*.json") if p.is_file()
    )
    # The step that met the link failed, saying which path and why; it was not retried.
    assert state.status == RunStatus.FAILED
    failures = [e for e in events if e["event"] == "failed"]
    assert any("artifact.md" in str(e["payload"]) for e in failures), failures
    assert any("link out of the workspace" in str(e["payload"]) for e in failures), failures
    produced = [name for name in await harness.activities_run(handle) if name == "produce_artifact"]
    assert produced == ["produce_artifact"]
