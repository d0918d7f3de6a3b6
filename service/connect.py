"""Connecting to Temporal the same way from every entry point."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import GrpcCompression

from loopworks.schemas.settings import Settings
from loopworks.service.telemetry import client_interceptors

# The one converter every client of the service uses: pydantic models cross as JSON.
CONVERTER = pydantic_data_converter
COMPRESSION = {"none": GrpcCompression.NONE, "gzip": GrpcCompression.GZIP}


def connect_options(settings: Settings) -> dict[str, Any]:
    """`Client.connect`'s options but the converter and interceptors: address, namespace
    and compression from Settings; TLS and API key (Temporal Cloud) from the SDK's
    environment configuration (TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_*)."""
    options: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    options["target_host"] = settings.temporal_address
    options["namespace"] = settings.temporal_namespace
    options["grpc_compression"] = compression(settings, tls=bool(options.get("tls")))
    return options


def compression(settings: Settings, tls: bool) -> GrpcCompression:
    """gzip when asked, or by default over TLS: a server reached over TLS is usually far
    away (Temporal Cloud), where bytes cost more than the CPU to shrink them."""
    if settings.temporal_compression == "auto":
        return GrpcCompression.GZIP if tls else GrpcCompression.NONE
    return COMPRESSION[settings.temporal_compression]


async def connect(settings: Settings, interceptors: Sequence[Interceptor] | None = None) -> Client:
    """A client on `connect_options`, with the pydantic converter.

    `interceptors` default to tracing when `configure_tracing` installed a provider (a
    worker built on the client inherits them); pass `[]` for none.
    """
    chosen = client_interceptors() if interceptors is None else list(interceptors)
    return await Client.connect(
        **connect_options(settings), data_converter=CONVERTER, interceptors=chosen
    )
