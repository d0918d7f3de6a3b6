"""OpenTelemetry tracing: one trace from an API request through the workflow start, each
activity and each model call.

Off unless asked for: `OTEL_EXPORTER_OTLP_ENDPOINT` set exports over OTLP, `LOOPS_TRACING`
chooses explicitly (`otlp`, `console`, `off`). Off installs nothing: the Temporal client
gets no interceptor, FastAPI skips its request spans and model-call spans are no-ops.

The API's request span is FastAPI's own (it traces once a provider is installed).

Temporal propagates the context in workflow and activity headers through
`temporalio.contrib.opentelemetry.TracingInterceptor` (the stable interceptor: it takes a
tracer, so tests can trace into a provider of their own without touching the global one).
"""

from __future__ import annotations

import logging
import os

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from temporalio.client import Interceptor
from temporalio.contrib.opentelemetry import TracingInterceptor

from loopworks.schemas.settings import Settings

log = logging.getLogger("loopworks.telemetry")

TRACER_NAME = "loopworks"
OTLP = "otlp"
CONSOLE = "console"
OFF_VALUES = frozenset({"off", "none", "false", "0", ""})
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingConfigError(ValueError):
    """LOOPS_TRACING or OTEL_EXPORTER_OTLP_PROTOCOL names something we cannot do."""


def tracing_mode(settings: Settings) -> str | None:
    """`otlp`, `console`, or None for off, from LOOPS_TRACING and the OTel environment."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if settings.tracing is not None:
        asked = settings.tracing.strip().lower()
        if asked in OFF_VALUES:
            return None
        if asked in (OTLP, CONSOLE):
            return asked
        raise TracingConfigError(
            f"LOOPS_TRACING must be one of otlp, console or off; got {settings.tracing!r}"
        )
    if any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES):
        return OTLP
    return None


def otlp_exporter() -> SpanExporter:
    """gRPC by default (the compose collector listens on 4317); `http/protobuf` when
    OTEL_EXPORTER_OTLP_PROTOCOL says so. Both read the endpoint, headers and TLS
    settings from the standard OTEL_EXPORTER_OTLP_* variables themselves."""
    protocol = next(
        (os.environ[name].strip() for name in PROTOCOL_VARIABLES if os.environ.get(name)), "grpc"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "http/protobuf":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HTTPSpanExporter,
            )
        except ImportError as err:
            raise TracingConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf needs the"
                " opentelemetry-exporter-otlp-proto-http package; or use grpc"
            ) from err
        return HTTPSpanExporter()
    raise TracingConfigError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL must be grpc or http/protobuf; got {protocol!r}"
    )


def build_tracer_provider(settings: Settings, service_name: str) -> TracerProvider | None:
    """A provider exporting where the environment says, or None when tracing is off.

    Installs nothing globally: `configure_tracing` does that for the entry points.
    """
    mode = tracing_mode(settings)
    if mode is None:
        return None
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    exporter = ConsoleSpanExporter(service_name=name) if mode == CONSOLE else otlp_exporter()
    # Batched either way: exporting never blocks a request, an activity or a workflow task.
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def configure_tracing(settings: Settings, service_name: str) -> TracerProvider | None:
    """Install the process-wide tracer provider, if tracing is on; call once at start.

    The SDK flushes and shuts the provider down at interpreter exit.
    """
    provider = build_tracer_provider(settings, service_name)
    if provider is None:
        return None
    trace.set_tracer_provider(provider)
    log.info(
        "tracing on (%s) as service %s",
        tracing_mode(settings),
        provider.resource.attributes.get(SERVICE_NAME),
    )
    return provider


def tracing_active() -> bool:
    """Whether a real tracer provider is installed process-wide (by us or by anyone)."""
    return not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def tracer(provider: trace.TracerProvider | None = None) -> trace.Tracer:
    """loopworks' tracer from `provider`, or from the global provider (a proxy that
    follows whatever is installed later)."""
    if provider is None:
        return trace.get_tracer(TRACER_NAME)
    return provider.get_tracer(TRACER_NAME)


def tracing_interceptor(provider: trace.TracerProvider | None = None) -> TracingInterceptor:
    """Temporal's OTel interceptor: on a client, it also applies to workers built on it."""
    return TracingInterceptor(tracer(provider))


def client_interceptors() -> list[Interceptor]:
    """What `connect` adds by default: tracing when a provider is installed."""
    return [tracing_interceptor()] if tracing_active() else []
