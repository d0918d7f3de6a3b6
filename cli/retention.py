"""`loops gc [--dry-run]`, `loops pin RUN`, `loops unpin RUN`: the retention of finished
runs' records (docs/operations.md#retention, docs/cli.md#retention).

The gc runs in the service's workers (`POST /gc`, an admin token's), by their policy
(LOOPS_RETENTION_*): this prints its report. `loops gc` shows what a dry run finds and
asks before it removes anything, as `loops clean` does; `--yes` does not ask.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import TypeAdapter
from rich.filesize import decimal

from loopworks.cli.clean import confirm
from loopworks.cli.client import parse, run_path
from loopworks.cli.commands import Context, repo_for_api
from loopworks.cli.resolve import resolve_run
from loopworks.schemas.retention import (
    GcReport,
    OriginReport,
    PinState,
    RetentionPolicy,
    Totals,
)

REPORT: TypeAdapter[GcReport] = TypeAdapter(GcReport)
PIN: TypeAdapter[PinState] = TypeAdapter(PinState)


def cmd_gc(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"dry_run": True}
    if args.branches:
        body["branches"] = True
    if args.repo:
        body["repo"] = repo_for_api(args.repo)
    found = _gc(ctx, body)
    if args.json and (args.dry_run or not found.totals.runs):
        ctx.out.write(found.model_dump_json(indent=1) + "\n")
        return 0
    if not args.json:
        for line in report_lines(found):
            ctx.console.print(line, highlight=False, markup=False)
    if args.dry_run or not found.totals.runs:
        return 0
    question = f"Remove the records of {found.totals.runs} run(s)?"
    if not args.yes and not confirm(question, ctx.stdin, ctx.console):
        ctx.console.print("nothing removed")
        return 1
    done = _gc(ctx, {**body, "dry_run": False})
    if args.json:
        ctx.out.write(done.model_dump_json(indent=1) + "\n")
    else:
        ctx.console.print(_totals_line("removed", done.totals), highlight=False, markup=False)
        for origin in done.origins:
            if origin.error:
                ctx.console.print(f"{origin.origin}: {origin.error}", markup=False)
    return 1 if any(origin.error for origin in done.origins) else 0


def _gc(ctx: Context, body: dict[str, Any]) -> GcReport:
    return parse(REPORT, ctx.client.json("POST", "/gc", body=body), "the gc")


def cmd_pin(ctx: Context, args: argparse.Namespace) -> int:
    return _pin(ctx, args, "pin")


def cmd_unpin(ctx: Context, args: argparse.Namespace) -> int:
    return _pin(ctx, args, "unpin")


def _pin(ctx: Context, args: argparse.Namespace, action: str) -> int:
    run_id = resolve_run(ctx.client, args.run)  # an alias too (docs/cli.md#naming-a-run)
    body = {"repo": repo_for_api(args.repo)} if args.repo else {}
    state = parse(PIN, ctx.client.json("POST", run_path(run_id, action), body=body), action)
    if state.pinned:
        ctx.print(f"{state.run_id} is pinned on {state.origin}: the gc never removes its records")
    else:
        ctx.print(f"{state.run_id} is not pinned: its records expire as any finished run's")
    return 0


# --- the report ----------------------------------------------------------------------


def policy_line(policy: RetentionPolicy) -> str:
    if not policy.expires:
        return (
            "retention is off on the workers (LOOPS_RETENTION_DAYS and"
            " LOOPS_RETENTION_KEEP_PER_REPO unset): nothing expires"
        )
    limits = []
    if policy.days is not None:
        limits.append(f"{policy.days:g} days after a run finished")
    if policy.keep_per_repo is not None:
        limits.append(f"past the newest {policy.keep_per_repo} runs of a repository")
    branches = "result branches go too" if policy.branches else "result branches stay"
    return f"retention: records expire {' or '.join(limits)}; {branches}"


def report_lines(report: GcReport) -> list[str]:
    lines = [policy_line(report.policy)]
    for origin in report.origins:
        lines += _origin_lines(origin)
    verb = "would remove" if report.dry_run else "removed"
    if report.policy.expires:
        lines.append(_totals_line(verb, report.totals))
    return lines


def _origin_lines(origin: OriginReport) -> list[str]:
    lines = [f"{origin.origin}:"]
    if origin.error:
        return [*lines, f"  could not be swept: {origin.error}"]
    for run in origin.expired:
        held = [*(["work ref"] if run.work_ref else []), f"{run.call_refs} call refs"]
        if run.branch:
            held.append("its branch")
        if run.clones:
            held.append(f"{len(run.clones)} clone(s), {decimal(run.clone_bytes)}")
        lines.append(f"  {run.run_id}: {', '.join(held)} ({run.reason})")
    if more := origin.totals.runs - len(origin.expired):
        lines.append(f"  ... and {more} more run(s)")
    if origin.kept:
        kept = ", ".join(f"{count} {why.value}" for why, count in sorted(origin.kept.items()))
        lines.append(f"  kept: {kept}")
    if origin.pinned:
        lines.append(f"  pinned: {', '.join(origin.pinned)}")
    if not origin.expired and not origin.kept:
        lines.append("  nothing to remove")
    return lines


def _totals_line(verb: str, totals: Totals) -> str:
    return (
        f"{verb}: the records of {totals.runs} run(s): {totals.work_refs} work ref(s),"
        f" {totals.call_refs} call ref(s), {totals.branches} branch(es),"
        f" {totals.clones} clone(s) ({decimal(totals.clone_bytes)})"
    )


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    help_text = "remove finished runs' expired refs and clones (the workers' retention policy)"
    gc = sub.add_parser("gc", parents=[common], help=help_text, description=help_text)
    gc.set_defaults(handler=cmd_gc)
    gc.add_argument(
        "--dry-run", action="store_true", help="only say what would be removed, and how much"
    )
    gc.add_argument(
        "--branches", action="store_true", help="remove expired runs' result branches too"
    )
    gc.add_argument("--repo", help="only this repository (URL or path)")
    gc.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    gc.add_argument("--json", action="store_true", help="print the report as JSON")

    for name, handler, text in (
        ("pin", cmd_pin, "keep a run's (or a graph's) records from the gc"),
        ("unpin", cmd_unpin, "give a pinned run back to the gc"),
    ):
        command = sub.add_parser(name, parents=[common], help=text, description=text)
        command.set_defaults(handler=handler)
        command.add_argument("run", metavar="RUN")
        command.add_argument(
            "--repo", help="its repository, for a run Temporal no longer knows (URL or path)"
        )
