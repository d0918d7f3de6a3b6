"""`loops trajectory RUN [--loop-type task|skill]`: every model call of a run as JSON
lines on stdout, for export (docs/observability.md#the-trajectory); `loops graph
trajectory GRAPH` a task graph's own (its task planner's).

The lines are the API's (`GET /runs/{id}/trajectory`) as they are: each one message of a
call, tagged with its run, step, role, `loop_type` and `trajectory_id`.
"""

from __future__ import annotations

import argparse

from loopworks.cli.client import run_path
from loopworks.cli.commands import Context
from loopworks.cli.graphs import graph_path
from loopworks.cli.resolve import resolve_run

LOOP_TYPES = ("task", "skill")


def cmd_trajectory(ctx: Context, args: argparse.Namespace) -> int:
    run_id = resolve_run(ctx.client, args.run)  # an alias too (docs/cli.md#naming-a-run)
    return _export(ctx, run_path(run_id, "trajectory"), args.loop_type)


def cmd_graph_trajectory(ctx: Context, args: argparse.Namespace) -> int:
    """`loops graph trajectory GRAPH`: the graph's own calls (its task planner's)."""
    return _export(ctx, graph_path(args.graph, "trajectory"), args.loop_type)


def _export(ctx: Context, path: str, loop_type: str | None) -> int:
    params = {"loop_type": loop_type} if loop_type else None
    response = ctx.client.request(
        "GET", path, params=params, headers={"Accept": "application/x-ndjson"}
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
    loop_type_option(command)


def loop_type_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--loop-type",
        choices=LOOP_TYPES,
        help="only the task loop's lines, or only the skill sub-loop's",
    )
