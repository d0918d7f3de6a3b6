"""Connecting to Temporal the same way from every entry point."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile

from schemas.settings import Settings


async def connect(settings: Settings) -> Client:
    """Address and namespace from Settings; TLS and API key (Temporal Cloud) from the
    SDK's environment configuration (TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_*)."""
    config: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    config["target_host"] = settings.temporal_address
    config["namespace"] = settings.temporal_namespace
    return await Client.connect(**config, data_converter=pydantic_data_converter)
