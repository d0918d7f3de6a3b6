"""A client's or a model's regular expression cannot freeze a worker.

`^(a+)+$` over a long line of `a`s followed by a `b` is the classic catastrophic pattern
for a backtracking engine: Python's `re` takes seconds at 26 characters, doubles with each
one more, and holds the GIL the whole time, so a worker's heartbeats stop. Each case runs
the real code (the check runner, the search tool, the evaluation activity) in a child
interpreter: a pattern that hangs there is killed at the timeout and fails the test,
where a thread in this process would take the whole test session down with it (`re` never
lets go of the GIL, so not even pytest's timeout could fire).
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import httpx
import pytest
from temporalio.client import Client

from loopworks.agent.tools import operations
from loopworks.agent.tools.calls import SEARCH_CHUNK_COST, SEARCH_TIME_CAP_SECONDS, SearchArgs
from loopworks.api.main import create_app
from loopworks.checks.runner import match_pattern, run_pattern_check
from loopworks.schemas.patterns import (
    MATCH_COST_MAX,
    PATTERN_MAX_CHARS,
    PROGRAM_MAX_SIZE,
    TEXT_MAX_BYTES,
    UnsupportedPattern,
    compile_pattern,
    match_cost,
)
from loopworks.schemas.rules import PatternCheck
from loopworks.schemas.settings import Settings
from tests.api.test_validation import _NoTemporal
from tests.integration.stack import bare_remote, git

pytestmark = pytest.mark.unit

EVIL = "^(a+)+$"
# 100,000 `a`s and a `b`: no match, after 2**100000 steps for a backtracking engine.
EVIL_TEXT = "a" * 100_000 + "b"
# Linear for RE2 but slow (its automaton outgrows memory, so it matches the slow way):
# seconds a MiB, long enough to see whether heartbeats go on meanwhile.
HEAVY = "[ab]{0,100}a[ab]{200}c"
# The same at the program cap: 1946 instructions, seconds for every 100 KiB it searches.
AT_THE_CAP = "[ab]{0,600}a[ab]{740}c"
T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_SECONDS = 60.0


def _in_child(case: str, *args: str) -> dict[str, object]:
    """Run `case(*args)` of this module in a fresh interpreter and return what it printed
    (one JSON object); fail when it does not finish in time."""
    code = f"import sys; from tests.security.test_patterns import {case}; {case}(*sys.argv[1:])"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case} did not finish in {CHILD_TIMEOUT_SECONDS:g}s: the pattern hung")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def _timed(fn: Callable[[], T], timeout: float = 5.0) -> tuple[T, float]:
    """`fn()` in a thread joined with a timeout, and how long it took."""
    box: list[T] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout=timeout)
    elapsed = time.monotonic() - started
    assert not thread.is_alive(), f"the search did not finish within {timeout:g} s"
    return box[0], elapsed


# -- what the child interpreters run --------------------------------------------------------------


def _check_runner_case(workdir: str) -> None:
    Path(workdir, "artifact.md").write_text(EVIL_TEXT)
    check = PatternCheck(pattern=EVIL)
    outcome, elapsed = _timed(lambda: run_pattern_check(check, Path(workdir)))
    print(json.dumps({"elapsed": elapsed, "outcome": outcome.model_dump()}))


def _search_tool_case(workdir: str) -> None:
    from loopworks.agent.tools import execute

    Path(workdir, "notes.txt").write_text(EVIL_TEXT + "\n")
    args = SearchArgs(pattern=EVIL).model_dump()
    result, elapsed = _timed(lambda: execute(Path(workdir), "search", args))
    print(json.dumps({"elapsed": elapsed, "result": result.model_dump()}))


def _heartbeat_case(data_dir: str, origin: str, commit: str) -> None:
    """The real `evaluate_group` activity, beating every 50 ms: the times of its beats."""
    from temporalio.testing import ActivityEnvironment

    import loopworks.activities.heartbeat as heartbeat
    from loopworks.activities.evaluation import EvaluationActivities
    from loopworks.schemas.rules import CheckGroup, PreparedCheck
    from loopworks.schemas.settings import Settings
    from loopworks.schemas.steps import EvaluateGroupInput, GitLocation
    from loopworks.worker.build import build_deps

    heartbeat.HEARTBEAT_EVERY_SECONDS = 0.05
    beats: list[float] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *_: beats.append(time.monotonic())
    activities = EvaluationActivities(build_deps(Settings(LOOPS_DATA_DIR=Path(data_dir))))
    step = EvaluateGroupInput(
        run_id="redos-1",
        task="t",
        group=CheckGroup.CONTENT,
        checks=[
            PreparedCheck(rule_id="evil", check=PatternCheck(pattern=EVIL)),
            PreparedCheck(rule_id="heavy", check=PatternCheck(pattern=HEAVY, path="big.txt")),
        ],
        workspace=GitLocation(origin=origin, commit=commit),
    )
    started = time.monotonic()
    output = asyncio.run(env.run(activities.evaluate_group, step))
    finished = time.monotonic()
    print(
        json.dumps(
            {
                "results": [r.model_dump() for r in output.results],
                "beats": [b - started for b in beats],
                "elapsed": finished - started,
            }
        )
    )


# -- the tests ------------------------------------------------------------------------------------


def test_the_check_runner_answers_an_evil_pattern_within_a_second(tmp_path: Path) -> None:
    got = _in_child("_check_runner_case", str(tmp_path))
    assert isinstance(got["elapsed"], float) and got["elapsed"] < 1.0, got["elapsed"]
    assert got["outcome"] == {
        "passed": False,
        "detail": f"pattern {EVIL!r} not found in artifact.md",
        "exit_code": None,
        "timed_out": False,
        "unchecked": False,
    }


def test_the_search_tool_answers_an_evil_pattern_within_a_second(tmp_path: Path) -> None:
    got = _in_child("_search_tool_case", str(tmp_path))
    assert isinstance(got["elapsed"], float) and got["elapsed"] < 1.0, got["elapsed"]
    assert got["result"] == {"ok": True, "content": f"no matches for {EVIL!r} under ."}


def test_the_evaluation_activity_heartbeats_while_it_searches(tmp_path: Path) -> None:
    """The activity that runs pattern checks keeps beating while a slow (linear) search
    runs: the search is off the event loop and RE2 lets go of the GIL while it matches."""
    bare = bare_remote(tmp_path / "remote")
    scratch = tmp_path / "remote" / "scratch"
    (scratch / "artifact.md").write_text(EVIL_TEXT + "\n")
    # Text on which HEAVY's automaton blows up and RE2 falls back to its slow matcher.
    rng = random.Random(28)
    (scratch / "big.txt").write_text("".join(rng.choice("ab") for _ in range(1_000_000)))
    git("add", "artifact.md", "big.txt", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "files", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    commit = git("rev-parse", "HEAD", cwd=scratch).strip()

    got = _in_child("_heartbeat_case", str(tmp_path / "data"), bare.as_uri(), commit)
    results = got["results"]
    assert isinstance(results, list)
    assert [(r["rule_id"], r["passed"]) for r in results] == [("evil", False), ("heavy", False)]
    beats, elapsed = got["beats"], got["elapsed"]
    assert isinstance(beats, list) and isinstance(elapsed, float)
    # A worker's heartbeat timeout is 10 s; here, no gap of even one second.
    assert elapsed > 0.5, "the heavy search was too quick to show anything"
    gaps = [b - a for a, b in zip([0.0, *beats], [*beats, elapsed], strict=True)]
    assert max(gaps) < 1.0, (max(gaps), elapsed)


# -- what RE2 will not run, and the caps ----------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", "invalid escape sequence"),
        ("(?<=a)b", "invalid perl operator"),
        ("x" * (PATTERN_MAX_CHARS + 1), "at most"),
        ("[^a]{1000}", f"at most {PROGRAM_MAX_SIZE}"),
    ],
)
def test_a_pattern_re2_cannot_run_is_a_clear_failure(
    pattern: str, why: str, tmp_path: Path
) -> None:
    with pytest.raises(UnsupportedPattern, match=why):
        compile_pattern(pattern)
    # At check time (a check built without validation, as from an older history): a
    # failed check saying why, not an exception and not a hang.
    check = PatternCheck.model_construct(pattern=pattern, path="artifact.md", must_match=True)
    outcome = match_pattern(check, "a\nb\n")
    assert not outcome.passed and "cannot run" in outcome.detail
    # The search tool: a failed result the model can adapt to.
    from loopworks.agent.tools import execute

    result = execute(tmp_path, "search", {"pattern": pattern})
    assert not result.ok


async def test_rules_with_a_pattern_re2_cannot_run_are_a_422_saying_why(tmp_path: Path) -> None:
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data")
    app = create_app(settings, client=cast(Client, _NoTemporal()))
    rule = {"id": "r", "description": "d", "check": {"kind": "pattern", "pattern": r"(\w+) \1"}}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as client:
        response = await client.post("/runs", json={"task": "t", "rules": [rule]})
    assert response.status_code == 422, response.text
    assert "invalid escape sequence" in response.text
    assert "backreferences" in response.text


def test_a_file_larger_than_the_cap_fails_the_check_saying_so(tmp_path: Path) -> None:
    (tmp_path / "artifact.md").write_text("a" * (TEXT_MAX_BYTES + 1))
    outcome = run_pattern_check(PatternCheck(pattern="a"), tmp_path)
    assert not outcome.passed and "the most a pattern check searches" in outcome.detail
    assert not match_pattern(PatternCheck(pattern="a"), "é" * TEXT_MAX_BYTES).passed


def test_python_patterns_keep_their_meaning() -> None:
    """What checks and the offline model write: `^`/`$` at every line, `\\Z` at the end."""
    lines = "intro\n## Summary\nbody TODO\n"
    for pattern, found in [
        (r"^## Summary$", True),
        (r"^body", True),
        (r"(?i)\b(todo|tbd)\b", True),
        (r"body TODO\Z", False),
        (r"body TODO\n\Z", True),
        (r"^# \S", False),
    ]:
        assert match_pattern(PatternCheck(pattern=pattern), lines).passed is found, pattern


# -- what one search may cost, and the search tool's clock ---------------------------------------


def _ab(count: int, seed: int = 28) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ab") for _ in range(count))


def test_a_pattern_check_costlier_than_the_cap_is_refused_before_it_runs() -> None:
    """The program cap times the text cap is seconds a search on RE2's slow path; over
    `MATCH_COST_MAX` the check fails at once, saying why, rather than running that long."""
    regex = compile_pattern(AT_THE_CAP, multiline=True)
    assert regex.programsize > 0.95 * PROGRAM_MAX_SIZE
    text = _ab(TEXT_MAX_BYTES)
    assert match_cost(regex, TEXT_MAX_BYTES) > MATCH_COST_MAX
    outcome, elapsed = _timed(lambda: match_pattern(PatternCheck(pattern=AT_THE_CAP), text))
    assert elapsed < 1.0, elapsed
    assert not outcome.passed and "too costly to search artifact.md" in outcome.detail
    # A file small enough for it is searched.
    small = "x\n" * 1000 + "a" + "b" * 740 + "c\n"
    assert match_cost(regex, len(small)) <= MATCH_COST_MAX
    assert match_pattern(PatternCheck(pattern=AT_THE_CAP), small).passed


def test_a_search_on_a_2_mb_line_returns_within_its_cap(tmp_path: Path) -> None:
    """One line as long as the search tool reads: a pattern at the program cap would take
    half a minute on it; the search skips that line, saying so, at once. A cheap pattern
    searches the whole line."""
    from loopworks.agent.tools import execute

    (tmp_path / "minified.js").write_text(_ab(2_000_000) + "cx\n")
    (tmp_path / "small.txt").write_text("aaab\n")
    heavy = SearchArgs(pattern=AT_THE_CAP).model_dump()
    result, elapsed = _timed(lambda: execute(tmp_path, "search", heavy))
    assert elapsed < SEARCH_TIME_CAP_SECONDS, elapsed
    assert result.ok
    assert "not searched, too long for this pattern: minified.js:1" in result.content
    cheap = SearchArgs(pattern="[ab]cx$").model_dump()
    found, elapsed = _timed(lambda: execute(tmp_path, "search", cheap))
    assert found.content.startswith("minified.js:1: "), found.content
    assert elapsed < SEARCH_TIME_CAP_SECONDS, elapsed


def test_the_search_tool_reads_its_clock_within_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of long lines, each within the chunk's cost, together half a minute or more
    of RE2's slow path: the search stops at its cap (here 1 s) inside the file, saying so,
    where a clock read only between files would wait for the file's end."""
    lines = [_ab(10_000, seed) for seed in range(200)]
    (tmp_path / "data.txt").write_text("\n".join(lines) + "\n")
    regex = compile_pattern(AT_THE_CAP)
    assert match_cost(regex, 10_000) <= SEARCH_CHUNK_COST
    assert match_cost(regex, 200 * 10_000) > 25 * SEARCH_CHUNK_COST
    monkeypatch.setattr(operations, "SEARCH_TIME_CAP_SECONDS", 1.0)
    from loopworks.agent.tools import execute

    args = SearchArgs(pattern=AT_THE_CAP).model_dump()
    result, elapsed = _timed(lambda: execute(tmp_path, "search", args), timeout=60)
    # The cap and at most one chunk past it (about a second, more on a loaded machine).
    assert elapsed < 8.0, elapsed
    assert result.ok and "stopped at the search's 1 s time cap" in result.content
