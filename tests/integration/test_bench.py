"""The benchmark the README quotes still runs and prints every figure it names: a script
nothing runs goes stale without anyone noticing. Its figures are not checked: they are
measurements, not targets (scripts/bench.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.integration.stack import ROOT

pytestmark = pytest.mark.integration

FIGURES = [
    "history events/run",
    "history size/run",
    "activities/run",
    "one run alone",
    "slowdown (median)",
    "CPU/run",
    "garbage collector",
    "temporal server",
    "floor CPU/run",
    "CPU/run vs floor",
    "server requests/run",
    "git processes/run",
    "git in-process/run",
    "model calls/run",
]

# Two runs, two at a time, no long run: every figure printed, in seconds.
SMALL_BENCH = ("--runs", "2", "--concurrency", "2", "--long-iterations", "0")


def run_script(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """What `scripts/<name> args` printed, once it ended well (its stderr if not)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_benchmark_runs_and_prints_its_figures() -> None:
    # As the README writes the command: the agent sandbox on, its default (as root, its
    # uid must reach the bench's workspaces).
    env = dict(os.environ)
    env.pop("LOOPS_SANDBOX", None)
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("LOOPS_WORKFLOW_SANDBOX", None)
    printed = run_script("bench.py", *SMALL_BENCH, env=env)
    for figure in FIGURES:
        assert re.search(rf"^\s*{re.escape(figure)}\s+\S", printed, re.MULTILINE), figure
    # A worker's default, as the bench measures it.
    assert re.search(r"^workflow sandbox\s+off$", printed, re.MULTILINE)
    # Two iterations a run, each with its activities: the history was read, not skipped.
    activities = re.search(r"^activities/run\s+([\d.]+)", printed, re.MULTILINE)
    assert activities is not None and float(activities.group(1)) > 10


def test_the_benchmark_runs_on_a_users_repository_too() -> None:
    env = {**os.environ, "LOOPS_SANDBOX": "off"}
    printed = run_script("bench.py", *SMALL_BENCH, "--origin", "repository", env=env)
    assert re.search(r"^runs' origin\s+a repository of the user's", printed, re.MULTILINE)
    # There, what a run records is pushed: its calls' records and its commits.
    pushes = re.search(r"^\s+by subcommand\s+.*\bpush ([\d.]+)", printed, re.MULTILINE)
    assert pushes is not None and float(pushes.group(1)) >= 2, printed


def test_two_checkouts_benchmarked_side_by_side_print_each_round() -> None:
    """scripts/bench_pair.py, this checkout against itself: both sides' figures and their
    ratio, each round."""
    env = {**os.environ, "LOOPS_SANDBOX": "off"}
    env.pop("ANTHROPIC_API_KEY", None)
    printed = run_script(
        "bench_pair.py",
        *("--base", str(ROOT), "--base-python", sys.executable, "--rounds", "1"),
        *("--", "--runs", "1", "--concurrency", "1", "--long-iterations", "0"),
        env=env,
    )
    rows = {line.split()[1]: line.split()[2:] for line in printed.splitlines()[1:]}
    assert set(rows) == {"base", "change", "ratio"}
    assert all(len(figures) == 4 for figures in rows.values())
    assert all(float(x) > 0 for x in rows["base"] + rows["change"] + rows["ratio"])


def test_the_dashboard_benchmark_runs_and_prints_each_pages_time() -> None:
    printed = run_script("bench_dashboard.py", "--runs", "30", "--tasks", "8", "--repeat", "1")
    assert re.search(r"^runs\s+30 \(1 driven to its end, 29 copies", printed, re.MULTILINE)
    for page in ("runs page (30 runs)", "a run's page", "graph page (8 tasks)"):
        line = rf"^\s+{re.escape(page)}\s+\d+ ms\s+\d+ ms\s+\d+ KiB$"
        assert re.search(line, printed, re.MULTILINE), (page, printed)
