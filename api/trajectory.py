"""A run's trajectory: every model call's JSON lines (docs/observability.md#the-trajectory).

The agents' (PRODUCE, REFINE, QA, the skill generator) are committed with their work on the
run's branch. The single-shot calls' join them: a live run holds them for its next commit
(the workflow answers them to a query), and those too large to hold, or of a step that
failed, wait on refs of their own (workspace/call_records.py). Served as one text, a
file at a time in the order the calls finished (each file's first line's time),
`loop_type: task` and `loop_type: skill` alike. A task graph's own calls (its task
planner's) are recorded under the graph's id."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import Response

from loopworks.api.errors import ArtifactMissing, UpstreamError
from loopworks.schemas.graph import GraphState
from loopworks.schemas.run import RunState
from loopworks.schemas.steps import TRAJECTORY_DIR
from loopworks.schemas.trajectory import read_record
from loopworks.workspace.call_records import finished_later, record_finished
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.refs import work_ref
from loopworks.workspace.runner import GitError


def run_trajectory(
    workspaces: GitWorkspaces, state: RunState, carried: dict[str, str] | None = None
) -> str:
    """Every trajectory file of the run, agents' and single-shot calls', as one text: a
    call is there once, from its ref when it is still on one (its latest record), else
    from the branch a commit of the run's put it on; `carried`: the records the live run
    holds for its next commit (`LoopWorkflow.carried_calls`)."""
    texts: dict[str, str] = {}
    if state.origin:
        commit = latest_commit(workspaces, state)
        if commit:
            texts.update(read_trajectory(workspaces, state.origin, commit))
        for name, text in workspaces.call_records(state.origin, state.run_id).items():
            # A call both on its ref and committed: the later record (a failed attempt's
            # stays on its ref, and the retry's is committed).
            if name not in texts or finished_later(text, texts[name]):
                texts[name] = text
    texts.update(carried or {})
    return _joined(list(texts.values()))


def graph_trajectory(workspaces: GitWorkspaces, state: GraphState) -> str:
    """The task graph's own model calls (its task planner's), recorded under the graph's
    id; each task loop's are that run's."""
    if not state.origin:
        return ""
    return _joined(list(workspaces.call_records(state.origin, state.graph_id).values()))


def _joined(texts: list[str]) -> str:
    """The files as one text, in the order their calls finished."""
    ordered = sorted(
        (text if text.endswith("\n") else f"{text}\n" for text in texts if text),
        key=record_finished,
    )
    return "".join(ordered)


def read_trajectory(workspaces: GitWorkspaces, origin: str, commit: str) -> dict[str, str]:
    """Every `.loops/trajectory/*.jsonl` at `commit`, by its name inside that folder
    without the suffix (`01-produce`, `01-plan-001`: a call's, workspace/call_records.py)."""
    found: dict[str, str] = {}
    for path in workspaces.list_files(origin, commit, TRAJECTORY_DIR):
        if path.endswith(".jsonl"):
            name = path.removeprefix(f"{TRAJECTORY_DIR}/").removesuffix(".jsonl")
            found[name] = workspaces.read_file(origin, commit, path) or ""
    return found


def latest_commit(workspaces: GitWorkspaces, state: RunState) -> str | None:
    """The run's latest work: its pushed branch, else its work ref while it runs (the skill
    sub-loop commits after the last artifact), else the last artifact's commit."""
    refs = [f"refs/heads/{state.branch}"] if state.branch else []
    for ref in [*refs, work_ref(state.run_id)]:
        if commit := workspaces.commit_at_ref(state.origin, ref):
            return commit
    return state.artifact_commit


def of_loop_type(text: str, loop_type: str | None) -> str:
    """Only the lines of one loop type, as written; lines written before loop types were
    task lines. A line that is not a record (a repository's own file under
    .loops/trajectory/) has no loop type, and is left out."""
    if loop_type is None:
        return text
    kept = [
        line
        for line in text.splitlines()
        if (record := read_record(line)) is not None and record.loop_type == loop_type
    ]
    return "".join(f"{line}\n" for line in kept)


async def served(
    read: Callable[[], str], what: str, missing: str, loop_type: str | None
) -> Response:
    """A trajectory route's answer: what `read` finds (off the event loop: it reads git),
    kept to `loop_type`, as JSON lines; git failing is a 502 naming `what`, nothing
    found a 404 saying `missing`."""
    try:
        text = await asyncio.to_thread(read)
    except (GitError, ValueError) as err:
        raise UpstreamError(f"could not read the trajectory of {what}: {err}") from err
    if not text:
        raise ArtifactMissing(missing)
    return Response(of_loop_type(text, loop_type), media_type="application/x-ndjson")
