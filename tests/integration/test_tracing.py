"""One trace from `POST /runs` through the workflow and its activities to each model call.

The API runs in-process over httpx's ASGI transport, the worker in-process on the
time-skipping test server; spans go to an in-memory exporter on a provider of the
test's own (the process-wide provider is never set, so nothing leaks between tests).
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from loopworks.api.main import create_app
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.loop import LoopResult
from loopworks.schemas.run import TERMINAL_STATUSES
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect
from loopworks.service.telemetry import (
    TracingConfigError,
    build_tracer_provider,
    client_interceptors,
    configure_tracing,
    tracer,
    tracing_interceptor,
)
from loopworks.worker.build import build_deps, build_worker
from tests.integration.stack import Stack

TERMINAL = {status.value for status in TERMINAL_STATUSES}
TRACING_VARIABLES = (
    "LOOPS_TRACING",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)


@pytest.fixture
def no_tracing_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in TRACING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, exporter
    finally:
        provider.shutdown()


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[ReadableSpan]:
    chain = []
    while span.parent is not None:
        parent = by_id.get(span.parent.span_id)
        assert parent is not None, f"{span.name}'s parent was not exported"
        chain.append(parent)
        span = parent
    return chain


@pytest.mark.workflow
async def test_api_span_is_the_root_of_workflow_activity_and_model_spans(
    time_skipping_env: WorkflowEnvironment,
    tmp_path: Path,
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    config = time_skipping_env.client.config()
    config["interceptors"] = [*config["interceptors"], tracing_interceptor(provider)]
    client = Client(**config)
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_TASK_QUEUE=f"q-{uuid.uuid4().hex[:8]}",
        # The time-skipping server cannot count workflows: no in-progress caps.
        LOOPS_MAX_RUNS_PER_CLIENT=0,
        LOOPS_MAX_RUNS=0,
    )
    deps = dataclasses.replace(build_deps(settings, OfflineModels()), tracer=tracer(provider))
    app = create_app(settings, client=client, tracer_provider=provider)
    transport = httpx.ASGITransport(app=app)

    async with (
        build_worker(client, settings, deps=deps),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as http,
    ):
        response = await http.post(
            "/runs", json={"task": "Write a guide to caching", "audit_probability": 0}
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        result = await client.get_workflow_handle(run_id, result_type=LoopResult).result()
        assert result.state.run_id == run_id

        # Named by route template, not by path.
        assert (await http.get(f"/runs/{run_id}")).status_code == 200

    spans = exporter.get_finished_spans()
    names = [span.name for span in spans]
    by_id = {span.context.span_id: span for span in spans}

    [get] = [span for span in spans if span.name == "GET /runs/{run_id}"]
    assert get.attributes is not None
    assert get.attributes["http.route"] == "/runs/{run_id}"
    assert get.attributes["url.path"] == f"/runs/{run_id}"
    # The status read is a trace of its own, not part of the run's.
    run_spans = [span for span in spans if span.context.trace_id != get.context.trace_id]

    [api] = [span for span in run_spans if span.name == "POST /runs"]
    assert api.parent is None, "the API request span is the root"
    assert api.kind == trace.SpanKind.SERVER
    assert api.attributes is not None
    assert api.attributes["http.request.method"] == "POST"
    assert api.attributes["http.route"] == "/runs"
    assert api.attributes["http.response.status_code"] == 201
    assert {span.context.trace_id for span in run_spans} == {api.context.trace_id}, names

    [start] = [span for span in run_spans if span.name == "StartWorkflow:LoopWorkflow"]
    # Under FastAPI's `fastapi.endpoint` span for the route, itself under the request span.
    assert api in ancestors(start, by_id)
    workflow_spans = [span for span in run_spans if span.name == "RunWorkflow:LoopWorkflow"]
    assert workflow_spans, names
    activities = [span for span in run_spans if span.name.startswith("RunActivity:")]
    assert "RunActivity:hydrate" in {span.name for span in activities}, names
    models = [span for span in run_spans if span.name.startswith("llm ")]
    assert "llm hydrator" in {span.name for span in models}, names

    for span in [*workflow_spans, *activities, *models]:
        assert api in ancestors(span, by_id), f"{span.name} does not descend from the API span"

    # Each model call is a child of the activity that made it, and says what it cost.
    for model in models:
        assert model.parent is not None
        assert by_id[model.parent.span_id].name.startswith("RunActivity:"), model.name
    [hydrator] = [span for span in models if span.name == "llm hydrator"][:1]
    assert hydrator.attributes is not None
    assert hydrator.attributes["loops.role"] == "hydrator"
    assert hydrator.attributes["loops.run_id"] == run_id
    assert hydrator.attributes["loops.call_index"] == 1
    assert hydrator.attributes["gen_ai.request.model"]
    assert "gen_ai.usage.input_tokens" in hydrator.attributes
    assert "gen_ai.usage.output_tokens" in hydrator.attributes


# ConsoleSpanExporter prints each span as indented JSON: its name, then its context.
CONSOLE_SPAN = re.compile(r'"name": "([^"]+)",\s*"context": \{\s*"trace_id": "(0x[0-9a-f]+)"')


def console_spans(output: str) -> dict[str, set[str]]:
    """Span name -> the trace ids it appeared in."""
    found: dict[str, set[str]] = {}
    for name, trace_id in CONSOLE_SPAN.findall(output):
        found.setdefault(name, set()).add(trace_id)
    return found


@pytest.mark.integration
def test_entry_points_trace_one_run_across_processes(stack: Stack) -> None:
    """`python -m loopworks.api` and `python -m loopworks.worker` with LOOPS_TRACING=console:
    the API's request span and the worker's activity and model spans print with one trace id."""
    tracing = {"LOOPS_TRACING": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    worker = stack.start_worker(**tracing)
    api, base_url = stack.start_api(**tracing)
    with httpx.Client(base_url=base_url, timeout=30) as http:
        response = http.post("/runs", json={"task": "Write a guide", "audit_probability": 0})
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        deadline = time.monotonic() + 90
        while http.get(f"/runs/{run_id}").json()["status"] not in TERMINAL:
            assert time.monotonic() < deadline, worker.output()[-4000:]
            time.sleep(0.25)
    # A clean stop flushes what the batch processors still hold.
    api.stop()
    worker.stop()
    api_spans, worker_spans = console_spans(api.output()), console_spans(worker.output())
    [trace_id] = api_spans["POST /runs"]
    assert trace_id in api_spans["StartWorkflow:LoopWorkflow"]
    for name in ("RunWorkflow:LoopWorkflow", "RunActivity:hydrate", "llm hydrator"):
        assert worker_spans.get(name) == {trace_id}, (name, worker_spans.keys())


@pytest.mark.unit
def test_tracing_is_off_without_environment(no_tracing_env: pytest.MonkeyPatch) -> None:
    before = trace.get_tracer_provider()
    assert configure_tracing(Settings(), "loopworks-test") is None
    assert trace.get_tracer_provider() is before
    assert client_interceptors() == []


@pytest.mark.unit
@pytest.mark.parametrize(
    ("variables", "exporter"),
    [
        ({"LOOPS_TRACING": "console"}, "ConsoleSpanExporter"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4317"}, "OTLPSpanExporter"),
        ({"LOOPS_TRACING": "otlp"}, "OTLPSpanExporter"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4317",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTLPSpanExporter",
        ),
    ],
)
def test_exporter_follows_environment(
    no_tracing_env: pytest.MonkeyPatch, variables: dict[str, str], exporter: str
) -> None:
    for name, value in variables.items():
        no_tracing_env.setenv(name, value)
    no_tracing_env.setenv("OTEL_SERVICE_NAME", "loopworks-api-eu")
    provider = build_tracer_provider(Settings(), "loopworks-api")
    assert provider is not None
    try:
        assert provider.resource.attributes["service.name"] == "loopworks-api-eu"
        processors = provider._active_span_processor._span_processors
        assert [type(p) for p in processors] == [BatchSpanProcessor]
        assert type(processors[0].span_exporter).__name__ == exporter  # type: ignore[attr-defined]
        if exporter == "OTLPSpanExporter":
            assert type(processors[0].span_exporter).__module__.endswith("grpc.trace_exporter")  # type: ignore[attr-defined]
    finally:
        provider.shutdown()


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """The compose collector's OTLP/gRPC receiver, reduced to remembering span names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def Export(  # the generated servicer's method name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.names += [span.name for span in scope_spans.spans]
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.mark.unit
def test_otlp_endpoint_exports_over_grpc(no_tracing_env: pytest.MonkeyPatch) -> None:
    """What the compose stack sets: OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4317."""
    collector = Collector()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        no_tracing_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        provider = build_tracer_provider(Settings(), "loopworks-worker")
        assert provider is not None
        with tracer(provider).start_as_current_span("llm hydrator"):
            pass
        assert provider.force_flush(timeout_millis=10_000)
        provider.shutdown()
        assert collector.names == ["llm hydrator"]
    finally:
        server.stop(grace=None)


