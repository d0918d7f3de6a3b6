"""A tool call's arguments and its result: what the model sends and what it reads back,
one model per tool (the schemas the model is shown), and the caps every tool keeps to."""

from __future__ import annotations

import signal

from pydantic import BaseModel, ConfigDict, Field

from loopworks.schemas.patterns import PATTERN_MAX_CHARS

READ_CAP_BYTES = 64 * 1024
READ_DEFAULT_LINES = 2000
WRITE_CAP_BYTES = 1024 * 1024
LIST_CAP_ENTRIES = 1000
SEARCH_CAP_MATCHES = 200
SEARCH_LINE_CHARS = 300
SEARCH_FILE_CAP_BYTES = 2 * 1024 * 1024
# Files looked at by one list or search, matching or not: bounds the walk of a huge tree.
WALK_CAP_FILES = 50_000
# One search's time: RE2 is linear in what it reads, but a tree can be large. The clock is
# read between files and, inside a file, between chunks of lines no costlier together than
# SEARCH_CHUNK_COST, so a search ends within about a second of its cap.
SEARCH_TIME_CAP_SECONDS = 10.0
# The most work (`schemas.patterns.match_cost`, about 6 ns a unit on RE2's slow path)
# between two readings of the clock; a single line costlier than this is not searched
# (a 2 MiB line takes a pattern of up to 64 instructions; `\bfoo\w*` is 14).
SEARCH_CHUNK_COST = 1 << 27
SEARCH_CHUNK_LINES = 1000
COMMAND_OUTPUT_CAP_BYTES = 32 * 1024
COMMAND_DEFAULT_TIMEOUT = 60.0
COMMAND_MAX_TIMEOUT = 600.0


def command_ended(exit_code: int) -> str:
    """The first line of the command tool's result, how the command ended: `exit code N`,
    or `killed by signal N (SIGNAME)` when a signal ended it before it could exit (the
    process's status is then -N). A timeout's line is the checks runner's, `timed out after
    Ns ...`. agent/actions.py reads these lines back from a trajectory."""
    if exit_code >= 0:
        return f"exit code {exit_code}"
    number = -exit_code
    return f"killed by signal {number} ({signal_name(number)})"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


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
        min_length=1,
        max_length=PATTERN_MAX_CHARS,
        description="Regular expression in RE2 syntax (Python's, without backreferences or "
        "lookaround) searched line by line.",
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
