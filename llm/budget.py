"""A step's allowance, request by request (docs/loop.md#budgets).

The workflow gives each model step an allowance: what is left of the run's budget when it
starts. Every model request the step makes passes a `BudgetGuard`, a pydantic-ai
capability on the call's `Agent` run. Before the request it bounds the request's input
from above and either refuses it (`BudgetSpent`), when what is left could not pay for that
input and a useful response, or caps the response's `max_tokens` to what is left after
the input. After the response it charges the provider's count of what the request spent
to the step's `Meter`, which every call of the step shares (an agent's turns and the
custodiet's audits between them). A response cut at a cap the budget set ends the step
too: what was left could not pay for the whole answer.

Why not pydantic-ai's `UsageLimits` for tokens: its counts include cached input, which a
budget does not count (`TokenUsage.total_tokens`), and it checks them after a response,
so it notices an overshoot without preventing one. A response's `max_tokens` is what
bounds a request before it is sent. (`UsageLimits` still bounds the agents' turns.)

The input bound: token counts are the provider's, reported after a response, so the input
of a request about to be sent is bounded from above. A call's later requests: the previous
request's input as the provider counted it, plus one token for each byte of what the
conversation gained since (the response and the new request, as JSON). Its first
request: one token a byte of all of it (instructions, tool schemas, messages). Both add
`FRAMING_TOKENS` for what the provider wraps a request in. No tokenizer we know gives a
token to less than one byte, so the bound holds; it is loose (three to four times a real
count, for prose) on what is new, exact on the rest. Dollars: the input at the model's
dearest input price (fresh, cache write or cache read), the response at its output price;
a model without a price costs nothing the run records (llm/pricing.py), so dollars do not
cap it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from loopworks.llm.base import usage_of
from loopworks.llm.pricing import DEFAULT_PRICES, cost_usd
from loopworks.schemas.run import Allowance, TokenUsage, budget_left
from loopworks.schemas.settings import ModelPrice

# A response cut shorter than this is rarely a whole answer or tool call: a request that
# could not be given this much is refused rather than pay for its input to no end.
MIN_RESPONSE_TOKENS = 256
# What a provider wraps a request in beyond its text: the Messages API's tool-use system
# prompt is about 350 tokens, each message's markers a few.
FRAMING_TOKENS = 1_000
# Costs are kept to the millionth of a dollar (`cost_usd` rounds each request's): a cap
# leaves that much over so the rounding cannot carry a run past its limit.
USD_MARGIN = 1e-6
_MILLION = 1_000_000


class BudgetSpent(Exception):
    """A model request refused, or a response cut, for what was left of the step's
    allowance. `usage`: what the call had spent (tokens, unpriced); `cut`: the response cut
    at the budget's cap, which the conversation does not hold yet."""

    def __init__(self, reason: str, usage: TokenUsage, cut: ModelResponse | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage
        self.cut = cut


# --- the arithmetic -------------------------------------------------------------------


def input_bound(previous_input: int | None, new_bytes: int) -> int:
    """At most how many tokens a request's input is: the previous request's input as the
    provider counted it (None: this is the call's first request) and a token for each byte
    of what is new, with the framing."""
    return (previous_input or 0) + new_bytes + FRAMING_TOKENS


@dataclass(frozen=True)
class RequestCap:
    """What a request may do: `max_tokens` caps its response (None: the model's own cap
    holds); `refused` says why it may not be sent at all."""

    max_tokens: int | None = None
    refused: str | None = None


def cap_request(
    remaining: Allowance | None, bound: int, price: ModelPrice | None, asked: int | None
) -> RequestCap:
    """The cap on a request whose input is at most `bound` tokens, so that its input and
    its whole response fit in `remaining`; `asked`, the response cap the model has
    already (None: none). Refused when the response could not have `MIN_RESPONSE_TOKENS`
    (or `asked`, if smaller)."""
    if remaining is None:
        return RequestCap()
    caps: list[tuple[int, str]] = []
    if remaining.max_tokens is not None:
        caps.append((remaining.max_tokens - bound, f"{remaining.max_tokens:,} tokens"))
    if remaining.max_cost_usd is not None and price is not None:
        usd = _usd_cap(remaining.max_cost_usd, bound, price)
        if usd is not None:
            caps.append((usd, f"${remaining.max_cost_usd:.4f}"))
    if not caps:
        return RequestCap()
    cap, what = min(caps)
    if cap < min(MIN_RESPONSE_TOKENS, asked or MIN_RESPONSE_TOKENS):
        return RequestCap(
            refused=f"the budget is spent: {what} left, too little for the next model "
            f"request (its input alone may be up to {bound:,} tokens) and its answer"
        )
    if asked is not None and cap >= asked:
        return RequestCap()
    return RequestCap(max_tokens=cap)


def _usd_cap(usd_left: float, bound: int, price: ModelPrice) -> int | None:
    """The response tokens `usd_left` pays for once an input of `bound` tokens is paid at
    the dearest input price; None when output costs nothing (then only the input counts:
    -1 when even that is not paid for)."""
    dearest_input = max(price.input, price.cache_write, price.cache_read) / _MILLION
    for_output = usd_left - USD_MARGIN - bound * dearest_input
    if price.output <= 0:
        return None if for_output >= 0 else -1
    return math.floor(for_output / (price.output / _MILLION))


# --- the step's meter and the guard on each call --------------------------------------


@dataclass
class Meter:
    """What one step may still spend: its allowance, and what its requests have spent so
    far, each priced at its model's price."""

    allowance: Allowance | None
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)
    used: TokenUsage = field(default_factory=TokenUsage)

    def left(self) -> Allowance | None:
        return budget_left(self.allowance, self.used)

    def price_of(self, model: str) -> ModelPrice | None:
        return self.prices.get(model) or DEFAULT_PRICES.get(model)

    def charge(self, model: str, usage: TokenUsage) -> None:
        priced = usage.model_copy(update={"cost_usd": cost_usd(model, usage, self.prices)})
        self.used = self.used + priced


