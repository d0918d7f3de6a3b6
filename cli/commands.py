"""One function per `loops` command: call the API, print what it answered, return the
exit code. Failures are raised as `CliError` and printed by `main`."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote, urlsplit, urlunsplit

import yaml
from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError
from rich.table import Table

from loopworks.api.models import ARTIFACT_COMMIT_HEADER, RUN_STATUS_HEADER
from loopworks.cli import clean as cleaning
from loopworks.cli import confirm
from loopworks.cli.client import RUNS, ApiClient, CliError, run_path
from loopworks.cli.config import CliConfig
from loopworks.cli.follow import Follower, Progress
from loopworks.cli.render import (
    console_for,
    history_line,
    list_table,
    model_line,
    status_line,
    status_notes,
)
from loopworks.cli.resolve import resolve_run
from loopworks.cli.steer_render import detail_lines
from loopworks.schemas.git_names import is_url
from loopworks.schemas.run import RunStatus

APPROVAL_FIELDS = frozenset({"rules", "thresholds", "max_iterations", "note"})


class Context:
    """What every command gets: the client, the config, where to print (a rich console
    on `out`; notes beside a command's output on `err`) and where a confirmation is read
    from."""

    def __init__(
        self,
        config: CliConfig,
        client: ApiClient,
        out: TextIO | None = None,
        stdin: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.out = out or sys.stdout
        self.stdin = stdin if stdin is not None else sys.stdin
        self.err = err or sys.stderr
        self.console = console_for(self.out)
        # What a command says beside its answer (a draft to confirm, a question).
        self.err_console = console_for(self.err)

    def print(self, text: str = "") -> None:
        self.console.print(text)


# What a request body can carry. YAML reads more (dates, sets, binary, .nan and .inf), which
# the request could not send; JSON itself has no NaN or infinity.
JSON_DATA: TypeAdapter[JsonValue] = TypeAdapter(JsonValue, config=ConfigDict(allow_inf_nan=False))


def read_document(path: Path) -> JsonValue:
    """A JSON or YAML file's data (YAML reads JSON too), refused unless JSON can carry it;
    the API validates what it holds."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise CliError(f"cannot read {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise CliError(f"cannot read {path}: not UTF-8 text (byte {err.start})") from err
    except yaml.YAMLError as err:
        raise CliError(f"{path} is neither JSON nor YAML: {err}") from err
    try:
        return JSON_DATA.validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = first["loc"]
        key = loc[-1:] == ("[key]",)
        place, what = (_json_place(loc[:-2]), "has a key") if key else (_json_place(loc), "is")
        raise CliError(
            f"{path}: {place} {what} {first['input']!r}, which JSON "
            "cannot carry (YAML reads dates, sets, numbers, .nan and .inf as such: quote it "
            "to keep it as text)"
        ) from err


def _json_place(loc: tuple[int | str, ...]) -> str:
    """Where in the document a `JSON_DATA` error is (`[0].weight`): its loc alternates the
    kind of a value (`list`, `dict`) with the index or key inside it."""
    place = ""
    parts = iter(loc)
    for kind in parts:
        if kind not in ("list", "dict"):
            break
        inner = next(parts, None)
        if inner is None:
            break
        place += f"[{inner}]" if kind == "list" else f".{inner}"
    return place.lstrip(".") or "the document"


def load_criteria(path: Path) -> dict[str, Any]:
    """A rules file: a list of rules, or a mapping with rules / thresholds /
    max_iterations / note. JSON or YAML (YAML reads JSON too). The API validates it."""
    data = read_document(path)
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
    return runs[0].run_id


def _follow(ctx: Context, run_id: str, use_stream: bool) -> int:
    """Follow the run to its end: exit 0 when it completed, else 1, as `loops graph status
    --follow` does, so that a script gating on the command stops after a run that did
    not pass."""
    # The status thread gets a client of its own; the main one is busy reading the stream.
    poller = ApiClient(ctx.config)
    try:
        progress = Progress(ctx.console)
        final = Follower(
            ctx.client,
            run_id,
            progress,
            state_source=lambda: poller.run_state(run_id),
            use_stream=use_stream,
        ).run()
    finally:
        poller.close()
    return 0 if final.status == RunStatus.COMPLETED else 1


# --- commands ----------------------------------------------------------------------


def repo_for_api(repo: str) -> str:
    """A URL as given; a local path made absolute from the caller's directory. The API
    refuses a relative path: it could only resolve it from its own directory, so
    `--repo .` would have meant the API's checkout, not the caller's."""
    if is_url(repo):
        return repo
    return str(Path(repo).expanduser().resolve())


SLACK_PREFIX = "slack:"


def notify_for_api(webhooks: list[str] | None, events: str | None) -> dict[str, Any] | None:
    """`--notify URL` (repeatable; `slack:URL` for Slack's body shape, as in
    LOOPS_NOTIFY_WEBHOOKS) and `--notify-events a,b` as the request's `notify`
    (docs/notifications.md#asking-for-them); the API admits the URLs and the events."""
    if not webhooks:
        if events:
            raise CliError("--notify-events needs --notify URL: the webhooks to send them to")
        return None
    found = []
    for given in webhooks:
        slack = given.startswith(SLACK_PREFIX)
        url = given.removeprefix(SLACK_PREFIX).strip() if slack else given.strip()
        found.append({"url": url, "format": "slack" if slack else "json"})
    notify: dict[str, Any] = {"webhooks": found}
    if events is not None:
        names = [name.strip() for name in events.split(",") if name.strip()]
        if not names:
            raise CliError("--notify-events names no event (e.g. blocked,completed)")
        notify["events"] = names
    return notify


def budget_for_api(tokens: int | None, usd: float | None) -> dict[str, Any] | None:
    """`--budget-tokens N --budget-usd X` (or a graph's `--total-budget-...`) as a request's
    `{"max_tokens", "max_cost_usd"}`; None when neither is given. The API admits it: at
    most the operator's cap, else its 422 (docs/api.md#the-run-request)."""
    budget: dict[str, Any] = {}
    if tokens is not None:
        budget["max_tokens"] = tokens
    if usd is not None:
        budget["max_cost_usd"] = usd
    return budget or None


def proof_for_api(
    verify: list[str] | None, no_verify: bool, allow_unverified: bool | None
) -> dict[str, Any]:
    """`--verify CMD ...` / `--no-verify` and `--allow-unverified` as a request's (or an
    approval's) `verify` and `allow_unverified`; what is not given is left out, for the
    service's default (docs/loop.md#the-runs-proof)."""
    body: dict[str, Any] = {}
    if no_verify:
        body["verify"] = []
    elif verify:
        body["verify"] = verify
    if allow_unverified is not None:
        body["allow_unverified"] = allow_unverified
    return body


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"task": args.task}
    if notify := notify_for_api(args.notify, args.notify_events):
        body["notify"] = notify
    if budget := budget_for_api(args.budget_tokens, args.budget_usd):
        body["budget"] = budget
    if args.rules_file:
        criteria = load_criteria(args.rules_file)
        criteria.pop("note", None)
        body.update(criteria)
    if args.repo:
        body["repo"] = repo_for_api(args.repo)
    for field in ("template", "max_iterations"):
        value = getattr(args, field)
        if value is not None:
            body[field] = value
    if args.base_branch:
        body["base_branch"] = args.base_branch
    if args.audit_probability is not None:
        body["audit_probability"] = args.audit_probability
    body.update(proof_for_api(args.verify, args.no_verify, args.allow_unverified or None))
    interactive = confirm.wanted(args.auto, args.interactive, ctx.stdin)
    if interactive:
        body["mode"] = "interactive"
    if args.no_prep:
        body["read_prep_package"] = False
    run_id = ctx.client.create_run(body, args.idempotency_key).run_id
    ctx.print(run_id)
    # Confirm first (docs/cli.md#confirm-first); without a terminal to ask at, an
    # --interactive run waits for `loops approve`.
    asked = interactive and confirm.at_terminal(ctx.stdin)
    if asked and not confirm.confirm_run(ctx.client, run_id, ctx.stdin, ctx.err_console):
        return 1
    if args.follow:
        return _follow(ctx, run_id, use_stream=not args.poll)
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    run_id = resolve_run(ctx.client, args.run) if args.run else most_recent_run(ctx.client)
    if args.follow:
        return _follow(ctx, run_id, use_stream=not args.poll)
    state = ctx.client.run_state(run_id)
    if args.json:
        ctx.print(state.model_dump_json(indent=2))
        return 0
    ctx.print(status_line(state))
    for note in status_notes(state):
        ctx.print(note)
    if model := model_line(state):
        ctx.print(model)
    for line in detail_lines(state):
        ctx.print(line)
    return 0


def cmd_stop(ctx: Context, args: argparse.Namespace) -> int:
    run_id = resolve_run(ctx.client, args.run)
    body = {"reason": args.reason} if args.reason else {}
    ctx.client.message(run_id, "stop", body)
    ctx.print(f"stop requested for {run_id}; it reflects, pushes what it has, then ends")
    return 0


def cmd_clear_block(ctx: Context, args: argparse.Namespace) -> int:
    state = ctx.client.message(
        resolve_run(ctx.client, args.run), "clear-block", {"note": args.note}
    )
    ctx.print(status_line(state))
    return 0


def cmd_pause(ctx: Context, args: argparse.Namespace) -> int:
    run_id = resolve_run(ctx.client, args.run)
    ctx.client.message(run_id, "pause")
    ctx.print(f"pause requested for {run_id}; it finishes its current step, then waits")
    return 0


def cmd_resume(ctx: Context, args: argparse.Namespace) -> int:
    state = ctx.client.message(resolve_run(ctx.client, args.run), "resume")
    ctx.print(status_line(state))
    return 0


def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = load_criteria(args.rules_file) if args.rules_file else {}
    if args.max_iterations is not None:
        body["max_iterations"] = args.max_iterations
    body.update(proof_for_api(args.verify, args.no_verify, args.allow_unverified))
    if args.note:
        body["note"] = args.note
    state = ctx.client.message(resolve_run(ctx.client, args.run), "approve", body)
    ctx.print(status_line(state))
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    runs = ctx.client.list_runs(limit=args.limit, status=args.status)
    return print_listing(ctx, runs, args.json, RUNS, list_table, "no runs")


def print_listing(
    ctx: Context,
    items: list[Any],
    as_json: bool,
    adapter: TypeAdapter[Any],
    table: Callable[[list[Any]], Table],
    empty: str,
) -> int:
    """A list command's answer: its JSON, a table, or a line saying there is nothing."""
    if as_json:
        ctx.print(adapter.dump_json(items, indent=2).decode())
    elif items:
        ctx.console.print(table(items))
    else:
        ctx.print(empty)
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    run_id = resolve_run(ctx.client, args.run)
    events = ctx.client.events(run_id)
    if args.json:
        for event in events:
            ctx.print(event.model_dump_json())
        return 0
    if not events:
        ctx.print(f"no events for {run_id}")
    for event in events:
        ctx.print(history_line(event))
    return 0


def cmd_artifact(ctx: Context, args: argparse.Namespace) -> int:
    run_id = resolve_run(ctx.client, args.run)
    response = ctx.client.text_response(run_path(run_id, "artifact"))
    text = response.text
    ctx.out.write(text if text.endswith("\n") else text + "\n")
    ctx.out.flush()
    status = response.headers.get(RUN_STATUS_HEADER)
    if status in LIVE_STATUSES:
        # On stderr: stdout stays the artifact alone, for a pipe or a file.
        commit = response.headers.get(ARTIFACT_COMMIT_HEADER, "")[:8]
        ctx.err.write(
            f"loops: run {run_id} is {status}: this is its latest draft"
            f"{f' (commit {commit})' if commit else ''}, not its final artifact\n"
        )
    return 0


LIVE_STATUSES = frozenset(status.value for status in RunStatus if not status.is_terminal)


def dashboard_url(api_url: str, run_id: str | None = None) -> str:
    """A run's page in the dashboard the API serves (docs/dashboard.md), or its run list;
    without the API URL's user and password, which would be printed and kept in the
    browser's history (the dashboard asks for what it needs)."""
    parts = urlsplit(api_url)
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    base = f"{urlunsplit(bare).rstrip('/')}/ui/runs"
    return f"{base}/{quote(run_id, safe='/')}" if run_id else base


def cmd_open(ctx: Context, args: argparse.Namespace) -> int:
    run_id = None
    if args.run:
        run_id = resolve_run(ctx.client, args.run)
        # A run that is not there is said here, not as a 404 page in the browser.
        ctx.client.json("GET", run_path(run_id))
    url = dashboard_url(ctx.config.api_url, run_id)
    ctx.out.write(url + "\n")
    ctx.out.flush()
    if not args.print_url and not webbrowser.open(url):
        ctx.err.write("loops: no browser to open here: open the address above\n")
    return 0


def cmd_clean(ctx: Context, args: argparse.Namespace) -> int:
    if args.all:
        if args.run:
            raise CliError("give a run or --all, not both")
        return cleaning.clean_all(ctx.client, args.yes, ctx.stdin, ctx.console)
    if not args.run:
        raise CliError("give a run to clean, or --all for every finished run")
    run_id = resolve_run(ctx.client, args.run)
    return cleaning.clean(ctx.client, run_id, args.yes, ctx.stdin, ctx.console)
