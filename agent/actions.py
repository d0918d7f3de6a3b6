"""What an agent did, read back from its trajectory: the commands it ran with their exit
codes and the files it wrote. The custodiet audits these, not the agent's account.

Pure functions over `TrajectoryRecord`s: a call is paired with its result by its
`tool_use_id`; a call whose result is missing (the turn limit cut it) still counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence

from loopworks.agent.tools.calls import signal_name
from loopworks.agent.trajectory import TrajectoryRecord
from loopworks.schemas.actions import CommandRun

RUN_COMMAND = "run_command"
WRITING_TOOLS = frozenset({"write_file", "edit_file"})
# The command tool's result starts with how the command ended (agent/tools/calls.py,
# `command_ended`): "exit code N", "killed by signal N (NAME)", or the checks runner's
# "timed out after Ns ...". Anything else is a refusal or a failure to start it.
_EXIT = re.compile(r"^exit code (-?\d+)")
_SIGNAL = re.compile(r"^killed by signal (\d+)")
_TIMED_OUT = re.compile(r"^timed out after ")
# How pydantic-ai words a failed tool result for the model; trajectories written before
# results were recorded as the tool gave them hold a failed one this way.
_ERROR_NOTE = '{"error":"'
# What is shown of a command that did not run to an exit code (refused, timed out).
_NOTE_CHARS = 200
# The loop's own deliverable and records: every task writes them.
LOOP_PATHS = ("artifact.md", ".loops/")


def commands_run(records: Iterable[TrajectoryRecord]) -> list[CommandRun]:
    """Every command-tool call, in order, with how its result says it ended."""
    records = list(records)
    results = _results(records)
    ran: list[CommandRun] = []
    for call in _calls(records, {RUN_COMMAND}):
        command = call.input.get("command") if isinstance(call.input, dict) else None
        if not isinstance(command, str):
            continue
        result = results.get(call.tool_use_id or "")
        if result is None:
            ran.append(CommandRun(step=call.step, command=command, note="no result recorded"))
            continue
        ran.append(ended(call.step, command, _text(result)))
    return ran


def ended(step: str, command: str, output: str) -> CommandRun:
    """The command as its result's first line says it ended."""
    line = output.strip().splitlines()[0][:_NOTE_CHARS] if output.strip() else ""
    if found := _EXIT.match(output):
        code = int(found.group(1))
        if code >= 0:
            return CommandRun(step=step, command=command, exit_code=code)
        # Recorded before a signal was named: a process's status is minus its signal.
        return CommandRun(step=step, command=command, signal=signal_name(-code), note=line)
    if found := _SIGNAL.match(output):
        name = signal_name(int(found.group(1)))
        return CommandRun(step=step, command=command, signal=name, note=line)
    if _TIMED_OUT.match(output):
        return CommandRun(step=step, command=command, timed_out=True, note=line)
    return CommandRun(step=step, command=command, note=line or "failed")


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


def _text(result: TrajectoryRecord) -> str:
    """A tool result's text as the tool gave it, a failed one's unwrapped from the
    `{"error": ...}` note of older trajectories (whole, or cut by the record's cap)."""
    output = result.output or ""
    if result.ok is not False or not output.startswith(_ERROR_NOTE):
        return output
    try:
        note = json.loads(output)
    except ValueError:
        return output[len(_ERROR_NOTE) :].replace("\\n", "\n")
    error = note.get("error") if isinstance(note, dict) else None
    return error if isinstance(error, str) else output
