"""The worker refuses to start on a malformed agent definition (naming the file), on bad
configuration, and on a machine where it cannot sandbox commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopworks.prompts.catalog import load_agents
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps
from tests.integration.stack import ROOT

pytestmark = pytest.mark.unit


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
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOPS_"))}
    done = subprocess.run(
        [sys.executable, "-m", "loopworks.worker"],
        cwd=ROOT,
        env={**base, "LOOPS_DATA_DIR": str(tmp_path), "TEMPORAL_ADDRESS": "127.0.0.1:9", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot start" in done.stderr and message in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker's sandbox user is refused")
def test_a_worker_that_cannot_sandbox_refuses_to_start_saying_what_to_do(
    tmp_path: Path,
) -> None:
    """pytest's tmp_path sits below a 0700 directory: the sandbox's unprivileged user
    cannot reach workspaces there, so no command could run sandboxed."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOPS_"))}
    env = {**base, "LOOPS_DATA_DIR": str(tmp_path / "data"), "TEMPORAL_ADDRESS": "127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-m", "loopworks.worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "no usable sandbox" in done.stderr
    assert "bubblewrap" in done.stderr and "LOOPS_SANDBOX=off" in done.stderr
    # Opting out starts it (it then fails to connect: nothing listens on port 9).
    opted_out = subprocess.run(
        [sys.executable, "-m", "loopworks.worker"],
        cwd=ROOT,
        env={**env, "LOOPS_SANDBOX": "off"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "no usable sandbox" not in opted_out.stderr
    assert "run unsandboxed" in opted_out.stderr
