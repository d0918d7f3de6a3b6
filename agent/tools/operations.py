"""What each workspace tool does once the guard has let its call through: read, write,
edit, list, search, run a command. Every outcome is a `ToolResult`, failures included."""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from loopworks.agent.tools.calls import (
    COMMAND_OUTPUT_CAP_BYTES,
    LIST_CAP_ENTRIES,
    READ_CAP_BYTES,
    SEARCH_CAP_MATCHES,
    SEARCH_FILE_CAP_BYTES,
    SEARCH_LINE_CHARS,
    SEARCH_TIME_CAP_SECONDS,
    WALK_CAP_FILES,
    WRITE_CAP_BYTES,
    EditFileArgs,
    ListFilesArgs,
    ReadFileArgs,
    RunCommandArgs,
    SearchArgs,
    ToolResult,
    WriteFileArgs,
)
from loopworks.agent.tools.guard import ToolDenied, ToolGuard
from loopworks.checks.patterns import UnsupportedPattern, compile_pattern
from loopworks.checks.runner import run_command_check
from loopworks.schemas.rules import CommandCheck

logger = logging.getLogger(__name__)

_BINARY_SNIFF_BYTES = 8192


def fail(message: str) -> ToolResult:
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


def read_file(guard: ToolGuard, args: ReadFileArgs) -> ToolResult:
    target = guard.path(args.path)
    if not target.is_file():
        return fail(f"{args.path} is not a file" if target.exists() else f"{args.path} not found")
    if _is_binary(target):
        return fail(f"{args.path} is a binary file; read_file shows text files only")
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
        return fail(f"offset {args.offset} is past the end of {args.path} ({lineno} lines)")
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


def write_file(guard: ToolGuard, args: WriteFileArgs) -> ToolResult:
    data = args.content.encode("utf-8")
    if len(data) > WRITE_CAP_BYTES:
        return fail(
            f"content is {len(data)} bytes; write_file accepts at most {WRITE_CAP_BYTES} bytes"
        )
    target = guard.writable(args.path)
    if target == guard.root or target.is_dir():
        return fail(f"{args.path} is a directory")
    existed = target.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    _write_bytes(target, data)
    verb = "overwrote" if existed else "created"
    return ToolResult(ok=True, content=f"{verb} {args.path} ({len(data)} bytes)")


def edit_file(guard: ToolGuard, args: EditFileArgs) -> ToolResult:
    target = guard.writable(args.path)
    if not target.is_file():
        return fail(f"{args.path} is not a file" if target.exists() else f"{args.path} not found")
    if target.stat().st_size > WRITE_CAP_BYTES:
        return fail(f"{args.path} is larger than {WRITE_CAP_BYTES} bytes; too large to edit")
    if _is_binary(target):
        return fail(f"{args.path} is a binary file; edit_file edits text files only")
    try:
        text = target.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return fail(f"{args.path} is not UTF-8 text; edit_file edits text files only")
    if args.old == args.new:
        return fail("old and new are identical; nothing to change")
    count = text.count(args.old)
    if count == 0:
        return fail(f"old text not found in {args.path} (0 matches); copy it exactly")
    if count > 1:
        return fail(
            f"old text occurs {count} times in {args.path}; it must be unique: "
            "include more of the surrounding lines"
        )
    data = text.replace(args.old, args.new, 1).encode("utf-8")
    if len(data) > WRITE_CAP_BYTES:
        return fail(f"the edited file would exceed {WRITE_CAP_BYTES} bytes")
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


def list_files(guard: ToolGuard, args: ListFilesArgs) -> ToolResult:
    top = guard.path(args.path)
    if not top.exists():
        return fail(f"{args.path} not found")
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
    return _listing(
        found,
        more,
        f"no files matching {args.pattern!r} under {args.path}",
        "entries; narrow the path or the pattern",
    )


def _listing(lines: list[str], more: bool, none: str, truncated: str) -> ToolResult:
    """One line per entry; a capped listing says so, and how to narrow it."""
    if not lines:
        return ToolResult(ok=True, content=none)
    content = "\n".join(lines)
    if more:
        content += f"\n[truncated: first {len(lines)} {truncated}]"
    return ToolResult(ok=True, content=content)


def search(guard: ToolGuard, args: SearchArgs) -> ToolResult:
    """Lines matching the pattern, on RE2 (`checks.patterns`): a model's pattern cannot
    hang the worker, and the walk stops after `SEARCH_TIME_CAP_SECONDS` saying so."""
    try:
        regex = compile_pattern(args.pattern)
    except UnsupportedPattern as exc:
        return fail(f"invalid regular expression {args.pattern!r}: {exc}")
    top = guard.path(args.path)
    if not top.exists():
        return fail(f"{args.path} not found")
    hits: list[str] = []
    size = 0
    more = False
    deadline = time.monotonic() + SEARCH_TIME_CAP_SECONDS
    for entry in _walk(top):
        if entry is None or time.monotonic() > deadline:
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
                # Without its line break: RE2's `$` is the end of the text only.
                text = line.rstrip("\r\n")
                if not regex.search(text):
                    continue
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
    return _listing(
        hits,
        more,
        f"no matches for {args.pattern!r} under {args.path}",
        "matches; narrow the pattern, path or glob",
    )


def run_command(guard: ToolGuard, args: RunCommandArgs) -> ToolResult:
    # The checks runner runs it in the sandbox (or, with LOOPS_SANDBOX=off, as the worker's user)
    # with an environment of PATH, HOME and LANG only, and kills all it started on timeout.
    check = CommandCheck(command=guard.command(args.command), timeout_seconds=args.timeout_seconds)
    try:
        outcome = run_command_check(check, guard.root, output_cap=COMMAND_OUTPUT_CAP_BYTES)
    except OSError as exc:
        return fail(f"could not run the command: {exc}")
    if outcome.timed_out:
        return fail(outcome.detail)
    # The runner's detail is "exit code N[ (expected 0)]\n<output>".
    output = outcome.detail.partition("\n")[2]
    return ToolResult(ok=outcome.exit_code == 0, content=f"exit code {outcome.exit_code}\n{output}")


# -- the registry ---------------------------------------------------------------------------------
