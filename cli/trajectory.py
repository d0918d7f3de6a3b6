"""`loops trajectory RUN [--loop-type task|skill]`: every model call of a run as JSON
lines on stdout, for export (docs/observability.md#the-trajectory).

The lines are the API's (`GET /runs/{id}/trajectory`) as they are: each one message of a
call, tagged with its run, step, role, `loop_type` and `trajectory_id`.
"""

from __future__ import annotations

import argparse

from loopworks.cli.client import run_path
from loopworks.cli.commands import Context

LOOP_TYPES = ("task", "skill")


def cmd_trajectory(ctx: Context, args: argparse.Namespace) -> int:
    params = {"loop_type": args.loop_type} if args.loop_type else None
    response = ctx.client.request(
        "GET",
        run_path(args.run, "trajectory"),
        params=params,
        headers={"Accept": "application/x-ndjson"},
    )
    ctx.out.write(response.text)
    ctx.out.flush()
    return 0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    help_text = "print every model call of a run as JSON lines (for export)"
    command = sub.add_parser("trajectory", parents=[common], help=help_text, description=help_text)
    command.set_defaults(handler=cmd_trajectory)
    command.add_argument("run", metavar="RUN")
    command.add_argument(
        "--loop-type",
        choices=LOOP_TYPES,
        help="only the task loop's lines, or only the skill sub-loop's",
    )
