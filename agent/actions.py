"""What an agent did, read back from its trajectory: the commands it ran with their exit
codes and the files it wrote. The custodiet audits these, not the agent's account.

Pure functions over `TrajectoryRecord`s: a call is paired with its result by its
`tool_use_id`; a call whose result is missing (the turn limit cut it) still counts.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from loopworks.agent.trajectory import TrajectoryRecord
from loopworks.schemas.actions import CommandRun

RUN_COMMAND = "run_command"
WRITING_TOOLS = frozenset({"write_file", "edit_file"})
# The command tool's result starts "exit code N" (agent/tools/operations.py).
_EXIT = re.compile(r"^exit code (-?\d+)")
# What is shown of a command that did not run to an exit code (refused, timed out).
_NOTE_CHARS = 200
# The loop's own deliverable and records: every task writes them.
LOOP_PATHS = ("artifact.md", ".loops/")


def commands_run(records: Iterable[TrajectoryRecord]) -> list[CommandRun]:
    """Every command-tool call, in order, with the exit code its result reports."""
    records = list(records)
    results = _results(records)
    ran: list[CommandRun] = []
    for call in _calls(records, {RUN_COMMAND}):
        command = call.input.get("command") if isinstance(call.input, dict) else None
        if not isinstance(command, str):
            continue
        result = results.get(call.tool_use_id or "")
        output = (result.output or "") if result else ""
        exit_code = _exit_code(output)
        note = ""
        if result is None:
            note = "no result recorded"
        elif exit_code is None:
            note = output.strip().splitlines()[0][:_NOTE_CHARS] if output.strip() else "failed"
        ran.append(CommandRun(step=call.step, command=command, exit_code=exit_code, note=note))
    return ran


def files_written(records: Iterable[TrajectoryRecord]) -> list[str]:
    """Paths a writing tool changed (its result succeeded), each once, in first order."""
    records = list(records)
    results = _results(records)
    written: dict[str, None] = {}
    for call in _calls(records, WRITING_TOOLS):
        path = call.input.get("path") if isinstance(call.input, dict) else None
        result = results.get(call.tool_use_id or "")
        if isinstance(path, str) and result is not None and result.ok:
            written[path.removeprefix("./")] = None
    return list(written)


def outside_declared(paths: Iterable[str], declared: Collection[str]) -> list[str]:
    """The paths none of `declared` covers (a declared file itself, or a declared directory
    ending in `/` and what is under it), the loop's own files apart; none when nothing is
    declared, since then nothing bounds the task."""
    if not declared:
        return []
    files = {d.removeprefix("./") for d in declared if not d.endswith("/")}
    folders = tuple(d.removeprefix("./") for d in declared if d.endswith("/"))
    outside: dict[str, None] = {}
    for path in paths:
        path = path.removeprefix("./")
        if path in files or path.startswith(folders) or _is_loop_path(path):
            continue
        outside[path] = None
    return sorted(outside)


def _is_loop_path(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in LOOP_PATHS)


def _calls(records: Sequence[TrajectoryRecord], tools: Collection[str]) -> list[TrajectoryRecord]:
    return [r for r in records if r.kind == "tool_call" and r.tool in tools]


def _results(records: Sequence[TrajectoryRecord]) -> dict[str, TrajectoryRecord]:
    return {r.tool_use_id: r for r in records if r.kind == "tool_result" and r.tool_use_id}


def _exit_code(output: str) -> int | None:
    found = _EXIT.match(output)
    return int(found.group(1)) if found else None
