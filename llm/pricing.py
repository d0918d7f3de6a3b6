"""What a model call costs: the list prices of the default models, and the arithmetic."""

from __future__ import annotations

from collections.abc import Mapping

from loopworks.schemas.run import TokenUsage
from loopworks.schemas.settings import ModelPrice, Settings

# List prices of the default models when written; check them against your account and
# override or extend with LOOPS_PRICES (JSON, by model id).
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "claude-haiku-4-5": ModelPrice(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25),
    "claude-sonnet-4-6": ModelPrice(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
    "claude-opus-4-8": ModelPrice(input=5.0, output=25.0, cache_read=0.5, cache_write=6.25),
    # A former opus default, still priced for the runs and definitions that name it.
    "claude-opus-4-5": ModelPrice(input=5.0, output=25.0, cache_read=0.5, cache_write=6.25),
}


def cost_usd(model: str, usage: TokenUsage, prices: Mapping[str, ModelPrice]) -> float:
    """What `usage` of `model` costs at `prices` (LOOPS_PRICES), else at its list price;
    unknown models cost nothing we can know."""
    price = prices.get(model) or DEFAULT_PRICES.get(model)
    if price is None:
        return 0.0
    millions = 1_000_000
    return round(
        usage.input_tokens * price.input / millions
        + usage.output_tokens * price.output / millions
        + usage.cache_read_input_tokens * price.cache_read / millions
        + usage.cache_creation_input_tokens * price.cache_write / millions,
        6,
    )


def price(usage: TokenUsage, model: str, settings: Settings) -> None:
    """Set the usage's cost from the settings' price table."""
    usage.cost_usd = cost_usd(model, usage, settings.prices)
