"""What each workspace tool does once the guard has let its call through: read, write,
edit, list, search, run a command. Every outcome is a `ToolResult`, failures included."""

from __future__ import annotations

import fnmatch
import io
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from loopworks.agent.tools.calls import (
    COMMAND_OUTPUT_CAP_BYTES,
    LIST_CAP_ENTRIES,
    READ_CAP_BYTES,
    SEARCH_CAP_MATCHES,
    SEARCH_CHUNK_COST,
    SEARCH_CHUNK_LINES,
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
    command_ended,
)
from loopworks.agent.tools.guard import ToolDenied, ToolGuard
from loopworks.checks.runner import run_command_check
from loopworks.schemas.patterns import (
    CompiledPattern,
    UnsupportedPattern,
    compile_pattern,
    match_cost,
)
from loopworks.schemas.rules import CommandCheck
from loopworks.schemas.tasks import orchestrator_refusal, orchestrator_restored
from loopworks.workspace import files
from loopworks.workspace.graph_records import restore_record
from loopworks.workspace.runner import GitError

logger = logging.getLogger(__name__)

_BINARY_SNIFF_BYTES = 8192


def fail(message: str) -> ToolResult:
    return ToolResult(ok=False, content=message)


def _is_binary(reader: IO[bytes]) -> bool:
    head = reader.read(_BINARY_SNIFF_BYTES)
    reader.seek(0)
    return b"\x00" in head


def _relative(guard: ToolGuard, path: str, *, writing: bool = False) -> str:
    """The guard's verdict on a model's path, as the path the file I/O then opens: the
    guard's policy (no .git, no records), then workspace/files.py's (no link out of the
    workspace, checked again at the open, so a link swapped in since is refused too)."""
    target = guard.writable(path) if writing else guard.path(path)
    return guard.relative(target)


def _absent(root: Path, rel: str, path: str) -> ToolResult:
    return fail(f"{path} is not a file" if files.lexists(root, rel) else f"{path} not found")


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
    rel = _relative(guard, args.path)
    try:
        with files.open_read(guard.root, rel) as (reader, _):
            if _is_binary(reader):
                return fail(f"{args.path} is a binary file; read_file shows text files only")
            text = io.TextIOWrapper(reader, encoding="utf-8", errors="replace", newline="")
            return _read_lines(text, args)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return _absent(guard.root, rel, args.path)


def _read_lines(fh: IO[str], args: ReadFileArgs) -> ToolResult:
    out: list[str] = []
    size = 0
    lineno = 0
    stop: str | None = None
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


def write_file(guard: ToolGuard, args: WriteFileArgs) -> ToolResult:
    data = args.content.encode("utf-8")
    if len(data) > WRITE_CAP_BYTES:
        return fail(
            f"content is {len(data)} bytes; write_file accepts at most {WRITE_CAP_BYTES} bytes"
        )
    rel = _relative(guard, args.path, writing=True)
    if rel == ".":
        return fail(f"{args.path} is a directory")
    try:
        existed = files.write_bytes(guard.root, rel, data)
    except IsADirectoryError:
        return fail(f"{args.path} is a directory")
    verb = "overwrote" if existed else "created"
    return ToolResult(ok=True, content=f"{verb} {args.path} ({len(data)} bytes)")


def edit_file(guard: ToolGuard, args: EditFileArgs) -> ToolResult:
    rel = _relative(guard, args.path, writing=True)
    try:
        data = files.read_bytes(guard.root, rel, WRITE_CAP_BYTES)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return _absent(guard.root, rel, args.path)
    except files.TooLarge:
        return fail(f"{args.path} is larger than {WRITE_CAP_BYTES} bytes; too large to edit")
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        return fail(f"{args.path} is a binary file; edit_file edits text files only")
    try:
        text = data.decode("utf-8")
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
    edited = text.replace(args.old, args.new, 1).encode("utf-8")
    if len(edited) > WRITE_CAP_BYTES:
        return fail(f"the edited file would exceed {WRITE_CAP_BYTES} bytes")
    files.write_bytes(guard.root, rel, edited)
    return ToolResult(ok=True, content=f"replaced 1 occurrence in {args.path}")


