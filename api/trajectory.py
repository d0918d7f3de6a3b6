"""A run's trajectory: the JSON lines its PRODUCE and REFINE agents committed with their work."""

from __future__ import annotations

from loopworks.schemas.steps import TRAJECTORY_DIR
from loopworks.workspace.git import GitWorkspaces


def read_trajectory(workspaces: GitWorkspaces, origin: str, commit: str) -> str:
    """Every `.loops/trajectory/*.jsonl` at `commit`, by file name (so by iteration, then
    produce before refine), as one JSON-lines text; empty when there is none."""
    parts = []
    for path in workspaces.list_files(origin, commit, TRAJECTORY_DIR):
        if not path.endswith(".jsonl"):
            continue
        text = workspaces.read_file(origin, commit, path) or ""
        if text and not text.endswith("\n"):
            text += "\n"
        parts.append(text)
    return "".join(parts)
