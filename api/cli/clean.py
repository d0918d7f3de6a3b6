"""`loops clean`: remove a finished run's local workspace clones, after confirmation.

A run's clones are `$LOOPS_DATA_DIR/workspaces/<run_id>` and `<run_id>.<slot>` (see
`GitWorkspaces.workdir`). Its result is not among them: that is the pushed branch
`loops/<run_id>` on its origin, which clean leaves alone.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TextIO

from loopworks.api.cli.client import CliError

# The alphabet the workspace accepts for run ids: anything else cannot name a clone of
# ours, and must never be joined onto a path we delete.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def workspace_paths(root: Path, run_id: str) -> list[Path]:
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise CliError(f"{run_id!r} is not a run id")
    if not root.is_dir():
        return []
    return sorted(
        path for path in root.iterdir() if path.name == run_id or path.name.startswith(f"{run_id}.")
    )


def size_of(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def confirm(question: str, stdin: TextIO | None, out: TextIO) -> bool:
    """A y/N question; with nobody at a terminal to answer it, refuse rather than guess."""
    if stdin is None or not stdin.isatty():
        raise CliError(
            "refusing to delete without confirmation: stdin is not a terminal (pass --yes)"
        )
    out.write(f"{question} [y/N] ")
    out.flush()
    answer = stdin.readline()  # "" at end of input: no
    return answer.strip().lower() in ("y", "yes")


def remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
