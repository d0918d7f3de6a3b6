"""The API and a worker on the offline model start without loading the Anthropic SDK:
its thousands of modules cost a process seconds of CPU at every start (the API, each
worker, each test that starts one), and only a worker with a real model needs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

# A fresh interpreter: this test process has long since loaded the SDK.
SCRIPT = """
import json, sys
from pydantic_ai.exceptions import ModelAPIError
from temporalio.exceptions import ApplicationError

import loopworks.api.main
import loopworks.worker.__main__
from loopworks.llm.errors import MODEL_UNAVAILABLE, model_errors
from loopworks.schemas.roles import Role
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_models

models = build_models(Settings(LOOPS_LLM="offline"))
try:
    with model_errors(Role.PLANNER):
        raise ModelAPIError("offline", "the network went away")
except ApplicationError as err:
    error_type = err.type
print(json.dumps({
    "models": type(models).__name__,
    "anthropic": sorted(m for m in sys.modules if m.split(".")[0] == "anthropic")[:3],
    "error_type": error_type,
    "unavailable": MODEL_UNAVAILABLE,
}))
"""


def _run(script: str, tmp_path: Path) -> dict[str, object]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LOOPS_", "ANTHROPIC_"))
    }
    env["LOOPS_DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_api_and_an_offline_worker_never_import_the_anthropic_sdk(tmp_path: Path) -> None:
    result = _run(SCRIPT, tmp_path)
    assert result["models"] == "OfflineModels"
    assert result["anthropic"] == [], "the Anthropic SDK was imported without a real model"
    # Without the SDK no error of its kind exists; others still become retryable errors.
    assert result["error_type"] == result["unavailable"]


def test_a_worker_on_the_anthropic_model_loads_the_sdk(tmp_path: Path) -> None:
    script = """
import json, sys
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_models
models = build_models(Settings(LOOPS_LLM="anthropic", ANTHROPIC_API_KEY="sk-test"))
print(json.dumps({"models": type(models).__name__, "loaded": "anthropic" in sys.modules}))
"""
    assert _run(script, tmp_path) == {"models": "AnthropicModels", "loaded": True}