@dataclass
class BudgetGuard(AbstractCapability[Any]):
    """One call's requests against the step's `meter` (the module's docstring says how);
    `used`: what this call's requests spent, the one cut short included."""

    meter: Meter
    model: str
    used: TokenUsage = field(default_factory=TokenUsage)
    # The previous request's input as the provider counted it, and how many messages it sent.
    _input: int | None = None
    _sent: int = 0
    # The cap this guard set on the request in flight, when it is below the model's own.
    _capped: int | None = None

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = request_context.messages
        if self.meter.allowance is None:
            return request_context  # no limit: only counted
        if self._input is not None and len(messages) > self._sent:
            bound = input_bound(self._input, _json_bytes(messages[self._sent :]))
        else:
            whole = _json_bytes(messages) + _request_bytes(request_context.model_request_parameters)
            bound = input_bound(None, whole)
        settings = request_context.model_settings or ModelSettings()
        asked = settings.get("max_tokens")
        cap = cap_request(self.meter.left(), bound, self.meter.price_of(self.model), asked)
        if cap.refused is not None:
            raise BudgetSpent(cap.refused, self.used)
        self._capped = cap.max_tokens
        if cap.max_tokens is not None:
            request_context.model_settings = {**settings, "max_tokens": cap.max_tokens}
        self._sent = len(messages)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        usage = usage_of(response.usage)
        self.used = self.used + usage
        self.meter.charge(self.model, usage)
        # A server that reports no usage leaves nothing to build on: bound the next request
        # from its bytes again.
        self._input = response.usage.input_tokens or None
        if response.finish_reason == "length" and self._capped is not None:
            raise BudgetSpent(
                f"the budget is spent: a model response was cut at the {self._capped:,} "
                "tokens that were left for it",
                self.used,
                cut=response,
            )
        return response


def _json_bytes(messages: Sequence[ModelMessage]) -> int:
    return len(ModelMessagesTypeAdapter.dump_json(list(messages)))


def _request_bytes(params: ModelRequestParameters) -> int:
    """The bytes of what a request carries besides its messages: the instructions and the
    tools' names, descriptions and schemas."""
    tools = [
        {"name": t.name, "description": t.description, "schema": t.parameters_json_schema}
        for t in [*params.function_tools, *params.output_tools]
    ]
    instructions = "".join(part.content for part in params.instruction_parts or [])
    return len(json.dumps(tools).encode()) + len(instructions.encode())
