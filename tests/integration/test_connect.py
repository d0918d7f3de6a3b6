"""How every entry point connects to Temporal (`service/connect.py`): plain gRPC to a server
without TLS, gzip when asked or over TLS, against a real dev server."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import GrpcCompression

from loopworks.schemas.settings import Settings
from loopworks.service.connect import compression, connect, connect_options
from tests.integration.stack import DevServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        (None, GrpcCompression.NONE),
        ("auto", GrpcCompression.NONE),
        ("gzip", GrpcCompression.GZIP),
        ("none", GrpcCompression.NONE),
    ],
)
async def test_compression_is_off_unless_asked_for(
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    asked: str | None,
    expected: GrpcCompression,
) -> None:
    # The SDK's own default is gzip: CPU in the worker, the API and the server for bytes
    # that cost nothing on one host or one cluster's network.
    if asked is None:
        monkeypatch.delenv("LOOPS_TEMPORAL_COMPRESSION", raising=False)
    else:
        monkeypatch.setenv("LOOPS_TEMPORAL_COMPRESSION", asked)
    client = await connect(Settings(TEMPORAL_ADDRESS=dev_server.address), interceptors=[])
    assert client.service_client.config.grpc_compression == expected
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    assert info.server_version


@pytest.mark.parametrize(
    ("asked", "tls", "expected"),
    [
        ("auto", True, GrpcCompression.GZIP),
        ("auto", False, GrpcCompression.NONE),
        ("none", True, GrpcCompression.NONE),
        ("gzip", False, GrpcCompression.GZIP),
    ],
)
def test_auto_gzips_only_over_tls(asked: str, tls: bool, expected: GrpcCompression) -> None:
    # Over TLS (Temporal Cloud, TEMPORAL_TLS or an API key) the server is usually far.
    assert compression(Settings(LOOPS_TEMPORAL_COMPRESSION=asked), tls=tls) == expected


@pytest.mark.parametrize(
    ("variable", "value"), [("TEMPORAL_API_KEY", "a-key"), ("TEMPORAL_TLS", "true")]
)
def test_the_sdks_tls_settings_turn_gzip_on(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    for unset in ("LOOPS_TEMPORAL_COMPRESSION", "TEMPORAL_API_KEY", "TEMPORAL_TLS"):
        monkeypatch.delenv(unset, raising=False)
    assert connect_options(Settings())["grpc_compression"] == GrpcCompression.NONE
    monkeypatch.setenv(variable, value)
    options = connect_options(Settings())
    assert options["tls"] and options["grpc_compression"] == GrpcCompression.GZIP


def test_an_unknown_compression_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPS_TEMPORAL_COMPRESSION", "zstd")
    with pytest.raises(ValidationError, match="LOOPS_TEMPORAL_COMPRESSION"):
        Settings()
