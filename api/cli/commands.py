"""One function per `loops` command: call the API, print what it answered, return the
exit code. Failures are raised as `CliError` and printed by `main`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from loopworks.api.cli import clean as cleaning
from loopworks.api.cli.client import ApiClient, CliError, run_path
from loopworks.api.cli.config import CliConfig, workspaces_dir
from loopworks.api.cli.follow import Follower, Progress
from loopworks.api.cli.render import (
    history_line,
    is_terminal,
    list_table,
    status_line,
    status_notes,
)

APPROVAL_FIELDS = frozenset({"rules", "thresholds", "max_iterations", "note"})


class Context:
    """What every command gets: the client, the config and where to print."""

    def __init__(
        self,
        config: CliConfig,
        client: ApiClient,
        out: TextIO | None = None,
        stdin: TextIO | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.out = out or sys.stdout
        self.stdin = stdin if stdin is not None else sys.stdin

    def print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)


def load_criteria(path: Path) -> dict[str, Any]:
    """A rules file: a list of rules, or a mapping with rules / thresholds /
    max_iterations / note. JSON or YAML (YAML reads JSON too). The API validates it."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise CliError(f"cannot read {path}: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise CliError(f"{path} is neither JSON nor YAML: {err}") from err
    if isinstance(data, list):
        return {"rules": data}
    if isinstance(data, dict) and data and set(data) <= APPROVAL_FIELDS:
        return dict(data)
    raise CliError(
        f"{path} must hold a list of rules or a mapping of {', '.join(sorted(APPROVAL_FIELDS))}"
    )


def most_recent_run(client: ApiClient) -> str:
    runs = client.list_runs(limit=1)
    if not runs:
        raise CliError('there are no runs yet; start one with: loops new "task"')
    return str(runs[0]["run_id"])


def _follow(ctx: Context, run_id: str, use_stream: bool) -> int:
    # The status thread gets a client of its own; the main one is busy reading the stream.
    poller = ApiClient(ctx.config)
    try:
        progress = Progress(ctx.out, tty=ctx.out.isatty())
        Follower(
            ctx.client,
            run_id,
            progress,
            state_source=lambda: poller.run_state(run_id),
            use_stream=use_stream,
        ).run()
    finally:
        poller.close()
    return 0


# --- commands ----------------------------------------------------------------------


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"task": args.task}
    if args.rules_file:
        criteria = load_criteria(args.rules_file)
        criteria.pop("note", None)
        body.update(criteria)
    for field in ("repo", "template", "max_iterations"):
        value = getattr(args, field)
        if value is not None:
            body[field] = value
    if args.base_branch:
        body["base_branch"] = args.base_branch
    if args.audit_probability is not None:
        body["audit_probability"] = args.audit_probability
    if args.interactive:
        body["mode"] = "interactive"
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    created = ctx.client.post_json("/runs", body, headers=headers)
    run_id = str(created["run_id"])
    ctx.print(run_id)
    if args.follow:
        return _follow(ctx, run_id, use_stream=not args.poll)
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    run_id = args.run or most_recent_run(ctx.client)
    if args.follow:
        return _follow(ctx, run_id, use_stream=not args.poll)
    state = ctx.client.run_state(run_id)
    if args.json:
        ctx.print(json.dumps(state, indent=2))
        return 0
    ctx.print(status_line(state))
    for note in status_notes(state):
        ctx.print(note)
    return 0


def _message(ctx: Context, run_id: str, action: str, body: Any = None) -> dict[str, Any]:
    answer = ctx.client.post_json(run_path(run_id, action), body)
    return answer if isinstance(answer, dict) else {}


def cmd_stop(ctx: Context, args: argparse.Namespace) -> int:
    body = {"reason": args.reason} if args.reason else {}
    _message(ctx, args.run, "stop", body)
    ctx.print(f"stop requested for {args.run}; it reflects, pushes what it has, then ends")
    return 0


def cmd_clear_block(ctx: Context, args: argparse.Namespace) -> int:
    state = _message(ctx, args.run, "clear-block", {"note": args.note})
    ctx.print(status_line(state) if state else f"block cleared on {args.run}")
    return 0


def cmd_pause(ctx: Context, args: argparse.Namespace) -> int:
    _message(ctx, args.run, "pause")
    ctx.print(f"pause requested for {args.run}; it finishes its current step, then waits")
    return 0


def cmd_resume(ctx: Context, args: argparse.Namespace) -> int:
    state = _message(ctx, args.run, "resume")
    ctx.print(status_line(state) if state else f"resumed {args.run}")
    return 0


def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = load_criteria(args.rules_file) if args.rules_file else {}
    if args.max_iterations is not None:
        body["max_iterations"] = args.max_iterations
    if args.note:
        body["note"] = args.note
    state = _message(ctx, args.run, "approve", body)
    ctx.print(status_line(state) if state else f"approved {args.run}")
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    runs = ctx.client.list_runs(limit=args.limit, status=args.status)
    ctx.print(json.dumps(runs, indent=2) if args.json else list_table(runs))
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    events = ctx.client.events(args.run)
    if args.json:
        for event in events:
            ctx.print(json.dumps(event))
        return 0
    if not events:
        ctx.print(f"no events for {args.run}")
    for event in events:
        ctx.print(history_line(event))
    return 0


def cmd_artifact(ctx: Context, args: argparse.Namespace) -> int:
    text = ctx.client.get_text(run_path(args.run, "artifact"))
    ctx.out.write(text if text.endswith("\n") else text + "\n")
    ctx.out.flush()
    return 0


def cmd_clean(ctx: Context, args: argparse.Namespace) -> int:
    root = workspaces_dir()
    paths = cleaning.workspace_paths(root, args.run)  # rejects a malformed id first
    state = ctx.client.run_state(args.run)
    if not is_terminal(state):
        raise CliError(
            f"run {args.run} is {state.get('status')}; only finished runs are cleaned"
            f" (stop it first: loops stop {args.run})"
        )
    if not paths:
        ctx.print(f"nothing to clean for {args.run} under {root}")
        return 0
    ctx.print(f"run {args.run} is {state.get('status')}; this deletes its local workspaces:")
    for path in paths:
        ctx.print(f"  {path} ({cleaning.human(cleaning.size_of(path))})")
    ctx.print(f"its branch {state.get('branch', '')} on its origin is kept")
    if not args.yes and not cleaning.confirm(f"Delete {len(paths)} path(s)?", ctx.stdin, ctx.out):
        ctx.print("nothing deleted")
        return 1
    cleaning.remove(paths)
    ctx.print(f"deleted {len(paths)} path(s)")
    return 0
