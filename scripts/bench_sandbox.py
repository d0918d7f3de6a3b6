"""Benchmark: what the sandbox adds to one command.

    .venv/bin/python scripts/bench_sandbox.py [--runs 50]

Runs `true` N times through `run_sandboxed` (bubblewrap, and as root the workspace's chown
to the sandbox uid and back) and N times as the unsandboxed runner did (`bash -c` in a new
session with a scrubbed environment), and prints the mean and median wall time of each.
Figures only, no pass/fail.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loopworks.checks.sandbox import SandboxPolicy, find_bwrap, probe, run_sandboxed


def _time(runs: int, once: Callable[[], object]) -> list[float]:
    once()  # warm up: imports, page cache, bwrap's version probe
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        once()
        timings.append(time.perf_counter() - started)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--command", default="true")
    args = parser.parse_args()

    policy = SandboxPolicy()
    mode = probe(policy)
    print(f"bwrap: {find_bwrap()} ({mode.version}); works: {mode.works} {mode.reason}")
    workdir = Path(tempfile.mkdtemp(prefix="loopworks-bench-sandbox-"))
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8"}
        plain = _time(
            args.runs,
            lambda: subprocess.run(
                ["bash", "-c", args.command],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                start_new_session=True,
                check=False,
            ),
        )
        sandboxed = _time(args.runs, lambda: run_sandboxed(args.command, workdir, 30, policy))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"{args.runs} runs of {args.command!r}:")
    for name, timings in (("unsandboxed", plain), ("sandboxed", sandboxed)):
        print(
            f"  {name:<12} mean {statistics.mean(timings) * 1000:7.2f} ms"
            f"   median {statistics.median(timings) * 1000:7.2f} ms"
            f"   max {max(timings) * 1000:7.2f} ms"
        )
    extra = statistics.mean(sandboxed) - statistics.mean(plain)
    print(f"  sandbox cost per command: {extra * 1000:.2f} ms (mean)")


if __name__ == "__main__":
    main()
