"""The app factory: settings, one Temporal client, error handlers, routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from opentelemetry.trace import TracerProvider
from temporalio.client import Client

from loopworks.api import dashboard, errors, redaction, tokens
from loopworks.api.codec_server import CodecCors, ui_origins
from loopworks.api.connection import TemporalConnection
from loopworks.api.errors import TemporalUnavailable
from loopworks.api.hosts import TrustedHosts, allowed_hosts
from loopworks.api.quotas import StreamSlots
from loopworks.api.routes import codec, docs, graphs, health, playbooks, retention, runs, workspaces
from loopworks.api.same_origin import NoCrossSiteWrites
from loopworks.schemas.settings import Settings
from loopworks.service.connect import payload_codec

log = logging.getLogger("loopworks.api")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    connection: TemporalConnection = app.state.temporal
    if not connection.connected:
        try:
            # Connects, and gives the namespace the workflows' search attributes.
            await connection.client()
        except TemporalUnavailable as err:
            # Serve anyway: /readyz says 503 and requests connect and check again.
            log.warning("starting not ready (%s); /readyz reports 503 until it is", err.message)
    yield


def create_app(
    settings: Settings | None = None,
    client: Client | None = None,
    tracer_provider: TracerProvider | None = None,
) -> FastAPI:
    """Build the API. Tests pass `client` to run without a lifespan or a server, and
    `tracer_provider` to trace without the process-wide provider.

    FastAPI's own OpenTelemetry support makes a SERVER span `{method} {route}` per request
    once a provider is installed (`loopworks.service.telemetry.configure_tracing`) or passed
    here; routes run in its context, so their Temporal calls join the request's trace.
    """
    settings = settings or Settings()
    app = FastAPI(
        title="loopworks",
        summary="Agentic reflex loops as durable Temporal workflows",
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI reads a JSON body whole before validating it: refuse one past this
        # (413) as its bytes arrive, before it holds the API's memory.
        max_body_size=settings.api_max_body_bytes,
        telemetry=None if tracer_provider is None else {"tracer_provider": tracer_provider},
        # Served by routes/docs.py from a package: FastAPI's own page loads its assets
        # from a CDN, a blank page offline.
        docs_url=None,
    )
    app.state.settings = settings
    # Read once: a token table that cannot be read stops the app here (ValueError).
    app.state.tokens = tokens.load(settings)
    # What the API serves is redacted of its secrets, these included (api/redaction.py).
    redaction.remember_secrets(settings, app.state.tokens)
    app.state.streams = StreamSlots(settings.max_streams_per_client)
    # The codec endpoint works without Temporal: it only needs the keys.
    app.state.codec = payload_codec(settings)
    # Added first, so inside TrustedHosts: a browser's preflight is answered only for a
    # host the API answers to.
    app.add_middleware(CodecCors, origins=ui_origins(settings))
    # Added before TrustedHosts, so it runs after it (the last added runs first): a foreign
    # Host is refused before an Origin is compared with it. The Temporal UI's page may call
    # the codec routes (api/codec_server.py), and no other.
    app.add_middleware(
        NoCrossSiteWrites,
        trusted=settings.api_trusted_origins,
        codec_origins=ui_origins(settings),
    )
    app.add_middleware(TrustedHosts, allowed=allowed_hosts(settings))
    app.state.temporal = TemporalConnection(settings, client)
    errors.install(app)
    app.include_router(health.router)
    app.include_router(docs.router)
    app.include_router(runs.router)
    app.include_router(workspaces.router)
    app.include_router(graphs.router)
    app.include_router(playbooks.router)
    app.include_router(codec.router)
    dashboard.install(app)
    app.include_router(retention.router)
    return app
