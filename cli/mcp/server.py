"""`loops mcp`: the loopworks API as Model Context Protocol tools (docs/mcp.md).

A client of the API like every other `loops` command: the same `ApiClient`, base URL and
token. Each tool is one or two API calls; its answer is a compact view (`views`) and
an API error comes back as a tool error carrying the API's own message. The descriptions
are the whole contract a model gets, so every fact a caller needs (id formats, modes,
templates, what a cursor and a gate are) is stated in them; tests/unit/test_mcp_contracts.py
checks that they do.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from loopworks.api.models import ARTIFACT_COMMIT_HEADER, RUN_STATUS_HEADER
from loopworks.cli.client import ApiClient, run_path
from loopworks.cli.mcp.facts import (
    ALLOW_UNVERIFIED,
    BUDGETS,
    INSTRUCTIONS,
    ITERATIONS,
    MAX_ARTIFACT_CHARS,
    MODES,
    NOTE,
    RUN_ID,
    RUN_STATUS_TOOL,
    RUN_STATUSES,
    SERVER_NAME,
    TEMPLATES,
    VERIFY,
    BaseBranch,
    Repo,
    Template,
    notify_description,
)
from loopworks.cli.mcp.graph_tools import add_graph_tools
from loopworks.cli.mcp.tools import Tools
from loopworks.cli.mcp.views import (
    ArtifactView,
    EventsPage,
    RunRow,
    RunView,
    api_errors,
    events_page,
    run_row,
    run_view,
)
from loopworks.cli.mcp.watch_tools import add_watch_tools
from loopworks.cli.resolve import resolve_run
from loopworks.schemas.notify import NotifyRequest
from loopworks.schemas.rules import Rule
from loopworks.schemas.run import Budget, Mode, RunStatus, Thresholds

RunId = Annotated[str, Field(min_length=1, description=RUN_ID)]


def build_server(client: ApiClient) -> MCPServer:
    """The MCP server, its tools calling the API through `client`."""
    tools = Tools()
    read = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    change = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
    ending = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)

    @tools.tool(annotations=read)
    def list_runs(
        limit: Annotated[int, Field(ge=1, le=500, description="At most this many runs.")] = 20,
        status: Annotated[
            RunStatus | None, Field(description=f"Only runs with this status. {RUN_STATUSES}")
        ] = None,
    ) -> list[RunRow]:
        """The most recent runs, newest first: run_id, alias, status, gate, iteration,
        last_score, started_at, started_by. Task loops of graphs are listed too."""
        with api_errors():
            return [run_row(row) for row in client.list_runs(limit=limit, status=status)]

    @tools.tool(annotations=change)
    def start_run(
        task: Annotated[
            str, Field(min_length=1, max_length=20_000, description="What the run should produce.")
        ],
        repo: Repo = None,
        base_branch: BaseBranch = None,
        mode: Annotated[
            Mode, Field(description=MODES.format(kind="run", tool="approve_run"))
        ] = Mode.AUTO,
        max_iterations: Annotated[
            int | None, Field(ge=1, le=20, description=ITERATIONS["run"])
        ] = None,
        audit_probability: Annotated[
            float,
            Field(
                ge=0,
                le=1,
                description="The chance, each iteration, that the custodiet (the auditor) "
                "audits the work and may block it.",
            ),
        ] = 0.2,
        template: Annotated[
            Template | None,
            Field(
                description="The workflow template: one of "
                f"{', '.join(f'`{name}`' for name in TEMPLATES)}. Omitted: chosen from the task."
            ),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(
                max_length=255,
                description="Any unique string: calling start_run again with the same key "
                "and the same arguments returns the same run instead of starting another.",
            ),
        ] = None,
        notify: Annotated[
            NotifyRequest | None, Field(description=notify_description("run"))
        ] = None,
        budget: Annotated[Budget | None, Field(description=BUDGETS["run"])] = None,
        verify: Annotated[list[str] | None, Field(description=VERIFY)] = None,
        allow_unverified: Annotated[bool, Field(description=ALLOW_UNVERIFIED)] = False,
    ) -> RunView:
        """Start a run (one reflex loop) on a task; answers its run_id and status. The run
        works for minutes on its own: read run_status until `gate` is set or the status has
        ended. In `interactive` mode it first waits at gate `approval` for approve_run."""
        body: dict[str, Any] = {
            "task": task,
            "mode": mode.value,
            "audit_probability": audit_probability,
        }
        optional = {
            "repo": repo,
            "base_branch": base_branch,
            "template": template,
            "max_iterations": max_iterations,
        }
        body.update({name: value for name, value in optional.items() if value is not None})
        if notify is not None:
            body["notify"] = notify.model_dump(mode="json")
        if budget is not None:
            body["budget"] = budget.model_dump(mode="json", exclude_none=True)
        if verify is not None:
            body["verify"] = verify
        if allow_unverified:
            body["allow_unverified"] = True
        with api_errors():
            created = client.create_run(body, idempotency_key)
            return run_view(client.run_state(created.run_id))

    @tools.tool(annotations=read, description=RUN_STATUS_TOOL)
    def run_status(run_id: RunId) -> RunView:
        with api_errors():
            return run_view(client.run_state(resolve_run(client, run_id)))

    @tools.tool(annotations=read)
    def run_events(
        run_id: RunId,
        after: Annotated[
            int,
            Field(
                ge=0,
                description="The cursor: the `seq` of the last event already read; 0 reads "
                "from the first. Pass the previous answer's next_cursor to read only what "
                "is new.",
            ),
        ] = 0,
        limit: Annotated[int, Field(ge=1, le=500, description="At most this many events.")] = 50,
    ) -> EventsPage:
        """A run's events after a cursor, in order. Every event has `seq` (1, 2, 3, … in
        the run's history), `ts`, `event` (its name: run_started, hydration_done,
        critic_verdict, evaluation_done, audit_verdict, blocked, block_cleared, approved,
        paused, resumed, stopped, failed, pushed, …), iteration, phase, step and a `payload`.
        The answer's next_cursor is the last seq returned; `more` is true when more events
        are already there."""
        with api_errors():
            run_id = resolve_run(client, run_id)
            return events_page(run_id, client.events(run_id, after=after), after, limit)

    @tools.tool(annotations=read)
    def run_artifact(run_id: RunId) -> ArtifactView:
        """The run's artifact (markdown): the final one once the run has ended, else its
        latest draft (`final` false). Long artifacts are cut (`truncated`)."""
        with api_errors():
            run_id = resolve_run(client, run_id)
            response = client.text_response(run_path(run_id, "artifact"))
        status = response.headers.get(RUN_STATUS_HEADER, "")
        text = response.text
        return ArtifactView(
            run_id=run_id,
            run_status=status,
            final=status in {s.value for s in RunStatus if s.is_terminal},
            commit=response.headers.get(ARTIFACT_COMMIT_HEADER) or None,
            markdown=text[:MAX_ARTIFACT_CHARS],
            truncated=len(text) > MAX_ARTIFACT_CHARS,
        )

    @tools.tool(annotations=change)
    def approve_run(
        run_id: RunId,
        max_iterations: Annotated[
            int | None, Field(ge=1, le=20, description="A new iteration limit.")
        ] = None,
        rules: Annotated[
            list[Rule] | None,
            Field(
                description="The edited rules, replacing the drafted ones (read them in the "
                "run's `hydration_done` event with run_events). Omitted: the drafted rules."
            ),
        ] = None,
        thresholds: Annotated[
            Thresholds | None,
            Field(description="Pass marks (0-1] for phase A and B. Omitted: unchanged."),
        ] = None,
        note: Annotated[str | None, Field(max_length=2000, description=NOTE)] = None,
        verify: Annotated[
            list[str] | None,
            Field(
                description="The run's proof commands, replacing the drafted ones (`proof` "
                "in run_status); `[]`: nothing proves it. Omitted: unchanged."
            ),
        ] = None,
        allow_unverified: Annotated[
            bool | None, Field(description=ALLOW_UNVERIFIED + " Omitted: unchanged.")
        ] = None,
    ) -> RunView:
        """Approve a run waiting at gate `approval` (status `awaiting_approval`, interactive
        mode), optionally with edits; the run then starts iteration 1. Any other status is
        refused (HTTP 409)."""
        body: dict[str, Any] = {}
        if verify is not None:
            body["verify"] = verify
        if allow_unverified is not None:
            body["allow_unverified"] = allow_unverified
        if max_iterations is not None:
            body["max_iterations"] = max_iterations
        if rules is not None:
            body["rules"] = [rule.model_dump(mode="json") for rule in rules]
        if thresholds is not None:
            body["thresholds"] = thresholds.model_dump(mode="json")
        if note:
            body["note"] = note
        with api_errors():
            return run_view(client.message(resolve_run(client, run_id), "approve", body))

    @tools.tool(annotations=change)
    def clear_block(
        run_id: RunId,
        note: Annotated[str, Field(min_length=1, max_length=5000, description=NOTE)],
    ) -> RunView:
        """Release a run waiting at gate `block` (status `blocked`: the custodiet, the
        auditor that watches the work, found a problem; its reason is run_status's
        `message`). The note reaches the run's next model step. Refused (HTTP 409) when the
        run is not blocked."""
        with api_errors():
            resolved = resolve_run(client, run_id)
            return run_view(client.message(resolved, "clear-block", {"note": note}))

    @tools.tool(annotations=change)
    def pause_run(run_id: RunId) -> RunView:
        """Pause a live run: its current step finishes, then it waits at gate `pause`
        (status `paused`) until resume_run."""
        with api_errors():
            return run_view(client.message(resolve_run(client, run_id), "pause"))

    @tools.tool(annotations=change)
    def resume_run(run_id: RunId) -> RunView:
        """Resume a run waiting at gate `pause`. Refused (HTTP 409) when it is not paused."""
        with api_errors():
            return run_view(client.message(resolve_run(client, run_id), "resume"))

    @tools.tool(annotations=ending)
    def stop_run(
        run_id: RunId,
        reason: Annotated[
            str | None, Field(max_length=2000, description="Recorded as the stop message.")
        ] = None,
    ) -> RunView:
        """Stop a live run for good: in-flight work is cancelled, then the run still
        reflects and pushes what it has, and ends `stopped` (stop_reason `user_stop`).
        Refused (HTTP 409) when it has already ended."""
        body = {"reason": reason} if reason else {}
        with api_errors():
            return run_view(client.message(resolve_run(client, run_id), "stop", body))

    add_graph_tools(tools, client, read, change, ending)
    add_watch_tools(tools, client, read)
    return MCPServer(
        SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING", tools=tools.registered
    )


def serve(client: ApiClient, http_port: int | None) -> None:
    """Serve on stdin/stdout, or with `http_port` as streamable HTTP on 127.0.0.1 only:
    whoever reaches it acts with the user's API token."""
    server = build_server(client)
    if http_port is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=http_port)
