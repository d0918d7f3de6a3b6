"""How every entry point connects to Temporal (`worker/connect.py`): plain gRPC by default,
gzip when asked, against a real dev server."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import GrpcCompression

from loopworks.schemas.settings import Settings
from loopworks.worker.connect import connect
from tests.integration.stack import DevServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("asked", "expected"),
    [(None, GrpcCompression.NONE), ("gzip", GrpcCompression.GZIP), ("none", GrpcCompression.NONE)],
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


def test_an_unknown_compression_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPS_TEMPORAL_COMPRESSION", "zstd")
    with pytest.raises(ValidationError, match="LOOPS_TEMPORAL_COMPRESSION"):
        Settings()
