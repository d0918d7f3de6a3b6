"""What each model step of a run may spend (docs/loop.md#budgets), as a plain function.

A step may spend what is left of the run's budget when it starts, less what the steps
still running beside it hold: a running step holds its allowance until it ends, and what
it did not spend is free again once the run has counted what it did. Steps that start
together divide what is left: one takes its `share`, the next what that leaves. So steps
running at once can never together spend more than was left, and each model request
within a step is held to the step's allowance by the worker (`loopworks.llm.budget`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from loopworks.schemas.run import Allowance, Budget, TokenUsage, budget_left

# Dollars are kept to the millionth (llm/pricing.py); a share is rounded down to it.
_USD_UNITS = 1_000_000


def allowance(
    budget: Budget | Allowance | None,
    usage: TokenUsage,
    held: Iterable[Allowance] = (),
    share: float = 1.0,
) -> Allowance | None:
    """A step's allowance: `share` (at most 1) of what is left of `budget` after the run's
    `usage` and what the steps in flight hold; None when nothing limits it."""
    left = budget_left(budget, usage, held)
    if left is None or share >= 1:
        return left
    share = max(share, 0.0)
    tokens = usd = None
    if left.max_tokens is not None:
        tokens = math.floor(left.max_tokens * share)
    if left.max_cost_usd is not None:
        usd = math.floor(left.max_cost_usd * share * _USD_UNITS) / _USD_UNITS
    return Allowance(max_tokens=tokens, max_cost_usd=usd)
