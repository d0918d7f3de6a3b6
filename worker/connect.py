"""Connecting to Temporal the same way from every entry point."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import GrpcCompression

from loopworks.schemas.settings import Settings
from loopworks.worker.telemetry import client_interceptors

COMPRESSION = {"none": GrpcCompression.NONE, "gzip": GrpcCompression.GZIP}


async def connect(settings: Settings, interceptors: Sequence[Interceptor] | None = None) -> Client:
    """Address and namespace from Settings; TLS and API key (Temporal Cloud) from the
    SDK's environment configuration (TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_*).

    `interceptors` default to tracing when `configure_tracing` installed a provider (a
    worker built on the client inherits them); pass `[]` for none.
    """
    config: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    config["target_host"] = settings.temporal_address
    config["namespace"] = settings.temporal_namespace
    config["grpc_compression"] = COMPRESSION[settings.temporal_compression]
    chosen = client_interceptors() if interceptors is None else list(interceptors)
    return await Client.connect(
        **config, data_converter=pydantic_data_converter, interceptors=chosen
    )
