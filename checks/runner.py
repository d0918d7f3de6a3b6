"""Running concrete checks (command and pattern) against a workspace directory.

Plain synchronous code; EVALUATE's activities call it from a thread.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from loopworks.checks.bwrap import COMMAND_ENV
from loopworks.checks.output import collect, running_in
from loopworks.checks.redaction import worker_secrets
from loopworks.checks.sandbox import SandboxPolicy, run_sandboxed
from loopworks.schemas.patterns import (
    MATCH_COST_MAX,
    TEXT_MAX_BYTES,
    UnsupportedPattern,
    compile_pattern,
    match_cost,
)
from loopworks.schemas.rules import CommandCheck, PatternCheck
from loopworks.workspace import files
from loopworks.workspace.origin import Absent, tree_path

logger = logging.getLogger(__name__)

# A pattern check reads this much of its file at most: one byte past what it searches, so
# a larger file is known to be one (`match_pattern` then fails the check saying so).
PATTERN_READ_CAP_BYTES = TEXT_MAX_BYTES + 1


class CheckOutcome(BaseModel):
    passed: bool
    detail: str
    exit_code: int | None = None
    timed_out: bool = False
    # Not decided: the evaluation's check budget ran out first (checks/budget.py).
    unchecked: bool = False


def _scrubbed_env(workdir: Path) -> dict[str, str]:
    # Checks run model-written commands: nothing from the worker's environment
    # (API keys, tokens, credentials) may reach them.
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        **COMMAND_ENV,
    }


# The sandbox every command runs in, chosen once at worker start (`use_sandbox`); None
# runs commands as the worker's own user (LOOPS_SANDBOX=off, or a caller that never chose).
_sandbox: SandboxPolicy | None = None


def use_sandbox(policy: SandboxPolicy | None) -> None:
    """Run every later command under `policy` (None: unsandboxed). The worker calls this
    once it has probed the sandbox; a process runs one worker's commands."""
    global _sandbox
    _sandbox = policy


def sandboxed() -> bool:
    return _sandbox is not None


def run_command_check(
    check: CommandCheck,
    workdir: Path,
    output_cap: int = 8192,
    secrets: Iterable[str] | None = None,
) -> CheckOutcome:
    """Run the check's command in `workdir`; passes when it exits with `expect_exit`.

    The output in the outcome's detail is capped and redacted of `secrets`; None means the
    worker's own (`worker_secrets`). Every command output that leaves an activity (a check's
    result, the agents' `run_command`, a merge's verification) comes through here, so none
    can forget to redact.

    OSError (no bash, no workdir) propagates: that is the worker's fault, not the artifact's.
    """
    if _sandbox is not None:
        return _run_sandboxed(check, workdir, output_cap, secrets, _sandbox)
    proc = subprocess.Popen(
        ["bash", "-c", check.command],
        cwd=workdir,
        env=_scrubbed_env(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    with running_in(workdir, proc):
        tail, timed_out = collect(proc, output_cap, check.timeout_seconds)
    output = tail.render(worker_secrets() if secrets is None else secrets)
    return _outcome(check, None if timed_out else proc.returncode, output, "process group")


def _run_sandboxed(
    check: CommandCheck,
    workdir: Path,
    output_cap: int,
    secrets: Iterable[str] | None,
    policy: SandboxPolicy,
) -> CheckOutcome:
    capped = policy.model_copy(update={"output_cap_bytes": output_cap})
    secrets = worker_secrets() if secrets is None else secrets
    result = run_sandboxed(check.command, workdir, check.timeout_seconds, capped, secrets)
    return _outcome(check, None if result.timed_out else result.exit_code, result.output, "sandbox")


def _outcome(check: CommandCheck, code: int | None, output: str, killed: str) -> CheckOutcome:
    """A check's outcome from its exit code (None: the timeout killed it)."""
    if code is None:
        logger.info("command check timed out after %ss", check.timeout_seconds)
        return CheckOutcome(
            passed=False,
            detail=f"timed out after {check.timeout_seconds:g}s ({killed} killed)\n{output}",
            exit_code=None,
            timed_out=True,
        )
    passed = code == check.expect_exit
    head = f"exit code {code}" if passed else f"exit code {code} (expected {check.expect_exit})"
    return CheckOutcome(passed=passed, detail=f"{head}\n{output}", exit_code=code)


def _line_of(text: str, offset: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text.count("\n", 0, offset) + 1, text[start : end if end != -1 else None]


def run_pattern_check(check: PatternCheck, workdir: Path) -> CheckOutcome:
    """The check against the file in a working directory, read as a checkout of the
    commit would show it (`read_tree_files`): a symlink out of the directory is outside."""
    relpath = tree_path(check.path)
    if relpath is None:
        return match_pattern(check, Absent.OUTSIDE)
    try:
        text = files.read_text(workdir, relpath, PATTERN_READ_CAP_BYTES, truncate=True)
    except files.Refused:
        return match_pattern(check, Absent.OUTSIDE)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return match_pattern(check, Absent.MISSING)
    return match_pattern(check, text)


def _too_large(check: PatternCheck) -> CheckOutcome:
    return CheckOutcome(
        passed=False,
        detail=f"file {check.path!r} is larger than {TEXT_MAX_BYTES // 1024} KiB, the most a "
        "pattern check searches",
    )


def match_pattern(check: PatternCheck, text: str | Absent) -> CheckOutcome:
    """Search the check's file (its `text`, or why there is none) for its pattern; passes
    when (found) == `must_match`, and never without a file.

    The pattern runs on RE2 (`schemas.patterns`), `^` and `$` matching at every line: no
    pattern can hang the worker. One RE2 cannot run, a file over `TEXT_MAX_BYTES`, or a
    search that could cost more than `MATCH_COST_MAX` fails the check saying why.
    """
    if text is Absent.OUTSIDE:
        return CheckOutcome(passed=False, detail=f"path {check.path!r} is outside the workspace")
    if text is Absent.MISSING:
        return CheckOutcome(passed=False, detail=f"file {check.path!r} does not exist")
    try:
        regex = compile_pattern(check.pattern, multiline=True)
    except UnsupportedPattern as exc:
        return CheckOutcome(passed=False, detail=f"pattern {check.pattern!r} cannot run: {exc}")
    size = len(text.encode("utf-8"))
    if size > TEXT_MAX_BYTES:
        return _too_large(check)
    cost = match_cost(regex, size)
    if cost > MATCH_COST_MAX:
        return CheckOutcome(
            passed=False,
            detail=f"pattern {check.pattern!r} is too costly to search {check.path}: its "
            f"{regex.programsize} instructions over {size} bytes could take "
            f"{cost / MATCH_COST_MAX:.1f} times the most one search may (use fewer or smaller "
            "repetitions, or a smaller file)",
        )
    match = regex.search(text)
    passed = (match is not None) == check.must_match
    if match is not None:
        lineno, line = _line_of(text, match.start())
        found = f"pattern {check.pattern!r} matched {check.path} line {lineno}: {line[:200]}"
        detail = found if check.must_match else f"{found} (it must not match)"
    else:
        detail = f"pattern {check.pattern!r} not found in {check.path}"
        if check.must_match and check.example:
            detail += f"; a matching line would be e.g. {check.example!r}"
    return CheckOutcome(passed=passed, detail=detail)