def _walk(root: Path, rel: str) -> Iterator[tuple[str, bool] | None]:
    """(path, is a symlink) of the files and symlinks under `rel`, sorted, skipping .git
    and following no symlink (`files.walk`). After WALK_CAP_FILES entries it yields None,
    meaning "there is more", and stops."""
    for seen, entry in enumerate(files.walk(root, "" if rel == "." else rel), start=1):
        if seen > WALK_CAP_FILES:
            yield None
            return
        yield entry


def _matches(rel: str, pattern: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return fnmatch.fnmatchcase(rel if "/" in pattern else name, pattern)


def list_files(guard: ToolGuard, args: ListFilesArgs) -> ToolResult:
    rel = _relative(guard, args.path)
    if not files.lexists(guard.root, rel) and rel != ".":
        return fail(f"{args.path} not found")
    found: list[str] = []
    more = False
    for entry in _walk(guard.root, rel):
        if entry is None:
            more = True
            break
        path, link = entry
        if not _matches(path, args.pattern):
            continue
        if len(found) >= LIST_CAP_ENTRIES:
            more = True
            break
        found.append(path + ("@" if link else ""))
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
    """Lines matching the pattern, on RE2 (`schemas.patterns`): a model's pattern cannot
    hang the worker, and the search stops after `SEARCH_TIME_CAP_SECONDS` saying so, the
    clock read between files and between chunks of lines within one."""
    try:
        regex = compile_pattern(args.pattern)
    except UnsupportedPattern as exc:
        return fail(f"invalid regular expression {args.pattern!r}: {exc}")
    rel = _relative(guard, args.path)
    if not files.lexists(guard.root, rel) and rel != ".":
        return fail(f"{args.path} not found")
    hits: list[str] = []
    skipped: list[str] = []
    size = 0
    more = timed_out = False
    deadline = time.monotonic() + SEARCH_TIME_CAP_SECONDS
    for entry in _walk(guard.root, rel):
        if entry is None:
            more = True
            break
        if time.monotonic() > deadline:
            more = timed_out = True
            break
        path, _ = entry
        if not fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], args.glob):
            continue
        try:
            guard.path(path)  # nothing in .git, even through a link inside
            searched = _search_file(guard.root, path, regex, deadline)
        except (ToolDenied, files.UnsafePath, OSError):
            continue  # a symlink out of the workspace, a FIFO, a file gone: not searched
        skipped += [f"{path}:{lineno}" for lineno in searched.too_costly]
        for lineno, text in searched.found:
            hit = f"{path}:{lineno}: {text}"
            if len(hits) >= SEARCH_CAP_MATCHES or size + len(hit) > READ_CAP_BYTES:
                more = True
                break
            hits.append(hit)
            size += len(hit) + 1
        if searched.timed_out:
            more = timed_out = True
        if more:
            break
    return _search_result(args, hits, more, timed_out, skipped)


def _search_result(
    args: SearchArgs, hits: list[str], more: bool, timed_out: bool, skipped: list[str]
) -> ToolResult:
    """The matching lines, then why the search may have missed some: the time cap, and
    lines too long for the pattern's cost (`SEARCH_CHUNK_COST`)."""
    result = _listing(
        hits,
        more and not timed_out,
        f"no matches for {args.pattern!r} under {args.path}",
        "matches; narrow the pattern, path or glob",
    )
    notes = []
    if timed_out:
        notes.append(
            f"[stopped at the search's {SEARCH_TIME_CAP_SECONDS:g} s time cap; files and lines "
            "after that were not searched: narrow the path or glob]"
        )
    if skipped:
        shown = ", ".join(skipped[:5]) + (
            f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        )
        notes.append(
            f"[not searched, too long for this pattern: {shown}; a simpler pattern (fewer or "
            "smaller repetitions) can search them]"
        )
    if not notes:
        return result
    return ToolResult(ok=True, content="\n".join([result.content, *notes]))


