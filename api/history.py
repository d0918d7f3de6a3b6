"""A run's events: the workflow holds the latest (a bounded tail), git the whole log.

Events are numbered from 1 and never change, so any prefix is consistent: the API serves
what the workflow's tail has and reads what precedes it from the run's `history.jsonl`
in git (the branch for a finished run, the work ref for a live one).
"""

from __future__ import annotations

import asyncio

from loopworks.schemas.events import Event
from loopworks.schemas.run import RunState
from loopworks.schemas.steps import HISTORY_PATH
from loopworks.workspace.git import GitError, GitWorkspaces
from loopworks.workspace.refs import work_ref
from loopworks.workspace.run_log import parse_history


def has_gap(tail: list[Event], after: int) -> bool:
    """Whether events between `after` and the tail are missing from it."""
    return bool(tail) and tail[0].seq > after + 1


async def with_history(
    tail: list[Event], after: int, state: RunState, workspaces: GitWorkspaces, finished: bool
) -> list[Event]:
    """The events after `after`: those git holds before the tail, then the tail's."""
    fresh = [event for event in tail if event.seq > after]
    if not has_gap(fresh, after) or not state.origin:
        return fresh
    ref = f"refs/heads/{state.branch}" if finished else work_ref(state.run_id)
    try:
        text = await asyncio.to_thread(workspaces.read_file_at_ref, state.origin, ref, HISTORY_PATH)
    except GitError:
        text = None
    # The run's own events only: the history its base commit held is another's, appended to.
    older = [
        e
        for e in parse_history(text or "")
        if after < e.seq < fresh[0].seq and e.run_id == state.run_id
    ]
    return older + fresh
