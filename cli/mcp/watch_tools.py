"""The tools of `loops mcp` that read what the dashboard shows beyond a run's status
(docs/mcp.md): waiting for a run's next gate with progress notifications, a run's model
calls, a repository's playbook, and the graphs."""

from __future__ import annotations

import json
import time
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from loopworks.cli.client import ApiClient, CliError, run_path
from loopworks.cli.graphs import GraphApi
from loopworks.cli.mcp.facts import RUN_ID
from loopworks.cli.mcp.tools import Tools
from loopworks.cli.mcp.views import RunView, api_errors, run_view
from loopworks.cli.playbook import PlaybookApi
from loopworks.cli.resolve import resolve_run
from loopworks.schemas.run import RunState
from loopworks.schemas.trajectory import TrajectoryRecord, read_records

RunId = Annotated[str, Field(min_length=1, description=RUN_ID)]
# How often wait_for_run reads the run, and the most it waits in one call.
WAIT_POLL_SECONDS = 1.0
WAIT_MAX_SECONDS = 1800
# A trajectory line's texts are cut to this many characters in a tool's answer.
TRAJECTORY_TEXT_CHARS = 1500


class GraphRow(BaseModel):
    graph_id: str
    status: str = Field(description="Temporal's status of the graph's workflow: running, …")
    start_time: str | None
    started_by: str | None


class TrajectoryLine(BaseModel):
    n: int = Field(
        description="the line's place among the trajectory's records, from 1: the cursor"
    )
    step: str
    role: str | None
    iteration: int
    turn: int
    kind: str
    tool: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    text: str = Field(description="what was sent or answered, cut to 1500 characters")


class TrajectoryPage(BaseModel):
    run_id: str
    lines: list[TrajectoryLine]
    next_cursor: int
    more: bool


class PlaybookItemView(BaseModel):
    id: str
    kind: str
    section: str
    content: str
    helpful: int
    harmful: int
    files: list[str]


class PlaybookView(BaseModel):
    name: str
    origin: str
    version: int
    items: list[PlaybookItemView]


def _text(record: TrajectoryRecord) -> str:
    value = record.output if record.output else record.input
    text = value if isinstance(value, str) else json.dumps(value) if value is not None else ""
    return text[:TRAJECTORY_TEXT_CHARS]


def _line(n: int, record: TrajectoryRecord) -> TrajectoryLine:
    usage = record.usage
    return TrajectoryLine(
        n=n,
        step=record.step,
        role=record.role.value if record.role else None,
        iteration=record.iteration,
        turn=record.turn,
        kind=record.kind,
        tool=record.tool,
        model=record.model,
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        text=_text(record),
    )


def progress_of(state: RunState) -> str:
    """What a progress notification says of the run."""
    return (
        f"{state.status.value}: iteration {state.iteration}/{state.max_iterations}, phase "
        f"{state.phase.value}, step {state.current_step.value}, score {state.last_score:.2f}"
    )


