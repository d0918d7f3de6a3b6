"""The producer's tools over a run's workspace: read, write, edit, list, search, run a command.

Every call passes `ToolGuard` before it runs (docs/workspace.md#agent-tools). Every outcome,
a refusal or a failure included, is a `ToolResult`: a denied call is an error for the model
to read, never an exception for the agent loop. `TOOLS` describes each tool (its name,
description and the JSON schema of its arguments), from which the agent loop makes the
model's tool definitions (`tool_definitions` gives them in the Messages API's own shape),
and `execute` runs one tool call.

Plain synchronous code: the agent loop's activity calls it from a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from loopworks.agent.tools import operations
from loopworks.agent.tools.calls import (
    COMMAND_DEFAULT_TIMEOUT,
    LIST_CAP_ENTRIES,
    READ_CAP_BYTES,
    READ_DEFAULT_LINES,
    SEARCH_CAP_MATCHES,
    SEARCH_TIME_CAP_SECONDS,
    EditFileArgs,
    ListFilesArgs,
    ReadFileArgs,
    RunCommandArgs,
    SearchArgs,
    ToolResult,
    WriteFileArgs,
)
from loopworks.agent.tools.guard import ToolDenied, ToolGuard
from loopworks.workspace.files import UnsafePath

logger = logging.getLogger(__name__)


A = TypeVar("A", bound=BaseModel)


@dataclass(frozen=True, eq=False)
class ToolSpec(Generic[A]):
    """One tool: what the model is told about it and how a call is run."""

    name: str
    description: str
    args_model: type[A]
    run: Callable[[ToolGuard, A], ToolResult]

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments, derived from its pydantic model."""
        return self.args_model.model_json_schema()

    def to_api(self) -> dict[str, Any]:
        """The tool as the Anthropic Messages API's `tools` list wants it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


_SPECS: tuple[ToolSpec[Any], ...] = (
    ToolSpec(
        "read_file",
        "Read a text file of the workspace. Returns its lines from `offset` (lines to skip) "
        f"up to `limit` lines, at most {READ_CAP_BYTES // 1024} KiB; a note at the end says "
        "how to read on when the output is truncated.",
        ReadFileArgs,
        operations.read_file,
    ),
    ToolSpec(
        "write_file",
        "Create or overwrite a file of the workspace with `content` (at most 1 MiB), creating "
        "missing parent directories. Prefer edit_file for changing part of an existing file.",
        WriteFileArgs,
        operations.write_file,
    ),
    ToolSpec(
        "edit_file",
        "Replace the one occurrence of `old` in a file with `new`. Fails, saying how many "
        "matches there are, when `old` occurs zero or several times: then include more "
        "surrounding text to make it unique.",
        EditFileArgs,
        operations.edit_file,
    ),
    ToolSpec(
        "list_files",
        "List the files under a directory of the workspace, recursively (skipping .git), "
        f"as paths relative to the workspace root; at most {LIST_CAP_ENTRIES} entries. "
        "Symbolic links end with '@'.",
        ListFilesArgs,
        operations.list_files,
    ),
    ToolSpec(
        "search",
        "Search the workspace's text files for a regular expression (RE2 syntax: Python's "
        "without lookaround or backreferences; use (?i) for case-insensitive). Returns "
        "`path:line: text` for each matching line, at most "
        f"{SEARCH_CAP_MATCHES}; skips .git, binary files and files over 2 MiB. It stops "
        f"after {SEARCH_TIME_CAP_SECONDS:g} s and skips lines too long for a costly pattern, "
        "saying so.",
        SearchArgs,
        operations.search,
    ),
    ToolSpec(
        "run_command",
        "Run a bash command in the workspace root and return how it ended (its exit code, "
        "or the signal or timeout that killed it) and its combined output (the last 32 KiB). "
        "It runs in a sandbox: no network, no secrets in the "
        "environment, only the workspace writable and its .git read-only. git may only read "
        "(status, diff, log, show, ...): loopworks commits what you leave in the working tree, "
        "so git commands that write, and paths inside .git, are refused. The command and "
        "everything it started are killed after `timeout_seconds`.",
        RunCommandArgs,
        operations.run_command,
    ),
)

TOOLS: dict[str, ToolSpec[Any]] = {spec.name: spec for spec in _SPECS}


def tool_definitions() -> list[dict[str, Any]]:
    """Every tool as the Anthropic Messages API's `tools` parameter wants them."""
    return [spec.to_api() for spec in TOOLS.values()]


def _validation_message(name: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return f"invalid arguments for {name}: " + "; ".join(problems)


def execute(
    workspace: Path,
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    graph_task: bool = False,
    graph_base: str | None = None,
) -> ToolResult:
    """Run one tool call in `workspace` (a task graph's loop's, with `graph_task`, the
    graph's record kept as `graph_base` has it: see `ToolGuard`). Never raises: every
    problem is an `ok=False` result."""
    spec = TOOLS.get(name)
    if spec is None:
        return operations.fail(f"unknown tool {name!r}; the tools are: {', '.join(TOOLS)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return operations.fail(f"invalid arguments for {name}: expected an object")
    try:
        args = spec.args_model.model_validate(dict(arguments))
    except ValidationError as exc:
        return operations.fail(_validation_message(name, exc))
    try:
        guard = ToolGuard(workspace, graph_task=graph_task, graph_base=graph_base)
        if not guard.root.is_dir():
            return operations.fail("the workspace does not exist")
        return spec.run(guard, args)
    except (ToolDenied, UnsafePath) as exc:
        logger.info("tool %s denied: %s", name, exc)
        return operations.fail(str(exc))
    except OSError as exc:
        return operations.fail(f"{name} failed: {exc.strerror or exc}")
    except Exception as exc:  # a tool bug must not crash the agent loop
        logger.exception("tool %s failed", name)
        return operations.fail(f"{name} failed: {type(exc).__name__}: {exc}")


# Direct calls, same checks and results as through execute().


def read_file(
    workspace: Path, path: str, offset: int = 0, limit: int = READ_DEFAULT_LINES
) -> ToolResult:
    return execute(workspace, "read_file", {"path": path, "offset": offset, "limit": limit})


def write_file(workspace: Path, path: str, content: str) -> ToolResult:
    return execute(workspace, "write_file", {"path": path, "content": content})


def edit_file(workspace: Path, path: str, old: str, new: str) -> ToolResult:
    return execute(workspace, "edit_file", {"path": path, "old": old, "new": new})


def list_files(workspace: Path, path: str = ".", pattern: str = "*") -> ToolResult:
    return execute(workspace, "list_files", {"path": path, "pattern": pattern})


def search(workspace: Path, pattern: str, path: str = ".", glob: str = "*") -> ToolResult:
    return execute(workspace, "search", {"pattern": pattern, "path": path, "glob": glob})


def run_command(
    workspace: Path, command: str, timeout_seconds: float = COMMAND_DEFAULT_TIMEOUT
) -> ToolResult:
    return execute(
        workspace, "run_command", {"command": command, "timeout_seconds": timeout_seconds}
    )
