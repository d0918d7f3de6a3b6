"""`/ui/runs`: the run list, a run's page and its trajectory (docs/dashboard.md).

Each page reads what the JSON routes read (visibility, the run's state and events, git)
through the same functions. `?part=live` answers the parts of a page that change while a
run goes on, for the script to swap in: the list's rows, or a run's sections.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from loopworks.api import listing, run_handles
from loopworks.api.dashboard import markdown, render, run_view
from loopworks.api.dashboard.access import UiCaller
from loopworks.api.dashboard.states import RunStates
from loopworks.api.deps import ClientDep, RunHandle, SettingsDep, WorkspacesDep
from loopworks.api.trajectory import run_trajectory
from loopworks.schemas.detail import RELEASES, Gate
from loopworks.schemas.events import ArtifactCreated, Event, EventName
from loopworks.schemas.run import RunState, RunStatus, TokenUsage
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.workspace.changes import FileChange
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.runner import GitError

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)

PAGE_SIZE = 25
# What the script listens for on a run's stream: every event's name, and the end.
STREAM_EVENTS = ",".join([*(name.value for name in EventName), "end"])
# A diff past this many files or characters shows its first files (the rest are named).
DIFF_FILES = 60
DIFF_CHARS = 400_000


def run_states(request: Request) -> RunStates:
    states: RunStates = request.app.state.ui_run_states
    return states


def _status(value: str | None) -> RunStatus | None:
    try:
        return RunStatus(value) if value else None
    except ValueError:
        return None


def _alias(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if value and re.fullmatch(listing.ALIAS_PATTERN, value) else None


@router.get("/runs")
async def runs_page(
    request: Request,
    caller: UiCaller,
    client: ClientDep,
    status: str | None = None,
    alias: str | None = None,
    before: datetime | None = None,
    part: str | None = None,
) -> HTMLResponse:
    """The newest runs, PAGE_SIZE a page: `before` pages on, `status` and `alias` filter."""
    chosen, named = _status(status), _alias(alias)
    problems = []
    if status and chosen is None:
        problems.append(f"{status!r} is not a run status")
    if alias and named is None:
        problems.append(f"{alias!r} is not an alias (lowercase words joined by '-')")
    summaries = (
        [] if problems else await listing.list_runs(client, PAGE_SIZE, chosen, named, before)
    )
    states = await run_states(request).read_all(client, summaries)
    rows = list(zip(summaries, states, strict=True))
    context = {
        "rows": rows,
        "status": chosen.value if chosen else "",
        "alias": named or "",
        "before": before,
        "older": summaries[-1].started_at if len(summaries) == PAGE_SIZE else None,
        "statuses": [s.value for s in RunStatus],
        "problems": problems,
        "live": before is None,
        "version": digest(
            [summary.model_dump(mode="json") for summary in summaries],
            [state.model_dump(mode="json") if state else None for state in states],
        ),
    }
    if part == "live":
        return render.fragment("runs_live.html", context)
    return render.page(request, "runs.html", caller, context)


# What a commit holds never changes: a run's page, redrawn at each of its events, reads
# its artifact and diff from git once per commit.
_COMMIT_READS: OrderedDict[tuple[str, ...], Any] = OrderedDict()
COMMIT_READS_KEPT = 256
# Reads run in worker threads (asyncio.to_thread): the cache's bookkeeping is one at a time.
_COMMIT_READS_LOCK = threading.Lock()


def _kept(key: tuple[str, ...], read: Callable[[], Any]) -> Any:
    with _COMMIT_READS_LOCK:
        if key in _COMMIT_READS:
            _COMMIT_READS.move_to_end(key)
            return _COMMIT_READS[key]
    value = read()
    with _COMMIT_READS_LOCK:
        _COMMIT_READS[key] = value
        while len(_COMMIT_READS) > COMMIT_READS_KEPT:
            _COMMIT_READS.popitem(last=False)
    return value


def _artifact(workspaces: GitWorkspaces, origin: str, commit: str) -> str | None:
    return _kept(
        ("artifact", origin, commit),
        lambda: workspaces.read_file(origin, commit, ARTIFACT_PATH),
    )


def _changes(
    workspaces: GitWorkspaces, origin: str, first: str, last: str
) -> tuple[FileChange, ...]:
    return _kept(
        ("changes", origin, first, last),
        lambda: tuple(workspaces.changes_since(origin, first, last)),
    )


async def _git(read: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """A git read off the event loop; a failure is shown on the page, not a 500."""
    try:
        return await asyncio.to_thread(read, *args), ""
    except (GitError, ValueError) as err:
        return None, str(err)


def _first_commit(events: Sequence[Event]) -> str | None:
    return next(
        (event.payload.commit for event in events if isinstance(event, ArtifactCreated)), None
    )


def _diff(changes: Sequence[FileChange]) -> list[dict[str, Any]]:
    """The work's files, the run's own records (`.loops/`) left out, each with its lines."""
    shown, used = [], 0
    for change in changes:
        if change.path.startswith(".loops/"):
            continue
        lines = run_view.diff_lines(change.patch) if used < DIFF_CHARS else None
        used += len(change.patch)
        shown.append({"change": change, "lines": lines})
        if len(shown) >= DIFF_FILES:
            break
    return shown


def spend(usage: TokenUsage, budget: Any) -> dict[str, Any]:
    """What was spent against what may be: tokens and dollars, each with its cap's share."""
    tokens_cap = getattr(budget, "max_tokens", None)
    usd_cap = getattr(budget, "max_cost_usd", None)
    share = max(
        usage.total_tokens / tokens_cap if tokens_cap else 0.0,
        usage.cost_usd / usd_cap if usd_cap else 0.0,
    )
    return {
        "tokens": usage.total_tokens,
        "tokens_cap": tokens_cap,
        "usd": usage.cost_usd,
        "usd_cap": usd_cap,
        "percent": round(min(share, 1.0) * 100),
    }