@pytest.mark.unit
@pytest.mark.parametrize("off", ["off", "none", "OFF", ""])
def test_loops_tracing_off_wins_over_the_endpoint(
    no_tracing_env: pytest.MonkeyPatch, off: str
) -> None:
    no_tracing_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector:4317")
    no_tracing_env.setenv("LOOPS_TRACING", off)
    assert build_tracer_provider(Settings(), "loopworks-api") is None


@pytest.mark.unit
def test_sdk_disabled_turns_tracing_off(no_tracing_env: pytest.MonkeyPatch) -> None:
    no_tracing_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector:4317")
    no_tracing_env.setenv("OTEL_SDK_DISABLED", "true")
    assert build_tracer_provider(Settings(), "loopworks-api") is None


@pytest.mark.unit
@pytest.mark.parametrize(
    "variables",
    [
        {"LOOPS_TRACING": "jaeger"},
        {"LOOPS_TRACING": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
    ],
)
def test_unknown_tracing_configuration_is_refused(
    no_tracing_env: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    for name, value in variables.items():
        no_tracing_env.setenv(name, value)
    with pytest.raises(TracingConfigError):
        build_tracer_provider(Settings(), "loopworks-worker")


@pytest.mark.workflow
async def test_connect_takes_explicit_interceptors(
    time_skipping_env: WorkflowEnvironment,
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """connect(settings) stays as it was; connect(settings, interceptors=...) traces."""
    provider, _ = traced
    target = time_skipping_env.client.service_client.config.target_host
    settings = Settings(TEMPORAL_ADDRESS=target)
    plain = await connect(settings)
    assert not any(type(i).__name__ == "TracingInterceptor" for i in plain.config()["interceptors"])
    interceptor = tracing_interceptor(provider)
    traced_client = await connect(settings, interceptors=[interceptor])
    assert interceptor in traced_client.config()["interceptors"]
