"""A task graph's total budget as plain functions: what is left, what a loop is allotted,
what an ended loop is charged, and what the graph says when it is spent."""

from __future__ import annotations

import pytest

from loopworks.schemas.graph import GraphInput, GraphMemory, GraphRequest
from loopworks.schemas.run import Budget, TokenUsage
from loopworks.workflows.graph.budget import (
    GraphBudget,
    Left,
    allotment,
    charged,
    cut_by_the_total,
    left,
    spent_message,
)

pytestmark = pytest.mark.unit


def used(tokens: int = 0, usd: float = 0.0) -> TokenUsage:
    return TokenUsage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2, cost_usd=usd)


def test_what_is_left_is_the_total_less_spent_less_held() -> None:
    total = Budget(max_tokens=1000, max_cost_usd=1.0)
    held = [Budget(max_tokens=300, max_cost_usd=0.25), Budget(max_tokens=100)]
    assert left(total, used(200, 0.1), held) == Left(tokens=400, usd=0.65)
    assert left(total, TokenUsage(), []) == Left(tokens=1000, usd=1.0)
    # A limit the total does not set bounds nothing, whatever was spent.
    assert left(Budget(max_tokens=10), used(5, 99.0), []) == Left(tokens=5, usd=None)
    assert left(None, used(10**9, 10**6), held) == Left()
    assert not Left().spent


@pytest.mark.parametrize(
    ("remaining", "spent"),
    [
        (Left(tokens=0), True),
        (Left(tokens=-5), True),
        (Left(usd=0.0), True),
        (Left(tokens=1, usd=-0.01), True),
        (Left(tokens=1, usd=0.000001), False),
        (Left(tokens=1), False),
    ],
)
def test_nothing_left_in_any_limit_is_spent(remaining: Left, spent: bool) -> None:
    assert remaining.spent is spent


def test_float_sums_that_reach_the_total_leave_nothing() -> None:
    # 0.1 + 0.2 is 0.30000000000000004 in floats: a total of 0.3 is spent, not -4e-17 over.
    assert left(Budget(max_cost_usd=0.3), used(usd=0.1), [Budget(max_cost_usd=0.2)]).spent


def test_a_loop_gets_the_smaller_of_its_own_budget_and_what_is_left() -> None:
    per_loop = Budget(max_tokens=500, max_cost_usd=2.0)
    assert allotment(per_loop, Left(tokens=300, usd=5.0)) == Budget(
        max_tokens=300, max_cost_usd=2.0
    )
    assert allotment(per_loop, Left(tokens=900)) == per_loop
    assert allotment(None, Left(usd=0.5)) == Budget(max_cost_usd=0.5)
    assert allotment(Budget(max_tokens=7), Left()) == Budget(max_tokens=7)
    assert allotment(None, Left()) is None
    with pytest.raises(ValueError, match="nothing is left"):
        allotment(per_loop, Left(tokens=0))


def test_an_ended_loop_is_charged_what_it_spent_or_its_whole_allotment_if_it_said_nothing() -> None:
    assert charged(Budget(max_tokens=100), used(40, 0.2)) == used(40, 0.2)
    whole = charged(Budget(max_tokens=100, max_cost_usd=0.5), None)
    assert (whole.total_tokens, whole.cost_usd) == (100, 0.5)
    assert charged(None, None) == TokenUsage()


def memory(total: Budget | None) -> GraphMemory:
    request = GraphRequest(goal="g", total_budget=total)
    return GraphInput(graph_id="g", request=request, created_at="now").first_memory()


def test_allotments_shrink_and_return_what_was_not_spent_when_loops_end() -> None:
    mem = memory(Budget(max_tokens=1000))
    budget = GraphBudget(mem)
    per_loop = Budget(max_tokens=400)
    assert budget.allot("T-001", per_loop) == Budget(max_tokens=400)
    assert budget.allot("T-002", per_loop) == Budget(max_tokens=400)
    assert budget.allot("T-003", per_loop) == Budget(max_tokens=200)  # what is left
    assert budget.spent  # all held by running loops: nothing more starts
    budget.ended("T-001", used(150))  # 250 of its 400 come back
    assert budget.left() == Left(tokens=250) and mem.state.usage.total_tokens == 150
    assert budget.allot("T-004", per_loop) == Budget(max_tokens=250)
    for task_id, spent in (("T-002", 400), ("T-003", 200), ("T-004", 260)):
        budget.ended(task_id, used(spent))
    assert mem.allotted == {} and mem.state.usage.total_tokens == 1010
    assert budget.spent
    assert budget.message(["T-005", "T-006"]) == (
        "the graph's budget is spent: used 1010 tokens of 1000; not started: T-005, T-006"
    )


def test_without_a_total_loops_keep_their_own_budget_and_usage_is_still_summed() -> None:
    mem = memory(None)
    budget = GraphBudget(mem)
    assert budget.allot("T-001", Budget(max_cost_usd=3.0)) == Budget(max_cost_usd=3.0)
    assert budget.allot("T-002", None) is None
    assert mem.allotted == {}
    budget.ended("T-001", used(10, 0.5))
    budget.ended("T-002", None)
    assert mem.state.usage == used(10, 0.5) and not budget.spent


def test_the_message_names_what_was_spent_of_each_limit_the_total_sets() -> None:
    total = Budget(max_tokens=100, max_cost_usd=1.0)
    assert spent_message(total, used(50, 1.0), []) == (
        "the graph's budget is spent: used 50 tokens of 100 and spent $1.0000 of $1.0000"
    )
    assert spent_message(Budget(max_tokens=100), used(97, 1.0), []) == (
        "the graph's budget is spent: used 97 tokens of 100"
    )
    assert spent_message(total, used(120, 1.5), ["T-002"]) == (
        "the graph's budget is spent: used 120 tokens of 100 and spent $1.5000 of $1.0000;"
        " not started: T-002"
    )


def test_a_loop_cut_by_the_total_is_told_apart_from_one_within_its_own_budget() -> None:
    own = Budget(max_tokens=500, max_cost_usd=2.0)
    assert cut_by_the_total(own, Budget(max_tokens=300, max_cost_usd=2.0))
    assert cut_by_the_total(own, Budget(max_tokens=500, max_cost_usd=1.5))
    assert not cut_by_the_total(own, own)
    assert cut_by_the_total(None, Budget(max_tokens=300))  # all it had was the total's
    assert not cut_by_the_total(own, None)


def test_a_loop_that_ran_out_of_what_the_total_left_it_spends_the_graphs_budget() -> None:
    # Loops never spend past what they are given: what is left of the total after one ran
    # out of it is a crumb no request fits in, and no loop is started with it.
    mem = memory(Budget(max_tokens=1000))
    budget = GraphBudget(mem)
    per_loop = Budget(max_tokens=600)
    assert budget.allot("T-001", per_loop) == per_loop
    budget.ended("T-001", used(600), ran_out=True, per_loop=per_loop)  # its own budget
    assert not budget.spent and budget.left() == Left(tokens=400)
    assert budget.allot("T-002", per_loop) == Budget(max_tokens=400)
    budget.ended("T-002", used(391), ran_out=True, per_loop=per_loop)
    assert budget.left() == Left(tokens=9)
    assert budget.spent and mem.budget_spent
    assert budget.message(["T-003"]) == (
        "the graph's budget is spent: used 991 tokens of 1000; not started: T-003"
    )
