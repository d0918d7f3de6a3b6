"""Connecting to Temporal the same way from every entry point."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
)
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import GrpcCompression

from loopworks.schemas.payload_keys import parse_payload_keys
from loopworks.schemas.settings import Settings
from loopworks.service.codec import EncryptionCodec
from loopworks.service.telemetry import client_interceptors


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """Pydantic's payload converter (pydantic models cross as JSON), its parts made once
    a process and shared by every instance.

    The SDK makes a new data converter, and with it a payload converter, for each workflow
    activation it decodes and for each completion it encodes, and one more for each
    workflow it runs. Pydantic's payload converter builds a serializer and an empty cache
    of type adapters each time: 2% of the worker's CPU, measured (docs/benchmarks.md).
    Sharing the parts also shares the type adapters.
    """

    def __init__(self) -> None:
        CompositePayloadConverter.__init__(self, *_pydantic_converters())


@functools.cache
def _pydantic_converters() -> tuple[EncodingPayloadConverter, ...]:
    return tuple(PydanticPayloadConverter().converters.values())


# The converter every client of the service builds on.
CONVERTER = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)
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


def data_converter(settings: Settings) -> DataConverter:
    """The one data converter of every client the service builds (worker, API, tools):
    pydantic's, its payloads and failures' messages encrypted when LOOPS_PAYLOAD_KEYS
    holds a key (`loopworks.service.codec`). A client without the key can start nothing a worker
    with it would run, and read nothing it wrote."""
    codec = payload_codec(settings)
    if codec is None:
        return CONVERTER
    # A failure's message and stack trace go into its encoded attributes, and so through
    # the codec too: an error can quote what a run was working on.
    return dataclasses.replace(
        CONVERTER,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def payload_codec(settings: Settings) -> EncryptionCodec | None:
    """The codec of LOOPS_PAYLOAD_KEYS, or None when it holds no key."""
    keys = parse_payload_keys(settings.payload_keys)
    return EncryptionCodec(keys) if keys else None


def compression(settings: Settings, tls: bool) -> GrpcCompression:
    """gzip when asked, or by default over TLS: a server reached over TLS is usually far
    away (Temporal Cloud), where bytes cost more than the CPU to shrink them. Not by
    default when payloads are encrypted: they are most of the bytes, and ciphertext does
    not shrink."""
    if settings.temporal_compression == "auto":
        encrypted = bool(parse_payload_keys(settings.payload_keys))
        return GrpcCompression.GZIP if tls and not encrypted else GrpcCompression.NONE
    return COMPRESSION[settings.temporal_compression]


async def connect(settings: Settings, interceptors: Sequence[Interceptor] | None = None) -> Client:
    """A client on `connect_options`, with the service's data converter.

    `interceptors` default to tracing when `configure_tracing` installed a provider (a
    worker built on the client inherits them); pass `[]` for none.
    """
    chosen = client_interceptors() if interceptors is None else list(interceptors)
    return await Client.connect(
        **connect_options(settings),
        data_converter=data_converter(settings),
        interceptors=chosen,
    )
