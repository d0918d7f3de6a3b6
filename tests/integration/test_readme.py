"""The README's first run and first graph, and docs/graphs.md's worked example, as
written, against a live API, worker and dev server: the commands are read from the pages
themselves, so an edit that breaks one fails here. Only where the service is changes: the
API's address (`127.0.0.1:8000`), the data directory (`.loops-data`) and the venv
(`.venv/bin/`) are this test's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from loopworks.schemas.run import TERMINAL_STATUSES
from tests.integration.stack import ROOT, Stack

pytestmark = pytest.mark.integration

README = ROOT / "README.md"
GRAPHS = ROOT / "docs" / "graphs.md"
TERMINAL = {status.value for status in TERMINAL_STATUSES}


def command_blocks(section: str) -> list[str]:
    """The indented code blocks of a README section (`## <section>`), in order."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"## {section}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    blocks: list[list[str]] = []
    previous_indented = False
    for line in lines[start:end]:
        indented = line.startswith("    ")
        if indented and not previous_indented:
            blocks.append([])
        if indented:
            blocks[-1].append(line[4:])
        previous_indented = indented
    return ["\n".join(block) for block in blocks]


def fenced_block(page: Path, section: str) -> str:
    """The first fenced code block of a section of a docs page."""
    text = page.read_text(encoding="utf-8").split(f"\n## {section}\n", 1)[1]
    return text.split("```", 2)[1].split("\n", 1)[1]


class Shell:
    """Runs README commands with this test's service in place of the README's."""

    def __init__(self, stack: Stack, base_url: str) -> None:
        self.stack = stack
        self.base_url = base_url
        self.bin = Path(sys.executable).parent

    def local(self, script: str, **names: str) -> str:
        script = script.replace("http://127.0.0.1:8000", self.base_url)
        script = script.replace(".venv/bin/", f"{self.bin}/")
        script = script.replace(".loops-data", str(self.stack.data_dir))
        for name, value in names.items():
            script = script.replace(f"<{name}>", value)
        return script

    def run(self, script: str, timeout: float = 240.0, **names: str) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.local(script, **names)],
            cwd=ROOT,
            env=self.stack.env(LOOPS_API_URL=self.base_url),
            # No terminal, as in CI: at one, `loops new` would ask first and wait.
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        logs = "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.stack.processes)
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}\n{logs}"
        return done.stdout


def finished(base_url: str, run_id: str, timeout: float = 180.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state: dict[str, object] = httpx.get(f"{base_url}/runs/{run_id}", timeout=30).json()
        if state.get("status") in TERMINAL:
            return state
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish")


@pytest.fixture
def shell(stack: Stack) -> Shell:
    stack.start_worker()
    _, base_url = stack.start_api()
    return Shell(stack, base_url)


def test_the_first_run_goes_as_the_readme_says(shell: Shell) -> None:
    start, reads, cli, branch = command_blocks("A first run")
    run_id = json.loads(shell.run(start))["run_id"]
    state = finished(shell.base_url, run_id)
    assert state["status"] == "completed", state
    # Status, events and the artifact, printed one after the other.
    read = shell.run(reads, run_id=run_id)
    assert f'"run_id":"{run_id}"' in read
    assert '"event":"run_started"' in read
    assert "# Write a one-page guide to rate limiting" in read

    assert "Iteration 1/4" in shell.run(cli)

    log, shown = shell.run(branch, run_id=run_id).split("\n", 1)
    assert re.match(r"[0-9a-f]{7,} ", log), log
    assert "# Write a one-page guide to rate limiting" in shown


def test_the_first_graph_goes_as_the_readme_says(shell: Shell) -> None:
    (commands,) = command_blocks("A first graph")
    # `graph status --follow` exits 0 only once the graph completed.
    printed = shell.run(commands, timeout=420.0)
    assert re.search(r"T-001\s.*completed", printed), printed


def test_the_graph_example_in_the_docs_completes(shell: Shell) -> None:
    lines = fenced_block(GRAPHS, "A worked example").splitlines()
    reads = next(i for i, line in enumerate(lines) if line.startswith("curl -s http"))
    graph_id = json.loads(shell.run("\n".join(lines[:reads])))["graph_id"]
    deadline = time.monotonic() + 300
    state: dict[str, object] = {}
    while time.monotonic() < deadline and state.get("status") not in ("completed", "failed"):
        time.sleep(1)
        state = httpx.get(f"{shell.base_url}/graphs/{graph_id}", timeout=30).json()
    assert state.get("status") == "completed", state
    ledger = shell.run("\n".join(lines[reads:]), graph_id=graph_id)
    assert '"id": "T-003", "status": "completed"' in ledger, ledger
