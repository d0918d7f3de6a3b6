"""`loops` / `python -m loopworks.cli`: the command line, wired with argparse.

Exit codes: 0 ok, 1 failure (a sentence on stderr), 2 usage, 130 interrupted, 141 stdout
closed by its reader.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from loopworks.cli import commands, graphs, playbook, retention, trajectory, up
from loopworks.cli.client import ApiClient, CliError
from loopworks.cli.config import DEFAULT_API_URL, CliConfig
from loopworks.cli.mcp import command as mcp_command

Command = Callable[[commands.Context, argparse.Namespace], int]
# What a shell reports for a command SIGPIPE ended (128 + 13): Python ignores the signal,
# so the closed pipe arrives as BrokenPipeError instead.
EXIT_BROKEN_PIPE = 141

EPILOG = f"""\
environment:
  LOOPS_API_URL    the API (default {DEFAULT_API_URL})
  LOOPS_API_TOKEN  sent as "Authorization: Bearer <token>"

exit codes: 0 ok, 1 failure (a sentence on stderr), 2 usage, 130 interrupted,
  141 the output's reader stopped reading
"""


def _connection_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    # Accepted before or after the command; after it, an unset flag must not reset
    # the value given before it, hence SUPPRESS there.
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--url", default=default, help="API base URL (env LOOPS_API_URL)")
    parser.add_argument("--token", default=default, help="API bearer token (env LOOPS_API_TOKEN)")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _above_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):  # `not >` refuses nan too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number more than 0")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:  # refuses nan and the infinities too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loops",
        description="Start, steer and watch loopworks runs through its API.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _connection_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, handler: Command, help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    new = add("new", commands.cmd_new, "start a run; prints its id")
    new.add_argument("task", help="what the run should produce")
    new.add_argument("--repo", help="URL or path of a git repository (default: the service's)")
    new.add_argument("--base-branch", help="branch of --repo to start from")
    new.add_argument("--template", help="workflow template id")
    new.add_argument("--max-iterations", type=_positive)
    new.add_argument(
        "--audit-probability", type=_probability, help="chance of a custodiet audit (0-1)"
    )
    new.add_argument("--rules-file", type=Path, help="rules (and thresholds) as JSON or YAML")
    _proof_options(new, "the repository's .loops/verify, else its detected test command")
    new.add_argument(
        "--allow-unverified",
        action="store_true",
        help="let the run complete when it changes code and nothing proves it",
    )
    _confirm_options(new, "loops approve")
    _notify_options(new, "run")
    _budget_options(new, "budget", "the run", "LOOPS_RUN_BUDGET_*")
    new.add_argument("--idempotency-key", help="the same key returns the same run")
    new.add_argument(
        "--no-prep",
        action="store_true",
        help="ignore the repository's .workflow/.loop/ prep package (by default its tasks "
        "become the run's plan when it passes its checks)",
    )
    _follow_options(new)

    status = add("status", commands.cmd_status, "a run's status (default: the most recent run)")
    status.add_argument("run", nargs="?", metavar="RUN")
    _follow_options(status)
    status.add_argument("--json", action="store_true", help="print the full state as JSON")

    stop = add("stop", commands.cmd_stop, "stop a run (it still reflects and pushes)")
    stop.add_argument("run", metavar="RUN")
    stop.add_argument("--reason", help="recorded as the stop message")

    clear = add("clear-block", commands.cmd_clear_block, "release a custodiet block")
    clear.add_argument("run", metavar="RUN")
    clear.add_argument("--note", required=True, help="goes into the next step's context")

    pause = add("pause", commands.cmd_pause, "pause after the current step")
    pause.add_argument("run", metavar="RUN")
    resume = add("resume", commands.cmd_resume, "resume a paused run")
    resume.add_argument("run", metavar="RUN")

    approve = add("approve", commands.cmd_approve, "approve an interactive run's criteria")
    approve.add_argument("run", metavar="RUN")
    approve.add_argument("--max-iterations", type=_positive)
    approve.add_argument("--rules-file", type=Path, help="edited rules as JSON or YAML")
    _proof_options(approve, "the run's proof as drafted")
    approve.add_argument(
        "--allow-unverified",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether the run may complete when it changes code and nothing proves it",
    )
    approve.add_argument("--note", help="goes into the first step's context")

    listing = add("list", commands.cmd_list, "list runs, newest first")
    listing.add_argument("--status", help="only runs with this status")
    listing.add_argument("--limit", type=_positive, default=50)
    listing.add_argument("--json", action="store_true")

    history = add("history", commands.cmd_history, "a run's event timeline")
    history.add_argument("run", metavar="RUN")
    history.add_argument("--json", action="store_true", help="one JSON event per line")

    artifact = add("artifact", commands.cmd_artifact, "print a run's artifact (markdown)")
    artifact.add_argument("run", metavar="RUN")

    browse = add("open", commands.cmd_open, "open a run's page in the dashboard (a browser)")
    browse.add_argument("run", nargs="?", metavar="RUN", help="default: the run list")
    browse.add_argument(
        "--print", dest="print_url", action="store_true", help="only print the page's address"
    )

    clean = add("clean", commands.cmd_clean, "delete a finished run's workspaces on the service")
    clean.add_argument("run", nargs="?", metavar="RUN")
    clean.add_argument(
        "--all", action="store_true", help="every finished run's workspaces, one confirmation"
    )
    clean.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    _graph_parser(sub, common)
    playbook.add_parser(sub, common)
    trajectory.add_parser(sub, common)
    retention.add_parsers(sub, common)

    mcp = add("mcp", mcp_command.cmd_mcp, "serve the API as MCP tools to an AI assistant")
    mcp.description = (
        "Serve loopworks as Model Context Protocol tools (start, watch and steer runs and "
        "graphs) to an AI assistant, on stdin/stdout; see docs/mcp.md."
    )
    mcp.add_argument(
        "--http", action="store_true", help="serve streamable HTTP on 127.0.0.1 instead"
    )
    mcp.add_argument(
        "--port", type=_positive, default=8765, help="with --http: the port (default 8765)"
    )

    up.add_parser(sub)
    return parser


def _graph_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """`loops graph <command>`: the task graph commands, a parser of their own."""
    graph = sub.add_parser(
        "graph",
        help="start, watch and steer task graphs (a goal split into task loops)",
        description="Task graphs: a goal split into atomic tasks, each run as a loop in "
        "dependency order, merged onto one integration branch.",
    )
    graph_sub = graph.add_subparsers(dest="graph_command", metavar="COMMAND", required=True)

    def add(name: str, handler: Command, help_text: str) -> argparse.ArgumentParser:
        command = graph_sub.add_parser(
            name, parents=[common], help=help_text, description=help_text
        )
        command.set_defaults(handler=handler)
        return command

    def graph_id(command: argparse.ArgumentParser) -> None:
        command.add_argument("graph", metavar="GRAPH")

    new = add("new", graphs.cmd_new, "start a task graph; prints its id")
    new.add_argument("goal", help="what the graph should achieve")
    new.add_argument("--repo", help="URL or path of a git repository (default: the service's)")
    new.add_argument("--base-branch", help="branch of --repo to start from")
    new.add_argument(
        "--tasks-file", type=Path, help="the tasks as a JSON or YAML list (default: planned)"
    )
    new.add_argument("--max-parallel", type=_positive, help="task loops at once (API: 1-10)")
    new.add_argument("--max-iterations", type=_positive, help="each task loop's iterations")
    new.add_argument(
        "--audit-probability", type=_probability, help="each task loop's audit chance (0-1)"
    )
    _confirm_options(new, "loops graph approve")
    _notify_options(new, "graph")
    _budget_options(new, "budget", "each task loop", "LOOPS_RUN_BUDGET_*")
    _budget_options(new, "total-budget", "the whole graph", "LOOPS_GRAPH_BUDGET_*")
    new.add_argument("--follow", "-f", action="store_true", help="then follow it, as status -f")

    status = add("status", graphs.cmd_status, "a graph's tasks as a tree, with their runs")
    graph_id(status)
    status.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="redraw until the graph ends; exit 0 if it completed, else 1",
    )
    status.add_argument("--json", action="store_true", help="print the state as JSON")

    ledger = add("ledger", graphs.cmd_ledger, "a graph's status ledger: each task transition")
    graph_id(ledger)
    ledger.add_argument("--json", action="store_true", help="the JSON lines as the graph wrote")

    help_text = "print the graph's own model calls (its task planner's) as JSON lines"
    calls = add("trajectory", trajectory.cmd_graph_trajectory, help_text)
    graph_id(calls)
    trajectory.loop_type_option(calls)

    listing = add("list", graphs.cmd_list, "list task graphs")
    listing.add_argument("--limit", type=_positive, default=50)
    listing.add_argument("--json", action="store_true")

    stop = add("stop", graphs.cmd_stop, "stop a graph (running task loops still push)")
    graph_id(stop)
    stop.add_argument("--reason", help="recorded as the stop message")

    graph_id(add("pause", graphs.cmd_pause, "start no new task; running ones go on"))
    graph_id(add("resume", graphs.cmd_resume, "resume a paused graph"))

    approve = add("approve", graphs.cmd_approve, "start an interactive graph's tasks")
    graph_id(approve)
    approve.add_argument("--tasks-file", type=Path, help="an edited task list (JSON or YAML)")
    approve.add_argument("--note", help="recorded with the approval")

    clear = add("clear-block", graphs.cmd_clear_block, "release a task loop's custodiet block")
    graph_id(clear)
    clear.add_argument("--task", required=True, help="the task whose loop is blocked")
    clear.add_argument("--note", required=True, help="goes into the loop's next step")


def _proof_options(parser: argparse.ArgumentParser, default: str) -> None:
    """The run's proof (docs/loop.md#the-runs-proof): commands the service runs itself on
    the work before it may complete."""
    proof = parser.add_mutually_exclusive_group()
    proof.add_argument(
        "--verify",
        action="append",
        metavar="COMMAND",
        help=f"a command that proves the work when it exits 0; repeat for more (default: "
        f"{default})",
    )
    proof.add_argument(
        "--no-verify",
        action="store_true",
        help="nothing proves the run: a code change ends it unverified unless allowed",
    )


def _confirm_options(parser: argparse.ArgumentParser, approve: str) -> None:
    """Confirm first (docs/cli.md#confirm-first): at a terminal by default."""
    parser.add_argument(
        "--auto",
        action="store_true",
        help="start at once, without showing the draft for confirmation",
    )
    parser.add_argument(
        "--interactive",
        action="store_true",
        help="confirm the draft first even without a terminal (then: " + approve + ")",
    )


def _notify_options(parser: argparse.ArgumentParser, kind: str) -> None:
    """Webhooks told when the run or graph waits for a person or ends (docs/notifications.md)."""
    parser.add_argument(
        "--notify",
        action="append",
        metavar="URL",
        help=f"POST a signed notification here when the {kind} waits for a person or ends; "
        "repeatable (up to 5); slack:URL for a Slack incoming webhook",
    )
    parser.add_argument(
        "--notify-events",
        metavar="EVENTS",
        help="with --notify: only these, comma-separated (awaiting_approval, blocked, paused, "
        "completed, failed, halted, stopped, qa_rejected); default every one",
    )


def _budget_options(parser: argparse.ArgumentParser, flag: str, whom: str, caps: str) -> None:
    """What a run, each task loop or the whole graph may spend (docs/cli.md#budgets);
    unset: the operator's cap, which the API refuses to go past (HTTP 422)."""
    parser.add_argument(
        f"--{flag}-tokens",
        type=_positive,
        metavar="N",
        help=f"tokens (input + output) {whom} may use (default, and most allowed: {caps})",
    )
    parser.add_argument(
        f"--{flag}-usd",
        type=_above_zero,
        metavar="X",
        help=f"dollars {whom} may spend (default, and most allowed: {caps})",
    )


def _follow_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="print iteration summaries until it ends; exit 0 if it completed, else 1",
    )
    parser.add_argument(
        "--poll", action="store_true", help="with --follow: poll instead of the live stream"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # Known args only, so that the words after `up` reach its launcher unread.
    args, rest = parser.parse_known_args(argv)
    if args.command == "up":
        return up.run(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    config = CliConfig.load(url=args.url, token=args.token)
    handler: Command = args.handler
    try:
        with ApiClient(config) as client:
            return handler(commands.Context(config, client), args)
    except CliError as err:
        print(f"loops: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nloops: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The reader of stdout went away (`loops graph ledger G --json | head -1`): exit
    quietly, as a command SIGPIPE ends does. stdout goes to /dev/null first, else
    Python's own flush at exit fails on the closed pipe again, with a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a file (a test's capture): nothing will flush to the pipe
    return EXIT_BROKEN_PIPE
