"""A step's allowance, request by request (docs/loop.md#budgets): the arithmetic as plain
functions, and the guard on real pydantic-ai runs (a structured answer, an agent) against
a model that spends more than is left."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.model_calls import consult
from loopworks.agent.loop import run_agent, run_answering_agent
from loopworks.agent.trajectory import TrajectoryRecord
from loopworks.llm.anthropic import AnthropicModels, build_anthropic_client
from loopworks.llm.budget import (
    FRAMING_TOKENS,
    MIN_RESPONSE_TOKENS,
    BudgetSpent,
    Meter,
    RequestCap,
    cap_request,
    input_bound,
)
from loopworks.llm.offline.model import OfflineScript
from loopworks.llm.structured import ask
from loopworks.prompts.catalog import load_agents, load_templates
from loopworks.schemas.contexts import PlannerContext
from loopworks.schemas.roles import IterationPlan, QAReport, Role
from loopworks.schemas.run import Allowance, Budget, TokenUsage, budget_left
from loopworks.schemas.settings import ModelPrice, Settings
from loopworks.schemas.steps import ARTIFACT_PATH, BUDGET_EXHAUSTED, ModelStep
from loopworks.workflows.allowances import allowance
from loopworks.workspace.git import GitWorkspaces
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest, Reply
from tests.fakes.spending import SpendingModels
from tests.unit.test_agent_loop import INSTRUCTIONS, model_call

pytestmark = pytest.mark.unit

SONNET = ModelPrice(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
# What the offline model answers, whatever the step's inputs.
SCRIPT = OfflineScript.model_validate(
    {
        "planner": {"*": {"focus": "write it", "steps": ["draft"]}},
        "producer": {"*": {"files": [{"path": ARTIFACT_PATH, "content": "# Draft\n"}]}},
        "qa-verifier": {"*": {"verdict": "VERIFIED", "summary": "fine"}},
    }
)


def spending(
    wants: dict[Role, int | list[int]] | None = None, max_tokens: int | None = None
) -> SpendingModels:
    return SpendingModels(wants=wants or {}, script=SCRIPT, max_tokens=max_tokens)


# --- the arithmetic -------------------------------------------------------------------


def test_a_response_is_capped_to_what_is_left_after_the_input_bound() -> None:
    cap = cap_request(Allowance(max_tokens=10_000), 3_000, None, asked=8_000)
    assert cap == RequestCap(max_tokens=7_000)


def test_the_models_own_cap_holds_when_it_is_the_smaller() -> None:
    assert cap_request(Allowance(max_tokens=100_000), 3_000, None, asked=4_096) == RequestCap()
    assert cap_request(None, 3_000, SONNET, asked=4_096) == RequestCap()
    assert cap_request(Allowance(), 3_000, SONNET, asked=4_096) == RequestCap()


def test_a_request_that_could_not_get_a_useful_answer_is_refused() -> None:
    cap = cap_request(Allowance(max_tokens=3_000 + MIN_RESPONSE_TOKENS - 1), 3_000, None, 4_096)
    assert cap.max_tokens is None
    assert cap.refused == (
        "the budget is spent: 3,255 tokens left, too little for the next model request "
        "(its input alone may be up to 3,000 tokens) and its answer"
    )
    just = cap_request(Allowance(max_tokens=3_000 + MIN_RESPONSE_TOKENS), 3_000, None, 4_096)
    assert just == RequestCap(max_tokens=MIN_RESPONSE_TOKENS)
    # A model asked for less than the floor is refused only below what it asks for.
    assert cap_request(Allowance(max_tokens=3_100), 3_000, None, asked=50) == RequestCap()
    assert cap_request(Allowance(max_tokens=3_040), 3_000, None, asked=50).refused


def test_dollars_pay_the_input_at_its_dearest_price_and_the_rest_buys_output() -> None:
    cap = cap_request(Allowance(max_cost_usd=0.10), 10_000, SONNET, asked=None)
    # 10,000 input tokens at the cache-write price ($3.75/M) leave $0.0624990 for output.
    assert cap == RequestCap(max_tokens=4_166)
    spent = cap_request(Allowance(max_cost_usd=0.0375), 10_000, SONNET, asked=None)
    assert spent.refused is not None and "$0.0375 left" in spent.refused
    # A model without a price costs the run nothing it records: dollars do not cap it.
    assert cap_request(Allowance(max_cost_usd=0.0001), 10_000, None, None) == RequestCap()
    # Free output: only the input must be paid for.
    free = ModelPrice(input=1.0, output=0.0, cache_read=0.1, cache_write=1.25)
    assert cap_request(Allowance(max_cost_usd=1.0), 10_000, free, 4_096) == RequestCap()
    assert cap_request(Allowance(max_cost_usd=0.01), 10_000, free, 4_096).refused


def test_the_smaller_of_the_two_limits_caps() -> None:
    both = Allowance(max_tokens=50_000, max_cost_usd=0.10)
    assert cap_request(both, 10_000, SONNET, None) == RequestCap(max_tokens=4_166)
    assert cap_request(both, 10_000, None, None) == RequestCap(max_tokens=40_000)


@pytest.mark.parametrize(
    ("tokens", "usd", "bound"),
    list(
        itertools.product([None, 1_300, 5_000, 80_000], [None, 0.004, 0.05, 2.0], [0, 999, 20_000])
    ),
)
def test_a_request_at_its_bound_and_its_cap_never_spends_more_than_is_left(
    tokens: int | None, usd: float | None, bound: int
) -> None:
    left = Allowance(max_tokens=tokens, max_cost_usd=usd)
    cap = cap_request(left, bound, SONNET, asked=8_192)
    if cap.refused:
        return
    output = cap.max_tokens if cap.max_tokens is not None else 8_192
    if tokens is not None:
        assert bound + output <= tokens
    if usd is not None:
        dearest = max(SONNET.input, SONNET.cache_write, SONNET.cache_read)
        assert (bound * dearest + output * SONNET.output) / 1_000_000 <= usd


def test_the_input_bound_builds_on_the_providers_count() -> None:
    assert input_bound(None, 5_000) == 5_000 + FRAMING_TOKENS
    assert input_bound(12_000, 500) == 12_500 + FRAMING_TOKENS


def test_what_is_left_of_a_budget_after_usage_and_holds() -> None:
    budget = Budget(max_tokens=10_000, max_cost_usd=1.0)
    used = TokenUsage(input_tokens=3_000, output_tokens=1_000, cost_usd=0.3)
    held = [Allowance(max_tokens=2_500, max_cost_usd=0.2), Allowance(max_tokens=None)]
    assert budget_left(budget, used, held) == Allowance(max_tokens=3_500, max_cost_usd=0.5)
    # Cache reads are no tokens of a budget's (docs/loop.md#budgets): only their price.
    cached = TokenUsage(input_tokens=10, cache_read_input_tokens=9_000, cost_usd=0.0)
    assert budget_left(Budget(max_tokens=100), cached) == Allowance(max_tokens=90)
    assert budget_left(budget, TokenUsage(input_tokens=20_000, cost_usd=3.0)) == Allowance(
        max_tokens=0, max_cost_usd=0.0
    )
    assert budget_left(None, used) is None
    assert budget_left(Allowance(), used) is None
    # Sums of floats are not exact: dollars are kept to the millionth.
    thirds = TokenUsage(cost_usd=0.1 + 0.2)
    assert budget_left(Budget(max_cost_usd=0.3), thirds) == Allowance(max_cost_usd=0.0)


def test_steps_starting_together_divide_what_is_left() -> None:
    budget = Budget(max_tokens=10_001, max_cost_usd=0.333333)
    first = allowance(budget, TokenUsage(), (), 0.5)
    assert first == Allowance(max_tokens=5_000, max_cost_usd=0.166666)
    assert first is not None
    second = allowance(budget, TokenUsage(), [first])
    assert second == Allowance(max_tokens=5_001, max_cost_usd=0.166667)
    assert allowance(budget, TokenUsage(), (), 0.0) == Allowance(max_tokens=0, max_cost_usd=0.0)
    assert allowance(None, TokenUsage(), (), 0.5) is None


# --- the guard on real runs -----------------------------------------------------------


async def test_a_structured_answer_is_cut_at_what_is_left_and_counted() -> None:
    source = spending({Role.PLANNER: 500_000})
    meter = Meter(Allowance(max_tokens=40_000))
    call = model_call(role=Role.PLANNER, context={"task": "Plan the work."})
    with pytest.raises(BudgetSpent) as spent:
        await ask(source, call, INSTRUCTIONS, IterationPlan, meter=meter)

    [request] = source.requests
    assert request.max_tokens is not None and request.max_tokens < 40_000
    assert request.output_tokens == request.max_tokens < request.wanted
    assert spent.value.usage.total_tokens == meter.used.total_tokens <= 40_000
    assert spent.value.usage.total_tokens == request.input_tokens + request.output_tokens
    assert "cut at the" in spent.value.reason


async def test_a_structured_answer_is_not_asked_for_when_nothing_is_left() -> None:
    source = spending()
    meter = Meter(Allowance(max_tokens=500))
    with pytest.raises(BudgetSpent) as spent:
        await ask(source, model_call(role=Role.PLANNER), INSTRUCTIONS, IterationPlan, meter=meter)
    assert source.requests == []
    assert spent.value.usage == TokenUsage() and meter.used == TokenUsage()
    assert "500 tokens left" in spent.value.reason


async def test_a_call_within_its_allowance_is_untouched_and_charged() -> None:
    source = spending({Role.PLANNER: 300}, max_tokens=4_096)
    meter = Meter(Allowance(max_tokens=1_000_000))
    answered = await ask(
        source, model_call(role=Role.PLANNER), INSTRUCTIONS, IterationPlan, meter=meter
    )
    [request] = source.requests
    assert request.max_tokens == 4_096  # the model's own cap holds
    assert meter.used.total_tokens == answered.usage.total_tokens == request.input_tokens + 300


async def test_an_agent_out_of_budget_stops_with_its_work_so_far(tmp_path: Path) -> None:
    # The first turn writes the draft cheaply; the second would answer at great length.
    source = spending({Role.PRODUCER: [100, 1_000_000]})
    meter = Meter(Allowance(max_tokens=60_000))
    outcome = await run_agent(
        source, model_call(), INSTRUCTIONS, tmp_path, 12, "produce", meter=meter
    )

    assert (tmp_path / ARTIFACT_PATH).is_file()  # the first turn's work is there
    assert outcome.budget_exhausted is not None and "cut at the" in outcome.budget_exhausted
    assert not outcome.limit_reached
    first, second = source.requests
    assert first.max_tokens is not None and first.output_tokens == 100
    assert second.max_tokens is not None and second.output_tokens == second.max_tokens
    spent = sum(r.input_tokens + r.output_tokens for r in source.requests)
    assert outcome.usage.total_tokens == spent
    assert outcome.usage.total_tokens <= 60_000
    assert meter.used.total_tokens == outcome.usage.total_tokens
    last: TrajectoryRecord = outcome.records[-1]
    assert (last.kind, last.output) == ("limit", outcome.budget_exhausted)
    # The cut response is in the trajectory, as it was paid for.
    assert outcome.turns == 2


async def test_an_agent_whose_gate_finds_the_budget_spent_stops_too(tmp_path: Path) -> None:
    class SpendingGate:
        closed = False

        async def before(self, tool: str, arguments: dict[str, Any], done: Any) -> str | None:
            raise BudgetSpent("the budget is spent: an audit found nothing left", TokenUsage())

    source = spending()
    outcome = await run_agent(
        source,
        model_call(),
        INSTRUCTIONS,
        tmp_path,
        12,
        "produce",
        gate=SpendingGate(),
        meter=Meter(Allowance(max_tokens=1_000_000)),
    )
    assert outcome.budget_exhausted == "the budget is spent: an audit found nothing left"
    assert not (tmp_path / ARTIFACT_PATH).exists()  # the call it came before never ran


async def test_a_verifier_out_of_budget_raises(tmp_path: Path) -> None:
    source = spending({Role.QA_VERIFIER: 1_000_000})
    meter = Meter(Allowance(max_tokens=30_000))
    with pytest.raises(BudgetSpent) as spent:
        await run_answering_agent(
            source,
            model_call(role=Role.QA_VERIFIER),
            INSTRUCTIONS,
            tmp_path,
            6,
            "qa",
            QAReport,
            meter,
        )
    assert 0 < spent.value.usage.total_tokens <= 30_000


async def test_dollars_left_cap_a_priced_model() -> None:
    source = spending({Role.PLANNER: 500_000})
    meter = Meter(Allowance(max_cost_usd=0.5), {"claude-test": SONNET})
    with pytest.raises(BudgetSpent):
        await ask(source, model_call(role=Role.PLANNER), INSTRUCTIONS, IterationPlan, meter=meter)
    assert 0 < meter.used.cost_usd <= 0.5


# --- over the wire: the real SDK against the local Messages API -------------------------


def answering_at_length(api: FakeMessagesAPI, request: RecordedRequest) -> Reply:
    """The offline answer, said at the greatest length the request allows: its usage is
    every output token `max_tokens` gives, and the reply is cut there."""
    block = {
        "type": "tool_use",
        "id": "toolu_long",
        "name": request.tool["name"],
        "input": api.offline_answer(request),
    }
    tokens = {"input_tokens": len(request.user_text) // 4}
    usage = {**tokens, "output_tokens": request.body["max_tokens"]}
    return api.message(request, [block], "max_tokens", usage, 0.0)


async def test_the_cap_goes_on_the_wire_and_a_spent_step_fails_with_its_usage(
    tmp_path: Path,
) -> None:
    with FakeMessagesAPI(api_key="test-key") as api:
        settings = Settings(
            LOOPS_LLM="anthropic", ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=api.base_url
        )
        models = AnthropicModels(build_anthropic_client(settings), max_tokens=8_192)
        deps = StepDeps(
            settings=settings,
            models=models,
            agents=load_agents(),
            templates=load_templates(),
            workspaces=GitWorkspaces(tmp_path, author_name="t", author_email="t@localhost"),
        )
        api.script(Role.PLANNER, answering_at_length)
        step = ModelStep(run_id="r", allowance=Allowance(max_tokens=10_000))
        context = PlannerContext(
            task="Write a guide", intent="A guide", acceptance_criteria=["titled"], iteration=1
        )
        try:
            with pytest.raises(ApplicationError) as raised:
                await consult(deps, Role.PLANNER, step, context, IterationPlan)
        finally:
            await models.provider.client.close()

    [request] = api.requests
    sent = request.body["max_tokens"]
    assert MIN_RESPONSE_TOKENS <= sent < 8_192  # the budget's cap, not the model's
    assert raised.value.type == BUDGET_EXHAUSTED and raised.value.non_retryable
    assert "cut at the" in raised.value.message
    [details] = raised.value.details
    usage = TokenUsage.model_validate(details)
    assert usage.output_tokens == sent and usage.total_tokens <= 10_000
    assert usage.cost_usd > 0  # priced, for the run to count
