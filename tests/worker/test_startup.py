"""The worker refuses to start on a malformed agent definition (naming the file), on bad
configuration, and on a machine where it cannot sandbox commands; the API and an
offline worker start without importing the Anthropic SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loopworks.checks.redaction import worker_secrets
from loopworks.prompts.catalog import load_agents
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps
from loopworks.workspace.git_version import git_refusal
from tests.integration.stack import ROOT

pytestmark = pytest.mark.unit


def clean_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """This environment without loopworks' settings, plus `env`: the data under tmp_path,
    no Temporal listening, and the offline model chosen as an operator chooses it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOPS_"))}
    base |= {
        "LOOPS_DATA_DIR": str(tmp_path / "data"),
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
        "LOOPS_LLM": "offline",
    }
    return base | env


def python(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python args` as a fresh process in `clean_env`."""
    return run_python(args, clean_env(tmp_path, **env))


def run_python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_malformed_override_stops_the_worker_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "critic.md").write_text("---\nname: critic\ndescription: Reviews plans.\n---\n")
    env = {
        **os.environ,
        "LOOPS_AGENTS_DIR": str(tmp_path),
        "LOOPS_DATA_DIR": str(tmp_path / "data"),
        "LOOPS_LLM": "offline",
        # Nothing listens here: the worker must stop before it tries to connect.
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "loopworks.worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "critic.md" in done.stderr and "markdown body (the prompt)" in done.stderr


def test_override_replaces_a_packaged_agent_by_name(tmp_path: Path) -> None:
    (tmp_path / "critic.md").write_text(
        "---\nname: critic\ntitle: Strict critic\ndescription: Reviews plans.\nmodel: opus\n---\n"
        "\nSay HALT often.\n"
    )
    deps = build_deps(Settings(LOOPS_AGENTS_DIR=tmp_path, LOOPS_DATA_DIR=tmp_path / "d"))
    assert deps.agents["critic"].prompt.strip() == "Say HALT often."
    assert deps.agents["planner"] == load_agents()["planner"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LOOPS_LLM": "anthropic"}, "ANTHROPIC_API_KEY"),
        ({"LOOPS_API_PORT": "not-a-port"}, "LOOPS_API_PORT"),
        ({"LOOPS_LLM": "gpt"}, "LOOPS_LLM"),
    ],
)
def test_bad_configuration_stops_the_worker_with_a_message(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    done = python(["-m", "loopworks.worker"], tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert "cannot start" in done.stderr and message in done.stderr


def test_a_worker_given_neither_a_key_nor_a_model_refuses_to_start(tmp_path: Path) -> None:
    """No silent offline model: outside `loops up`, a worker that was not told which model
    to run says which settings choose one, before it tries to reach Temporal."""
    env = clean_env(tmp_path)
    del env["LOOPS_LLM"]
    done = run_python(["-m", "loopworks.worker"], env)
    assert done.returncode == 2, done.stderr
    (said,) = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert "cannot start: no model chosen" in said
    assert "LOOPS_LLM=offline" in said and "ANTHROPIC_API_KEY" in said
    assert "cannot reach Temporal" not in done.stderr
    # A key alone chooses Anthropic; LOOPS_LLM=offline alone, the offline model.
    assert Settings(ANTHROPIC_API_KEY="sk-test", LOOPS_LLM=None).llm == "anthropic"
    assert Settings(LOOPS_LLM="offline").llm == "offline"


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker's sandbox user is refused")
def test_a_worker_that_cannot_sandbox_refuses_to_start_saying_what_to_do(
    tmp_path: Path,
) -> None:
    """pytest's tmp_path sits below a 0700 directory: the sandbox's unprivileged user
    cannot reach workspaces there, so no command could run sandboxed."""
    done = python(["-m", "loopworks.worker"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "no usable sandbox" in done.stderr
    assert "bubblewrap" in done.stderr and "LOOPS_SANDBOX=off" in done.stderr
    # Opting out starts it: it goes on to wait for Temporal (nothing listens on port 9).
    said = started_until(
        ["-m", "loopworks.worker"], tmp_path, "cannot reach Temporal", LOOPS_SANDBOX="off"
    )
    assert "no usable sandbox" not in said
    assert "run unsandboxed" in said


def started_until(args: list[str], tmp_path: Path, text: str, **env: str) -> str:
    """Start `python args` as `python` runs it, read its stderr until `text`, then stop
    it (SIGTERM): what it said by then. It must end by itself, with exit code 0."""
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=clean_env(tmp_path, **env),
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if text in line:
                break
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=60)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    said = "".join(lines) + rest
    assert text in said and process.returncode == 0, said
    return said


# The API and a worker on the offline model start without loading the Anthropic SDK: its
# thousands of modules cost a process seconds of CPU at every start (the API, each
# worker, each test that starts one), and only a worker with a real model needs it.
# Asked of a fresh interpreter: this test process has long since loaded the SDK.
NO_SDK_SCRIPT = """
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


def _answer(script: str, tmp_path: Path) -> dict[str, object]:
    done = python(["-c", script], tmp_path)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_the_api_and_an_offline_worker_never_import_the_anthropic_sdk(tmp_path: Path) -> None:
    answer = _answer(NO_SDK_SCRIPT, tmp_path)
    assert answer["models"] == "OfflineModels"
    assert answer["anthropic"] == [], "the Anthropic SDK was imported without a real model"
    # Without the SDK no error of its kind exists; others still become retryable errors.
    assert answer["error_type"] == answer["unavailable"]


def test_a_worker_on_the_anthropic_model_loads_the_sdk(tmp_path: Path) -> None:
    script = """
import json, sys
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_models
models = build_models(Settings(LOOPS_LLM="anthropic", ANTHROPIC_API_KEY="sk-test"))
print(json.dumps({"models": type(models).__name__, "loaded": "anthropic" in sys.modules}))
"""
    assert _answer(script, tmp_path) == {"models": "AnthropicModels", "loaded": True}


def test_building_the_activities_container_changes_nothing_global(tmp_path: Path) -> None:
    """Tests build several containers in one process: the worker's secrets are remembered
    as the worker is built (build_worker), never as a side effect of building what its
    activities use. tests/security/test_model_text.py checks that a built worker redacts."""
    token = "container-token-7f3a9c2e51"
    build_deps(Settings(LOOPS_DATA_DIR=tmp_path, LOOPS_API_TOKENS=f"ops:{token}"))
    assert token not in worker_secrets()


@pytest.mark.parametrize("module", ["loopworks.worker", "loopworks.api"])
def test_a_git_without_negative_refspecs_stops_the_service_at_start(
    tmp_path: Path, module: str
) -> None:
    """Caches fetch with a negative refspec (git 2.29): an older git would fail every read
    through a cache, long after a start that looked fine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old_git = bin_dir / "git"
    old_git.write_text("#!/bin/sh\necho 'git version 2.20.1'\n")
    old_git.chmod(0o755)
    env = clean_env(tmp_path, LOOPS_SANDBOX="off")
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = run_python(["-m", module], env)
    assert done.returncode == 2, done.stderr
    assert "cannot start: git 2.20 is too old: loopworks needs git >= 2.29" in done.stderr


def test_this_machines_git_serves() -> None:
    assert git_refusal() is None
    assert "git cannot be run" in (git_refusal("/nonexistent/git") or "")
