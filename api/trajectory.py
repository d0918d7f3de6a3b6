"""A run's trajectory: the JSON lines its agents committed with their work (PRODUCE and
REFINE, `loop_type: task`; the skill sub-loop's generator, `loop_type: skill`)."""

from __future__ import annotations

import json

from loopworks.schemas.run import RunState
from loopworks.schemas.steps import TRAJECTORY_DIR
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.refs import work_ref


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


def latest_commit(workspaces: GitWorkspaces, state: RunState) -> str | None:
    """The run's latest work: its pushed branch, else its work ref while it runs (the skill
    sub-loop commits after the last artifact), else the last artifact's commit."""
    refs = [f"refs/heads/{state.branch}"] if state.branch else []
    for ref in [*refs, work_ref(state.run_id)]:
        if commit := workspaces.commit_at_ref(state.origin, ref):
            return commit
    return state.artifact_commit


def of_loop_type(text: str, loop_type: str | None) -> str:
    """Only the lines of one loop type; lines written before loop types were task lines."""
    if loop_type is None:
        return text
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and json.loads(line).get("loop_type", "task") == loop_type
    ]
    return "".join(f"{line}\n" for line in kept)