render.ENVIRONMENT.globals["spend_of"] = lambda state: spend(state.usage, state.budget)


def temporal_link(settings: Settings, workflow_id: str) -> str | None:
    if not settings.temporal_ui_url:
        return None
    base = settings.temporal_ui_url.rstrip("/")
    return f"{base}/namespaces/{settings.temporal_namespace}/workflows/{workflow_id}"


def digest(*parts: Any) -> str:
    """A section's version: the script swaps a section in only when it changed, so a form
    being filled in is not redrawn under the person typing."""
    text = json.dumps(parts, default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


async def _run_context(
    handle: Any, workspaces: GitWorkspaces, settings: Settings
) -> dict[str, Any]:
    description = await run_handles.describe(handle)
    state = await run_handles.read_state(handle, description)
    events = await run_handles.read_events(handle, 0, workspaces, description)
    points = run_view.score_points(events)
    artifact, artifact_error = None, ""
    diff: list[dict[str, Any]] = []
    diff_error = ""
    if state.artifact_commit and state.origin:
        artifact, artifact_error = await _git(
            _artifact, workspaces, state.origin, state.artifact_commit
        )
        first = _first_commit(events)
        if first:
            changes, diff_error = await _git(
                _changes, workspaces, state.origin, first, state.artifact_commit
            )
            diff = _diff(changes or ())
    qa = []
    if state.verdicts.qa is not None:
        records, _ = await _git(_records, workspaces, state)
        qa = run_view.qa_commands(records or [])
    gate = state.gate.kind.value if state.gate else ""
    return {
        "state": state,
        "closed": run_handles.is_closed(description),
        "events": events,
        "last_seq": events[-1].seq if events else 0,
        "chart": run_view.score_chart(points, state.thresholds),
        "grid": run_view.rule_grid(points, state.rules),
        "artifact": markdown.rendered(artifact) if artifact else None,
        "artifact_error": artifact_error,
        "diff": diff,
        "diff_error": diff_error,
        "qa_commands": qa,
        "spend": spend(state.usage, state.budget),
        "temporal_link": temporal_link(settings, state.run_id),
        "gate": gate,
        "releases": {kind.value: route for kind, (route, _) in RELEASES.items()},
        "Gate": Gate,
        "block_report": markdown.rendered(state.block.report) if state.block.report else None,
        "rules_json": json.dumps(
            [rule.model_dump(mode="json", exclude_none=True) for rule in state.rules], indent=2
        ),
        "stream_events": STREAM_EVENTS,
        "versions": {
            "summary": digest(state.model_dump(mode="json", exclude={"updated_at"})),
            "gate": digest(state.status, gate, state.block, state.thresholds, state.rules),
            "score": digest(points, state.thresholds),
            "work": digest(state.artifact_commit, state.plan, state.verdicts, qa),
        },
    }


def _records(
    workspaces: GitWorkspaces, state: RunState, carried: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    return run_view.trajectory_records(run_trajectory(workspaces, state, carried))


@router.get("/runs/{run_id:run_id}")
async def run_page(
    request: Request,
    caller: UiCaller,
    handle: RunHandle,
    workspaces: WorkspacesDep,
    settings: SettingsDep,
    part: str | None = None,
) -> HTMLResponse:
    """A run: score chart, rules grid, plan, verdicts, artifact and diff, events, actions."""
    context = await _run_context(handle, workspaces, settings)
    run_states(request).remember(context["state"])
    if part == "live":
        context |= {"caller": caller, "can_act": not caller.read_only}
        return render.fragment("run_live.html", context)
    return render.page(request, "run.html", caller, context)


TRAJECTORY_PAGE = 40


@router.get("/runs/{run_id:run_id}/trajectory")
async def trajectory_page(
    request: Request,
    caller: UiCaller,
    handle: RunHandle,
    workspaces: WorkspacesDep,
    settings: SettingsDep,
    step: str | None = None,
    role: str | None = None,
    call: Annotated[int | None, Query(ge=1)] = None,
    page: Annotated[int, Query(ge=1)] = 1,
) -> HTMLResponse:
    """Every model call of the run, by step and role, with its tokens and cost; one call's
    messages with `call`."""
    state = await run_handles.read_state(handle)
    carried = await run_handles.read_carried_calls(handle, state)
    records, error = await _git(_records, workspaces, state, carried)
    calls = run_view.model_calls(records or [], settings.prices)
    steps = sorted({c.step for c in calls})
    roles = sorted({c.role for c in calls if c.role})
    kept = [c for c in calls if (not step or c.step == step) and (not role or c.role == role)]
    chosen = next((c for c in calls if c.n == call), None) if call else None
    start = (page - 1) * TRAJECTORY_PAGE
    context = {
        "state": state,
        "calls": kept[start : start + TRAJECTORY_PAGE],
        "total": len(kept),
        "page": page,
        "pages": max(1, -(-len(kept) // TRAJECTORY_PAGE)),
        "steps": steps,
        "roles": roles,
        "step": step or "",
        "role": role or "",
        "chosen": chosen,
        "error": error,
        "usage": sum((c.usage for c in kept), TokenUsage()),
    }
    return render.page(request, "trajectory.html", caller, context)
