"""The span around each model interaction, and what it records: the role, the run, the
model, the tokens and their cost. Configuring where spans go is telemetry.py's job."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import trace

from loopworks.schemas.roles import Role
from loopworks.schemas.run import TokenUsage
from loopworks.schemas.steps import ModelStep
from loopworks.service.telemetry import TRACER_NAME

# Follows the process-wide provider (`service.telemetry.configure_tracing`); no-op without one.
DEFAULT_TRACER = trace.get_tracer(TRACER_NAME)


@contextlib.contextmanager
def model_span(
    tracer: trace.Tracer | None, kind: str, role: Role, step: ModelStep, model: str
) -> Iterator[trace.Span]:
    """A span around one model interaction (a child of the activity's span when the
    Temporal tracing interceptor is on); `tracer` None is the process-wide one."""
    with (tracer or DEFAULT_TRACER).start_as_current_span(
        f"{kind} {role.value}",
        kind=trace.SpanKind.CLIENT,
        attributes={
            "loops.role": role.value,
            "loops.run_id": step.run_id,
            "loops.call_index": step.call_index,
            "loops.iteration": step.iteration,
            "gen_ai.request.model": model,
        },
    ) as span:
        yield span


def record_usage(span: trace.Span, usage: TokenUsage) -> None:
    """Show a call's usage, priced, on its span."""
    if span.is_recording():
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "loops.usage.cache_read_input_tokens": usage.cache_read_input_tokens,
                "loops.usage.cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "loops.cost_usd": usage.cost_usd,
            }
        )
