"""One evaluation's pattern and command checks under one deadline (docs/loop.md#bounded-checks).

Each check is bounded on its own (a command by its timeout, a pattern by
`schemas.patterns.MATCH_COST_MAX`), but a hundred rules of them, every iteration, are
not: checks run one after another, so their sum is what holds a worker. A `CheckBudget`
is the deadline they share; a check not started by then, or still running at it, fails as
`BUDGET_SPENT` and is marked `unchecked`, so the evaluation names the rules it could not
check and the score counts them as failed (a check never run is never a pass).

Patterns are matched in a thread pool of their own: RE2 lets go of the GIL, so the
worker's event loop (heartbeats, other runs' activities) goes on, and the pool's size
keeps matching to the machine's cores without taking the threads git and files use. A
match the deadline overtakes cannot be interrupted: it finishes in the background, within
the cost cap, and its result is dropped.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Lock

from loopworks.checks.output import stoppable
from loopworks.checks.runner import CheckOutcome, match_pattern, run_command_check
from loopworks.schemas.rules import CommandCheck, PatternCheck
from loopworks.workspace.origin import Absent

BUDGET_SPENT = "check budget spent"
BUDGET_SETTING = "LOOPS_CHECK_BUDGET_S"


class CheckBudget:
    """A deadline `seconds` from now, shared by the checks of one evaluation group."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._deadline = clock() + seconds

    def remaining(self) -> float:
        return self._deadline - self._clock()

    def spent(self, output: str = "") -> CheckOutcome:
        """A check the budget left unchecked, with what it had said so far (a command's
        output up to its kill)."""
        detail = (
            f"{BUDGET_SPENT}: not checked; this evaluation's checks had {self.seconds:g} s "
            f"({BUDGET_SETTING})"
        )
        return CheckOutcome(
            passed=False, detail=f"{detail}\n{output}" if output else detail, unchecked=True
        )


_pool: ThreadPoolExecutor | None = None
_pool_lock = Lock()


def _matching_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=os.cpu_count() or 2, thread_name_prefix="pattern-match"
            )
        return _pool


async def match_within(
    check: PatternCheck, text: str | Absent, budget: CheckBudget
) -> CheckOutcome:
    """`match_pattern` off the event loop, given up at the budget's deadline."""
    remaining = budget.remaining()
    if remaining <= 0:
        return budget.spent()
    loop = asyncio.get_running_loop()
    matching = loop.run_in_executor(_matching_pool(), match_pattern, check, text)
    try:
        return await asyncio.wait_for(matching, remaining)
    except TimeoutError:
        return budget.spent()


async def command_within(check: CommandCheck, workdir: Path, budget: CheckBudget) -> CheckOutcome:
    """`run_command_check` off the event loop, its timeout cut to what is left of the
    budget: a command the deadline kills is unchecked, not failed on its own account."""
    remaining = budget.remaining()
    if remaining <= 0:
        return budget.spent()
    cut = remaining < check.timeout_seconds
    run = check.model_copy(update={"timeout_seconds": remaining}) if cut else check
    outcome = await stoppable(workdir, run_command_check, run, workdir)
    if cut and outcome.timed_out:
        # The runner's detail is "timed out after ...\n<output>": keep the output.
        return budget.spent(outcome.detail.partition("\n")[2])
    return outcome
