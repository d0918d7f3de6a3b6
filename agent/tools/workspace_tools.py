"""The producer's tools over a run's workspace: read, write, edit, list, search, run a command.

Every call passes `ToolGuard` (seed 003's PreToolUse policy). Every outcome, a refusal or a
failure included, is a `ToolResult`: a denied call is an error for the model to read, never an
exception for the agent loop. `TOOLS` describes the tools for the Anthropic Messages API
(`tools=[spec.to_api() for spec in TOOLS.values()]`) and `execute` runs one tool call.

Plain synchronous code: the agent loop's activity calls it from a thread.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loopworks.agent.tools.guard import ToolDenied, ToolGuard, tool_env
from loopworks.checks.runner import run_command_check
from loopworks.schemas.rules import CommandCheck

logger = logging.getLogger(__name__)

READ_CAP_BYTES = 64 * 1024
READ_DEFAULT_LINES = 2000
WRITE_CAP_BYTES = 1024 * 1024
LIST_CAP_ENTRIES = 1000
SEARCH_CAP_MATCHES = 200
SEARCH_LINE_CHARS = 300
SEARCH_FILE_CAP_BYTES = 2 * 1024 * 1024
# Files looked at by one list or search, matching or not: bounds the walk of a huge tree.
WALK_CAP_FILES = 50_000
COMMAND_OUTPUT_CAP_BYTES = 32 * 1024
COMMAND_DEFAULT_TIMEOUT = 60.0
COMMAND_MAX_TIMEOUT = 600.0
_BINARY_SNIFF_BYTES = 8192


class ToolResult(BaseModel):
    """What the model gets back: `ok=False` marks a refusal, a failure or a failing command."""

    ok: bool
    content: str


# -- arguments ------------------------------------------------------------------------------------


class _Args(BaseModel):
    # A misspelt argument is an error the model can read, not silently ignored.
    model_config = ConfigDict(extra="forbid")


class ReadFileArgs(_Args):
    path: str = Field(description="File path relative to the workspace root.")
    offset: int = Field(default=0, ge=0, description="Number of lines to skip before reading.")
    limit: int = Field(
        default=READ_DEFAULT_LINES, ge=1, le=100_000, description="Maximum number of lines."
    )


class WriteFileArgs(_Args):
    path: str = Field(description="File path relative to the workspace root.")
    content: str = Field(description="The file's whole new content.")


class EditFileArgs(_Args):
    path: str = Field(description="File path relative to the workspace root.")
    old: str = Field(
        min_length=1,
        description="Exact text to replace; it must occur exactly once in the file.",
    )
    new: str = Field(description="Replacement text.")


class ListFilesArgs(_Args):
    path: str = Field(default=".", description="Directory relative to the workspace root.")
    pattern: str = Field(
        default="*",
        description="Shell glob matched against file names (or relative paths if it has a '/').",
    )


class SearchArgs(_Args):
    pattern: str = Field(
        min_length=1, description="Python regular expression searched line by line."
    )
    path: str = Field(default=".", description="File or directory relative to the workspace root.")
    glob: str = Field(default="*", description="Only search files whose name matches this glob.")


class RunCommandArgs(_Args):
    command: str = Field(min_length=1, description="A bash command, run in the workspace root.")
    timeout_seconds: float = Field(
        default=COMMAND_DEFAULT_TIMEOUT,
        gt=0,
        le=COMMAND_MAX_TIMEOUT,
        description="Seconds before the command and everything it started are killed.",
    )


# -- the tools ------------------------------------------------------------------------------------


def _fail(message: str) -> ToolResult:
    return ToolResult(ok=False, content=message)


def _is_binary(target: Path) -> bool:
    with target.open("rb") as fh:
        return b"\x00" in fh.read(_BINARY_SNIFF_BYTES)


def _lines(fh: IO[str], cap: int) -> Iterator[tuple[str, bool]]:
    """(line, whole) pairs of a text file; a line longer than `cap` is cut (whole=False)."""
    while True:
        line = fh.readline(cap + 1)
        if not line:
            return
        if len(line) <= cap or line.endswith(("\n", "\r")):
            yield line, True
            continue
        head = line
        while line and not line.endswith(("\n", "\r")):  # skip the rest of the long line
            line = fh.readline(cap + 1)
        yield head[:cap], False


def _read_file(guard: ToolGuard, args: ReadFileArgs) -> ToolResult:
    target = guard.path(args.path)
    if not target.is_file():
        return _fail(f"{args.path} is not a file" if target.exists() else f"{args.path} not found")
    if _is_binary(target):
        return _fail(f"{args.path} is a binary file; read_file shows text files only")
    out: list[str] = []
    size = 0
    lineno = 0
    stop: str | None = None
    with target.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        for line, whole in _lines(fh, READ_CAP_BYTES):
            lineno += 1
            if lineno <= args.offset:
                continue
            if len(out) >= args.limit:
                stop = f"limit of {args.limit} lines reached"
                break
            encoded = line.encode("utf-8")
            if size + len(encoded) > READ_CAP_BYTES:
                if out:
                    stop = f"{READ_CAP_BYTES // 1024} KiB cap reached"
                    break
                # One line bigger than the cap on its own: show its beginning.
                line = encoded[: READ_CAP_BYTES - 256].decode("utf-8", errors="ignore")
                whole = False
            if not whole:
                line = line.rstrip("\r\n") + f"\n[line {lineno} is longer; cut here]\n"
            out.append(line)
            size += len(line.encode("utf-8"))
    if not out:
        if lineno == 0:
            return ToolResult(ok=True, content=f"[{args.path} is empty]")
        return _fail(f"offset {args.offset} is past the end of {args.path} ({lineno} lines)")
    content = "".join(out)
    if stop is not None:
        first, last = args.offset + 1, args.offset + len(out)
        content += (
            f"\n[truncated ({stop}): showed lines {first}-{last} of {args.path}; "
            f"call read_file with offset={last} to read on]"
        )
    return ToolResult(ok=True, content=content)


def _open_for_write(target: Path) -> int:
    # The guard resolved every symlink; O_NOFOLLOW refuses one swapped in since.
    return os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)


def _write_bytes(target: Path, data: bytes) -> None:
    fd = _open_for_write(target)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _write_file(guard: ToolGuard, args: WriteFileArgs) -> ToolResult:
    data = args.content.encode("utf-8")
    if len(data) > WRITE_CAP_BYTES:
        return _fail(
            f"content is {len(data)} bytes; write_file accepts at most {WRITE_CAP_BYTES} bytes"
        )
    target = guard.path(args.path)
    if target == guard.root or target.is_dir():
        return _fail(f"{args.path} is a directory")
    existed = target.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    _write_bytes(target, data)
    verb = "overwrote" if existed else "created"
    return ToolResult(ok=True, content=f"{verb} {args.path} ({len(data)} bytes)")


def _edit_file(guard: ToolGuard, args: EditFileArgs) -> ToolResult:
    target = guard.path(args.path)
    if not target.is_file():
        return _fail(f"{args.path} is not a file" if target.exists() else f"{args.path} not found")
    if target.stat().st_size > WRITE_CAP_BYTES:
        return _fail(f"{args.path} is larger than {WRITE_CAP_BYTES} bytes; too large to edit")
    if _is_binary(target):
        return _fail(f"{args.path} is a binary file; edit_file edits text files only")
    try:
        text = target.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return _fail(f"{args.path} is not UTF-8 text; edit_file edits text files only")
    if args.old == args.new:
        return _fail("old and new are identical; nothing to change")
    count = text.count(args.old)
    if count == 0:
        return _fail(f"old text not found in {args.path} (0 matches); copy it exactly")
    if count > 1:
        return _fail(
            f"old text occurs {count} times in {args.path}; it must be unique: "
            "include more of the surrounding lines"
        )
    data = text.replace(args.old, args.new, 1).encode("utf-8")
    if len(data) > WRITE_CAP_BYTES:
        return _fail(f"the edited file would exceed {WRITE_CAP_BYTES} bytes")
    _write_bytes(target, data)
    return ToolResult(ok=True, content=f"replaced 1 occurrence in {args.path}")


def _walk(top: Path) -> Iterator[Path | None]:
    """Files (and symlinks) under `top`, sorted, skipping .git and not following symlinks.

    After WALK_CAP_FILES entries it yields None, meaning "there is more", and stops.
    """
    if not top.is_dir():
        yield top
        return
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d.lower() != ".git")
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        for name in sorted([*filenames, *links]):
            if name.lower() == ".git":
                continue
            seen += 1
            if seen > WALK_CAP_FILES:
                yield None
                return
            yield here / name


def _matches(rel: str, pattern: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return fnmatch.fnmatchcase(rel if "/" in pattern else name, pattern)


def _list_files(guard: ToolGuard, args: ListFilesArgs) -> ToolResult:
    top = guard.path(args.path)
    if not top.exists():
        return _fail(f"{args.path} not found")
    found: list[str] = []
    more = False
    for entry in _walk(top):
        if entry is None:
            more = True
            break
        rel = guard.relative(entry)
        if not _matches(rel, args.pattern):
            continue
        if len(found) >= LIST_CAP_ENTRIES:
            more = True
            break
        found.append(rel + ("@" if entry.is_symlink() else ""))
    if not found:
        return ToolResult(ok=True, content=f"no files matching {args.pattern!r} under {args.path}")
    content = "\n".join(found)
    if more:
        content += f"\n[truncated: first {len(found)} entries; narrow the path or the pattern]"
    return ToolResult(ok=True, content=content)


def _search(guard: ToolGuard, args: SearchArgs) -> ToolResult:
    try:
        regex = re.compile(args.pattern)
    except re.error as exc:
        return _fail(f"invalid regular expression {args.pattern!r}: {exc}")
    top = guard.path(args.path)
    if not top.exists():
        return _fail(f"{args.path} not found")
    hits: list[str] = []
    size = 0
    more = False
    for entry in _walk(top):
        if entry is None:
            more = True
            break
        rel = guard.relative(entry)
        if not fnmatch.fnmatchcase(entry.name, args.glob):
            continue
        try:
            target = guard.path(rel)  # a symlink out of the workspace is not searched
        except ToolDenied:
            continue
        if not target.is_file() or target.stat().st_size > SEARCH_FILE_CAP_BYTES:
            continue
        if _is_binary(target):
            continue
        with target.open("r", encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not regex.search(line):
                    continue
                text = line.rstrip("\r\n")
                if len(text) > SEARCH_LINE_CHARS:
                    text = text[:SEARCH_LINE_CHARS] + "..."
                hit = f"{rel}:{lineno}: {text}"
                if len(hits) >= SEARCH_CAP_MATCHES or size + len(hit) > READ_CAP_BYTES:
                    more = True
                    break
                hits.append(hit)
                size += len(hit) + 1
        if more:
            break
    if not hits:
        return ToolResult(ok=True, content=f"no matches for {args.pattern!r} under {args.path}")
    content = "\n".join(hits)
    if more:
        content += f"\n[truncated: first {len(hits)} matches; narrow the pattern, path or glob]"
    return ToolResult(ok=True, content=content)


def _run_command(guard: ToolGuard, args: RunCommandArgs) -> ToolResult:
    command = guard.command(args.command)
    # The checks runner already scrubs the environment; `env -i` makes tool_env the whole of it
    # whatever that runner passes, and `exec` keeps the command in the group it kills on timeout.
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in tool_env(guard.root).items())
    wrapped = f"exec env -i {assignments} bash -c {shlex.quote(command)}"
    check = CommandCheck(command=wrapped, timeout_seconds=args.timeout_seconds)
    try:
        outcome = run_command_check(check, guard.root, output_cap=COMMAND_OUTPUT_CAP_BYTES)
    except OSError as exc:
        return _fail(f"could not run the command: {exc}")
    if outcome.timed_out:
        return _fail(outcome.detail)
    # The runner's detail is "exit code N[ (expected 0)]\n<output>".
    output = outcome.detail.partition("\n")[2]
    return ToolResult(ok=outcome.exit_code == 0, content=f"exit code {outcome.exit_code}\n{output}")


# -- the registry ---------------------------------------------------------------------------------

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
        _read_file,
    ),
    ToolSpec(
        "write_file",
        "Create or overwrite a file of the workspace with `content` (at most 1 MiB), creating "
        "missing parent directories. Prefer edit_file for changing part of an existing file.",
        WriteFileArgs,
        _write_file,
    ),
    ToolSpec(
        "edit_file",
        "Replace the one occurrence of `old` in a file with `new`. Fails, saying how many "
        "matches there are, when `old` occurs zero or several times: then include more "
        "surrounding text to make it unique.",
        EditFileArgs,
        _edit_file,
    ),
    ToolSpec(
        "list_files",
        "List the files under a directory of the workspace, recursively (skipping .git), "
        f"as paths relative to the workspace root; at most {LIST_CAP_ENTRIES} entries. "
        "Symbolic links end with '@'.",
        ListFilesArgs,
        _list_files,
    ),
    ToolSpec(
        "search",
        "Search the workspace's text files for a regular expression (Python syntax; use (?i) "
        "for case-insensitive). Returns `path:line: text` for each matching line, at most "
        f"{SEARCH_CAP_MATCHES}; skips .git, binary files and files over 2 MiB.",
        SearchArgs,
        _search,
    ),
    ToolSpec(
        "run_command",
        "Run a bash command in the workspace root and return its exit code and combined "
        "output (the last 32 KiB). No network, no secrets in the environment; destructive "
        "commands, commands outside the workspace and git commands that change history, "
        "configuration or remotes are refused. The command and everything it started are "
        "killed after `timeout_seconds`.",
        RunCommandArgs,
        _run_command,
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


def execute(workspace: Path, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
    """Run one tool call in `workspace`. Never raises: every problem is an `ok=False` result."""
    spec = TOOLS.get(name)
    if spec is None:
        return _fail(f"unknown tool {name!r}; the tools are: {', '.join(TOOLS)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return _fail(f"invalid arguments for {name}: expected an object")
    try:
        args = spec.args_model.model_validate(dict(arguments))
    except ValidationError as exc:
        return _fail(_validation_message(name, exc))
    try:
        guard = ToolGuard(workspace)
        if not guard.root.is_dir():
            return _fail("the workspace does not exist")
        return spec.run(guard, args)
    except ToolDenied as exc:
        logger.info("tool %s denied: %s", name, exc)
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{name} failed: {exc.strerror or exc}")
    except Exception as exc:  # a tool bug must not crash the agent loop
        logger.exception("tool %s failed", name)
        return _fail(f"{name} failed: {type(exc).__name__}: {exc}")


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
