"""Two checkouts' benchmarks side by side: this one and `--base`, started together.

    git worktree add ../loopworks-base <commit>
    (cd ../loopworks-base && python3 -m venv .venv && .venv/bin/pip install -e .)
    LOOPS_SANDBOX=off .venv/bin/python scripts/bench_pair.py --base ../loopworks-base \\
        --rounds 3 -- --runs 20 --concurrency 5 --long-iterations 0

A shared machine's speed drifts by a fifth within the hour, as much as most changes
worth measuring, so two commits benchmarked in turn compare two moments as much as two
commits. Run at once, each on its own dev server, both meet the same moments: the drift
falls on both. Each round prints both benchmarks' CPU figures and the change's over the
base's. Each side has half the machine, so its absolute figures are not one alone's: read
the ratios. Not a module of the package (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# The figures compared, as scripts/bench.py prints them: (its line's label, a short name).
FIGURES = [
    ("CPU/run", "CPU/run"),
    ("worker", "worker"),
    ("temporal server", "server"),
    ("floor CPU/run", "floor"),
]


def figures(printed: str) -> dict[str, float]:
    """The seconds each of FIGURES' lines shows in the bench's output."""
    found = {}
    for label, name in FIGURES:
        line = re.search(rf"^\s*{re.escape(label)}\s+([\d.]+) s", printed, re.MULTILINE)
        if line is not None:
            found[name] = float(line.group(1))
    return found


def bench(checkout: Path, python: Path, args: list[str]) -> dict[str, float]:
    """One benchmark of `checkout` with its interpreter; its figures."""
    done = subprocess.run(
        [str(python), str(checkout / "scripts" / "bench.py"), *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"the benchmark of {checkout} failed:\n{done.stderr[-2000:]}")
    return figures(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--base-python", type=Path, help="its interpreter (default: its .venv's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("bench_args", nargs="*", help="scripts/bench.py's, after --")
    args = parser.parse_args()
    base = args.base.resolve()
    python = args.base_python or base / ".venv" / "bin" / "python"
    if not python.exists():
        sys.exit(f"{base} has no .venv with its checkout installed (see --help)")
    names = [name for _, name in FIGURES]
    print(f"{'round':<6} {'side':<7} " + " ".join(f"{n:>8}" for n in names))
    for round_ in range(1, args.rounds + 1):
        with ThreadPoolExecutor(max_workers=2) as both:
            theirs = both.submit(bench, base, python, args.bench_args)
            ours = both.submit(bench, HERE, Path(sys.executable), args.bench_args)
            sides = {"base": theirs.result(), "change": ours.result()}
        for side, found in sides.items():
            shown = " ".join(f"{found.get(n, float('nan')):>8.2f}" for n in names)
            print(f"{round_:<6} {side:<7} {shown}")
        ratios = [
            sides["change"].get(n, float("nan")) / sides["base"][n] if sides["base"].get(n) else 0
            for n in names
        ]
        print(f"{round_:<6} {'ratio':<7} " + " ".join(f"{r:>8.2f}" for r in ratios))


if __name__ == "__main__":
    main()
