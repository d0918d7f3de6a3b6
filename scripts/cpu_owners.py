"""Who spends the worker's CPU: a py-spy profile's samples, each given to its owner.

    LOOPS_SANDBOX=off .venv/bin/py-spy record --gil --rate 250 --format raw -o cpu.txt -- \\
        .venv/bin/python scripts/bench.py --runs 20 --concurrency 5 --long-iterations 0
    .venv/bin/python scripts/cpu_owners.py cpu.txt

`--gil` samples only the thread holding the GIL: Python's CPU, not a thread waiting in a
system call (py-spy's default counts those as busy). A sample belongs to the innermost
frame of a library or of loopworks: the standard library and pydantic do work for whoever
called them (`dataclasses.replace` inside pydantic-ai is pydantic-ai's cost). Samples of
the benchmark's own set-up and of the floor's workflow are left out; what is left whose
innermost such frame is the benchmark's is the event loop scheduling the others' tasks.
Not a module of the package: docs/benchmarks.md quotes what it prints.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

import loopworks

# Frames that work for their caller: the standard library (and Python's own `<frozen ...>`
# and `<string>` frames), pydantic, and what pydantic-ai and Temporal's SDK call into.
SERVING = {
    "asyncio",
    "selectors.py",
    "threading.py",
    "concurrent",
    "contextlib.py",
    "dataclasses.py",
    "copy.py",
    "json",
    "typing.py",
    "typing_extensions.py",
    "functools.py",
    "enum.py",
    "abc.py",
    "weakref.py",
    "_weakrefset.py",
    "inspect.py",
    "re",
    "pathlib.py",
    "posixpath.py",
    "subprocess.py",
    "queue.py",
    "uuid.py",
    "logging",
    "collections",
    "traceback.py",
    "linecache.py",
    "tempfile.py",
    "shutil.py",
    "base64.py",
    "hashlib.py",
    "datetime.py",
    "random.py",
    "types.py",
    "socket.py",
    "signal.py",
    "codecs.py",
    "heapq.py",
    "bisect.py",
    "operator.py",
    "pydantic",
    "pydantic_core",
    "sniffio",
    "opentelemetry",
    "google",
    "protobuf",
}
# loopworks' top-level packages, as frames name their files.
OURS = {path.name for root in loopworks.__path__ for path in Path(root).iterdir() if path.is_dir()}
# pydantic-ai runs its graph's nodes as anyio tasks on pydantic-graph.
ALIASES = {"anyio": "pydantic_ai", "pydantic_graph": "pydantic_ai", "bench.py": "event loop"}
LEFT_OUT = ("bench_floor", "FloorWorkflow", "floor_step", "_find_and_load", "MachineSpeed")


def package(frame: str) -> str:
    """`pydantic_ai` of `AgentRun.next (pydantic_ai/run.py:12)`."""
    found = re.search(r"\(([^)]*)\)\s*$", frame)
    where = re.sub(r":\d+$", "", found.group(1) if found else frame)
    return where.split("/")[0]


def owner(frames: list[str]) -> str:
    for frame in reversed(frames):
        name = package(frame)
        if name and name not in SERVING and not name.startswith("<"):
            return "loopworks" if name in OURS else ALIASES.get(name, name)
    return "event loop"


def owners(lines: list[str]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or any(part in stack for part in LEFT_OUT):
            continue
        frames = stack.split(";")
        # The worker's own work: what its event loop and its thread pools ran.
        if any("Handle._run" in f or "_WorkItem.run" in f for f in frames):
            counted[owner(frames)] += int(count)
    return counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="py-spy's raw output (--format raw)")
    counted = owners(parser.parse_args().profile.read_text().splitlines())
    total = counted.total()
    print(f"samples              {total}")
    for name, count in counted.most_common(8):
        print(f"{name:<20} {100 * count / total:5.1f}%")


if __name__ == "__main__":
    main()