def add_watch_tools(tools: Tools, client: ApiClient, read: ToolAnnotations) -> None:
    graphs = GraphApi(client)
    playbooks = PlaybookApi(client)

    @tools.tool(annotations=read)
    def list_graphs(
        limit: Annotated[int, Field(ge=1, le=500, description="At most this many graphs.")] = 20,
    ) -> list[GraphRow]:
        """The task graphs, newest first: graph_id (read one with graph_status), status,
        start_time, started_by."""
        with api_errors():
            return [
                GraphRow(
                    graph_id=row.graph_id,
                    status=row.status,
                    start_time=row.start_time,
                    started_by=row.started_by,
                )
                for row in graphs.listed(limit)
            ]

    @tools.tool(annotations=read)
    async def wait_for_run(
        run_id: RunId,
        ctx: Context,
        timeout_seconds: Annotated[
            int,
            Field(
                ge=1,
                le=WAIT_MAX_SECONDS,
                description="Answer after this many seconds at most, wherever the run is.",
            ),
        ] = 300,
    ) -> RunView:
        """Wait until the run needs a person or has ended, then answer its status as
        run_status does: it returns at the next gate (`approval`, `block`, `pause`), when
        the status has ended, or after timeout_seconds (the run still going: call again).
        While waiting it sends progress notifications (iteration of max_iterations, with
        status, phase, step and score), so there is no need to poll run_status."""
        with api_errors():
            resolved = await anyio.to_thread.run_sync(resolve_run, client, run_id)
        deadline = time.monotonic() + timeout_seconds
        said = ""
        while True:
            with api_errors():
                state = await anyio.to_thread.run_sync(client.run_state, resolved)
            view = run_view(state)
            now = progress_of(state)
            if now != said:
                said = now
                await ctx.report_progress(state.iteration, state.max_iterations, now)
            if view.gate is not None or state.status.is_terminal:
                return view
            if time.monotonic() >= deadline:
                return view
            await anyio.sleep(WAIT_POLL_SECONDS)

    @tools.tool(annotations=read)
    def run_trajectory(
        run_id: RunId,
        after: Annotated[
            int,
            Field(
                ge=0,
                description="The cursor: the `n` of the last line already read; 0 reads from "
                "the first. Pass the previous answer's next_cursor.",
            ),
        ] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many lines.")] = 50,
        step: Annotated[
            str | None,
            Field(
                description="Only this step's lines: hydrate, review, plan, produce, "
                "prepare, evaluate, audit, critique, refine, qa, reflect, curate, skill, "
                "skill_review, skill_curate."
            ),
        ] = None,
    ) -> TrajectoryPage:
        """Every model call the run made, as lines in the order the calls finished: each
        with its step, role, iteration, turn, kind (`system`: the role's instructions,
        `user`: the step's inputs, `assistant`: the model's answer, with its model and
        tokens, `tool_call`, `tool_result`, `retry`, `limit`: the turn limit stopped the
        agent, `blocked`: the custodiet blocked it during its work), the tool, and its text.
        next_cursor is the last line's n; `more` is true when more lines are there."""
        with api_errors():
            resolved = resolve_run(client, run_id)
            text = client.request("GET", run_path(resolved, "trajectory")).text
        # The route serves a repository's own file under .loops/trajectory/ too: only
        # the records are the run's model calls, and one line of another shape must not
        # cost the model the whole trajectory.
        records = read_records(text)
        kept = [
            (n, record)
            for n, record in enumerate(records, 1)
            if n > after and (step is None or record.step == step)
        ]
        page = [_line(n, record) for n, record in kept[:limit]]
        return TrajectoryPage(
            run_id=resolved,
            lines=page,
            next_cursor=page[-1].n if page else after,
            more=len(kept) > limit,
        )

    @tools.tool(annotations=read)
    def playbook(
        repo: Annotated[
            str,
            Field(
                min_length=1,
                description="The repository, as runs named it (its URL or absolute path; "
                "the service's own repository has the playbook whose origin ends in "
                "`origin.git`), or the playbook's name.",
            ),
        ],
    ) -> PlaybookView:
        """A repository's playbook: what earlier runs on it learnt, as items (id, kind:
        skill, constraint, reference or clarification, section, content, how often runs
        found it helpful or harmful, and the files a skill keeps with it), at its current
        version."""
        with api_errors():
            states = playbooks.listed()
            wanted = repo.rstrip("/")
            found = next(
                (s for s in states if s.name == repo or s.origin.rstrip("/") == wanted), None
            )
            if found is None:
                known = ", ".join(f"{s.name} ({s.origin})" for s in states) or "none yet"
                raise CliError(f"no playbook for {repo!r}; the playbooks: {known}")
            current = playbooks.playbook(found.name)
        items = [
            PlaybookItemView(
                id=item.id,
                kind=item.kind.value,
                section=item.section,
                content=item.content,
                helpful=item.helpful,
                harmful=item.harmful,
                files=item.files,
            )
            for item in current.items
        ]
        return PlaybookView(
            name=found.name, origin=found.origin, version=current.version, items=items
        )
