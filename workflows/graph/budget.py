"""A task graph's total budget (docs/graphs.md#budget) as plain functions.

The graph may spend `total_budget` (tokens, dollars) over all its task loops together.
Each loop is started with the smaller of the per-loop budget and what is left of the
total, where what is left is the total less what finished loops spent less what running
loops were allotted: a running loop's allotment is held back until it ends, and what it
did not spend then returns. A loop never spends more than its allotment
(docs/loop.md#budgets), so loops running side by side never together spend more than the
total. When nothing is left no loop starts, nor once a loop ran out of what the total
had left it (what remains is too little for a model request); once the running ones end
the graph fails saying its budget is spent. A limit the total does not set (tokens, or
dollars) bounds nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from loopworks.schemas.graph import GraphMemory
from loopworks.schemas.run import Budget, TokenUsage

# Dollars are compared to the cent's ten-thousandth: sums of floats are not exact.
_USD_PLACES = 6

_Limit = TypeVar("_Limit", int, float)


@dataclass(frozen=True)
class Left:
    """What is left of a graph's total: None where the total sets no limit."""

    tokens: int | None = None
    usd: float | None = None

    @property
    def spent(self) -> bool:
        """Nothing left in some limit: no loop may start."""
        return (self.tokens is not None and self.tokens <= 0) or (
            self.usd is not None and self.usd <= 0
        )


def left(total: Budget | None, usage: TokenUsage, allotted: Iterable[Budget]) -> Left:
    """What is left of `total` after the finished loops' `usage` and the running loops'
    allotments."""
    if total is None:
        return Left()
    held = list(allotted)
    tokens = usd = None
    if total.max_tokens is not None:
        tokens = total.max_tokens - usage.total_tokens
        tokens -= sum(budget.max_tokens or 0 for budget in held)
    if total.max_cost_usd is not None:
        usd = total.max_cost_usd - usage.cost_usd
        usd = round(usd - sum(budget.max_cost_usd or 0 for budget in held), _USD_PLACES)
    return Left(tokens, usd)


def _smaller(a: _Limit | None, b: _Limit | None) -> _Limit | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def allotment(per_loop: Budget | None, remaining: Left) -> Budget | None:
    """The budget a loop starts with: each limit the smaller of the per-loop one and what
    is left; None when neither limits anything. Call it only when `remaining` is not
    `spent`."""
    if remaining.spent:
        raise ValueError("nothing is left of the graph's budget")
    asked = per_loop or Budget()
    tokens = _smaller(asked.max_tokens, remaining.tokens)
    usd = _smaller(asked.max_cost_usd, remaining.usd)
    if tokens is None and usd is None:
        return None
    return Budget(max_tokens=tokens, max_cost_usd=usd)


def cut_by_the_total(per_loop: Budget | None, allotted: Budget | None) -> bool:
    """Whether a loop's allotment is what was left of the total rather than its own budget:
    in some limit, smaller than its own (or than none)."""
    if allotted is None:
        return False
    asked = per_loop or Budget()
    return any(
        given is not None and (own is None or given < own)
        for given, own in (
            (allotted.max_tokens, asked.max_tokens),
            (allotted.max_cost_usd, asked.max_cost_usd),
        )
    )


def charged(allotted: Budget | None, usage: TokenUsage | None) -> TokenUsage:
    """What an ended loop counts against the total: what it reports it spent; a loop that
    ended without reporting (it failed, or was terminated) its whole allotment, as input
    tokens and dollars, since it may have spent that much."""
    if usage is not None:
        return usage
    if allotted is None:
        return TokenUsage()
    return TokenUsage(input_tokens=allotted.max_tokens or 0, cost_usd=allotted.max_cost_usd or 0.0)


def spent_message(total: Budget | None, usage: TokenUsage, not_started: Iterable[str]) -> str:
    """A graph that stopped for its budget: what it spent of each limit the total sets, and
    the tasks it never started."""
    spent = []
    total = total or Budget()
    if total.max_tokens is not None:
        spent.append(f"used {usage.total_tokens} tokens of {total.max_tokens}")
    if total.max_cost_usd is not None:
        spent.append(f"spent ${usage.cost_usd:.4f} of ${total.max_cost_usd:.4f}")
    message = "the graph's budget is spent"
    if spent:
        message += ": " + " and ".join(spent)
    if waiting := ", ".join(not_started):
        message += f"; not started: {waiting}"
    return message


class GraphBudget:
    """A graph's spending as its workflow keeps it, in its memory (so it goes on through
    continue-as-new): what ended loops spent (`state.usage`) and what running ones hold."""

    def __init__(self, memory: GraphMemory) -> None:
        self._memory = memory

    def left(self) -> Left:
        state = self._memory.state
        return left(state.total_budget, state.usage, self._memory.allotted.values())

    @property
    def spent(self) -> bool:
        return self._memory.budget_spent or self.left().spent

    def allot(self, task_id: str, per_loop: Budget | None) -> Budget | None:
        """The budget `task_id`'s loop starts with, held back until it ends."""
        budget = allotment(per_loop, self.left())
        if budget is not None and self._memory.state.total_budget is not None:
            self._memory.allotted[task_id] = budget
        return budget

    def ended(
        self,
        task_id: str,
        usage: TokenUsage | None,
        ran_out: bool = False,
        per_loop: Budget | None = None,
    ) -> None:
        """A loop ended (`usage` None: without saying what it spent): its allotment is
        released and what it spent counted. One that `ran_out` of an allotment the total
        had cut below its own budget (`per_loop`) leaves too little for another: the
        graph's budget is spent."""
        held = self._memory.allotted.pop(task_id, None)
        state = self._memory.state
        state.usage = state.usage + charged(held, usage)
        if ran_out and cut_by_the_total(per_loop, held):
            self._memory.budget_spent = True

    def message(self, not_started: Iterable[str]) -> str:
        state = self._memory.state
        return spent_message(state.total_budget, state.usage, not_started)