@dataclass
class _FileSearch:
    found: list[tuple[int, str]] = field(default_factory=list)
    # Lines whose search could cost more than SEARCH_CHUNK_COST: not searched.
    too_costly: list[int] = field(default_factory=list)
    timed_out: bool = False


def _search_file(root: Path, path: str, regex: CompiledPattern, deadline: float) -> _FileSearch:
    """(line number, line cut to SEARCH_LINE_CHARS) of the file's matching lines; none
    for a binary file or one over SEARCH_FILE_CAP_BYTES. The clock is read before a line
    would take the work since its last reading past SEARCH_CHUNK_COST (or
    SEARCH_CHUNK_LINES lines), so a long file, or one long line, cannot carry the search
    past its deadline by more than one chunk."""
    searched = _FileSearch()
    with files.open_read(root, path) as (reader, size):
        if size > SEARCH_FILE_CAP_BYTES or _is_binary(reader):
            return searched
        text = io.TextIOWrapper(reader, encoding="utf-8", errors="replace")
        work = lines = 0
        for lineno, line in enumerate(text, start=1):
            # Without its line break: RE2's `$` is the end of the text only.
            cut = line.rstrip("\r\n")
            cost = match_cost(regex, len(cut.encode("utf-8")))
            if cost > SEARCH_CHUNK_COST:
                searched.too_costly.append(lineno)
                continue
            work, lines = work + cost, lines + 1
            if work > SEARCH_CHUNK_COST or lines > SEARCH_CHUNK_LINES:
                if time.monotonic() > deadline:
                    searched.timed_out = True
                    return searched
                work, lines = cost, 1
            if regex.search(cut):
                shown = cut if len(cut) <= SEARCH_LINE_CHARS else cut[:SEARCH_LINE_CHARS] + "..."
                searched.found.append((lineno, shown))
    return searched


def run_command(guard: ToolGuard, args: RunCommandArgs) -> ToolResult:
    # The checks runner runs it in the sandbox (or, with LOOPS_SANDBOX=off, as the worker's user)
    # with an environment of PATH, HOME, LANG and COMMAND_ENV only, and kills all it started
    # on timeout.
    check = CommandCheck(command=guard.command(args.command), timeout_seconds=args.timeout_seconds)
    records = guard.graph_records()
    try:
        outcome = run_command_check(check, guard.root, output_cap=COMMAND_OUTPUT_CAP_BYTES)
    except OSError as exc:
        return fail(f"could not run the command: {exc}")
    # A task graph's loop: what the command changed of the graph's record is put back.
    changed = guard.records_changed(records) if guard.graph_task else []
    restored, note = _record_put_back(guard, changed) if changed else (True, "")
    if outcome.timed_out:
        return fail(f"{outcome.detail}\n{note}" if note else outcome.detail)
    # The runner's detail is "exit code N[ (expected 0)]\n<output>".
    output = outcome.detail.partition("\n")[2]
    assert outcome.exit_code is not None  # only a timeout has none
    content = f"{command_ended(outcome.exit_code)}\n{output}"
    if note:
        content = f"{content.rstrip()}\n{note}"
    return ToolResult(ok=outcome.exit_code == 0 and restored, content=content)


def _record_put_back(guard: ToolGuard, changed: list[str]) -> tuple[bool, str]:
    """The graph's record as the task's base has it again after a command changed
    `changed` of it (docs/graphs.md#the-ledger-is-the-orchestrators-alone): whether it
    is, and what the model is told. Should it not be, the model is asked to undo it."""
    try:
        undone = restore_record(guard.root, guard.graph_base, changed)
    except (GitError, files.UnsafePath, OSError) as exc:
        logger.warning("could not put back the graph's record (%s): %s", ", ".join(changed), exc)
        return False, (
            f"refusing: the command changed {orchestrator_refusal(changed)} Undo it before "
            "you finish, or the task is refused at its merge: remove a file the command "
            "added, and restore one it changed or deleted with `git show HEAD:<path> > <path>`."
        )
    return True, orchestrator_restored(undone) if undone else ""


# -- the registry ---------------------------------------------------------------------------------
