from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from loopworks.checks.budget import CheckBudget, command_within
from loopworks.checks.runner import run_command_check, run_pattern_check
from loopworks.schemas.rules import CommandCheck, PatternCheck
from tests.unit.late_commands import LATE_COMMAND, cancelled_before_it_writes

pytestmark = pytest.mark.unit


def test_command_passes_on_exit_zero(tmp_path: Path) -> None:
    outcome = run_command_check(CommandCheck(command="echo hello"), tmp_path)
    assert outcome.passed
    assert outcome.exit_code == 0
    assert not outcome.timed_out
    assert "hello" in outcome.detail


def test_command_fails_on_other_exit_code(tmp_path: Path) -> None:
    outcome = run_command_check(CommandCheck(command="echo oops >&2; exit 3"), tmp_path)
    assert not outcome.passed
    assert outcome.exit_code == 3
    assert "exit code 3" in outcome.detail
    assert "oops" in outcome.detail  # stderr is captured with stdout


def test_command_expected_exit_code(tmp_path: Path) -> None:
    outcome = run_command_check(CommandCheck(command="exit 2", expect_exit=2), tmp_path)
    assert outcome.passed
    assert outcome.exit_code == 2


def test_command_runs_in_workdir(tmp_path: Path) -> None:
    (tmp_path / "artifact.md").write_text("# title\n")
    outcome = run_command_check(CommandCheck(command="test -f artifact.md && pwd"), tmp_path)
    assert outcome.passed
    assert str(tmp_path.resolve()) in outcome.detail


def test_timeout_kills_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    # The background child must die with the group, not outlive the check.
    command = f"sleep 30 & echo $! > {marker}; sleep 30"
    started = time.monotonic()
    outcome = run_command_check(CommandCheck(command=command, timeout_seconds=1), tmp_path)
    elapsed = time.monotonic() - started
    assert outcome.timed_out
    assert not outcome.passed
    assert outcome.exit_code is None
    assert elapsed < 5
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of the reaped bash is a zombie until init reaps it.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_output_is_capped_to_tail(tmp_path: Path) -> None:
    command = "for i in $(seq 1 5000); do echo line-$i; done"
    outcome = run_command_check(CommandCheck(command=command), tmp_path, output_cap=100)
    assert outcome.passed
    assert "line-5000" in outcome.detail
    assert "line-1\n" not in outcome.detail
    assert "truncated" in outcome.detail
    assert len(outcome.detail) < 300


def test_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak")
    monkeypatch.setenv("SECRET_TOKEN", "tok-should-not-leak")
    outcome = run_command_check(CommandCheck(command="env"), tmp_path)
    assert outcome.passed
    assert "should-not-leak" not in outcome.detail
    assert "ANTHROPIC_API_KEY" not in outcome.detail
    assert "SECRET_TOKEN" not in outcome.detail
    assert f"HOME={tmp_path}" in outcome.detail
    assert "LANG=C.UTF-8" in outcome.detail
    assert "PATH=" in outcome.detail


def test_python_leaves_no_bytecode_in_the_workspace(tmp_path: Path) -> None:
    """A producer's test run left `__pycache__/` in the clone, committed as work; QA's run
    of the same tests on a fresh checkout rewrote it, and its verdict was refused for
    changing the work."""
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    check = CommandCheck(command="python3 -c 'import calc; assert calc.add(1, 2) == 3'")
    assert run_command_check(check, tmp_path).passed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calc.py"]


def test_stdin_is_closed(tmp_path: Path) -> None:
    outcome = run_command_check(CommandCheck(command="cat", timeout_seconds=5), tmp_path)
    assert outcome.passed
    assert not outcome.timed_out


def test_background_job_does_not_hold_the_check(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = run_command_check(CommandCheck(command="sleep 30 & echo done"), tmp_path)
    assert outcome.passed
    assert time.monotonic() - started < 5


def _pattern(tmp_path: Path, text: str, **kwargs: object) -> PatternCheck:
    (tmp_path / "artifact.md").write_text(text)
    return PatternCheck.model_validate(kwargs)


def test_pattern_must_match(tmp_path: Path) -> None:
    check = _pattern(tmp_path, "intro\n## Summary\nbody\n", pattern=r"^## Summary$")
    outcome = run_pattern_check(check, tmp_path)
    assert outcome.passed
    assert "line 2" in outcome.detail


def test_pattern_must_match_missing(tmp_path: Path) -> None:
    check = _pattern(tmp_path, "intro\n", pattern=r"^## Summary$", example="## Summary")
    outcome = run_pattern_check(check, tmp_path)
    assert not outcome.passed
    assert "not found" in outcome.detail
    assert "## Summary" in outcome.detail


def test_pattern_must_not_match(tmp_path: Path) -> None:
    check = _pattern(tmp_path, "all good\n", pattern=r"TODO", must_match=False)
    assert run_pattern_check(check, tmp_path).passed
    check = _pattern(tmp_path, "a\nTODO: fix\n", pattern=r"TODO", must_match=False)
    outcome = run_pattern_check(check, tmp_path)
    assert not outcome.passed
    assert "must not match" in outcome.detail
    assert "TODO: fix" in outcome.detail


def test_pattern_uses_multiline(tmp_path: Path) -> None:
    check = _pattern(tmp_path, "first\nsecond\n", pattern=r"^second$")
    assert run_pattern_check(check, tmp_path).passed


def test_pattern_other_path(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("hello\n")
    check = PatternCheck(pattern="hello", path="docs/notes.md")
    assert run_pattern_check(check, tmp_path).passed


def test_pattern_missing_file(tmp_path: Path) -> None:
    outcome = run_pattern_check(PatternCheck(pattern="x"), tmp_path)
    assert not outcome.passed
    assert "does not exist" in outcome.detail


def test_pattern_missing_file_fails_even_when_must_not_match(tmp_path: Path) -> None:
    outcome = run_pattern_check(PatternCheck(pattern="x", must_match=False), tmp_path)
    assert not outcome.passed


@pytest.mark.parametrize("path", ["../outside.md", "/etc/passwd", "sub/../../outside.md"])
def test_pattern_path_escape(tmp_path: Path, path: str) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "outside.md").write_text("secret\n")
    outcome = run_pattern_check(PatternCheck(pattern=".", path=path), workdir)
    assert not outcome.passed
    assert "outside the workspace" in outcome.detail


def test_pattern_symlink_escape(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "outside.md").write_text("secret\n")
    (workdir / "link.md").symlink_to(tmp_path / "outside.md")
    outcome = run_pattern_check(PatternCheck(pattern="secret", path="link.md"), workdir)
    assert not outcome.passed
    assert "outside the workspace" in outcome.detail


async def test_a_check_cancelled_while_its_command_runs_ends_with_the_command(
    tmp_path: Path,
) -> None:
    """An evaluation's command check (under the check budget) cancelled with its step:
    the command goes too, before the step ends."""
    check = CommandCheck(command=LATE_COMMAND)
    call = asyncio.create_task(command_within(check, tmp_path, CheckBudget(60)))
    assert not await cancelled_before_it_writes(call, tmp_path)
