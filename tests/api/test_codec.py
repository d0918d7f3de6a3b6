"""The codec endpoint (`/codec/decode`, `/codec/encode`): Temporal's remote codec protocol
behind the API's tokens, open to the Temporal UI's origin only, its answers redacted. The
CLI reading a real history through it: tests/integration/test_encrypted_history.py."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload

from loopworks.api.main import create_app
from loopworks.checks.redaction import REDACTED
from loopworks.schemas.settings import Settings
from loopworks.service.codec import EncryptionCodec

pytestmark = pytest.mark.unit

KEY = bytes(range(32))
KEYS = f"k1:{base64.b64encode(KEY).decode()}"
WRITER, READER = "writer-token-0123456789", "reader-token-0123456789"
UI = "http://127.0.0.1:8233"
TASK = "Write the guide; deploy with writer-token-0123456789 as before"


def _json_payload(value: Any) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


def _wire(payload: Payload) -> dict[str, Any]:
    """A payload as the protocol carries it: protobuf JSON, bytes in base64."""
    return {
        "metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
        "data": base64.b64encode(payload.data).decode(),
    }


def _unwire(item: dict[str, Any]) -> Payload:
    metadata = {k: base64.b64decode(v) for k, v in item.get("metadata", {}).items()}
    return Payload(metadata=metadata, data=base64.b64decode(item.get("data", "")))


async def _client(**env: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(**env))  # no Temporal: the codec needs only its keys
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        yield http


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    async for http in _client(
        LOOPS_PAYLOAD_KEYS=KEYS,
        LOOPS_API_TOKENS=f"alice:{WRITER}",
        LOOPS_API_READ_TOKENS=f"board:{READER}",
        LOOPS_TEMPORAL_UI_URL=UI,
    ):
        yield http


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _sealed(value: Any) -> Payload:
    [sealed] = await EncryptionCodec({"k1": KEY}).encode([_json_payload(value)])
    return sealed


async def test_a_reader_decodes_what_a_worker_sealed_redacted(api: httpx.AsyncClient) -> None:
    sealed = await _sealed({"task": TASK, "iteration": 2})
    plain = _json_payload("written before encryption")
    body = {"payloads": [_wire(sealed), _wire(plain)]}
    answer = await api.post("/codec/decode", json=body, headers=_auth(READER))
    assert answer.status_code == 200, answer.text
    opened, passed = (_unwire(item) for item in answer.json()["payloads"])
    assert json.loads(opened.data) == {
        "task": f"Write the guide; deploy with {REDACTED} as before",
        "iteration": 2,
    }
    assert opened.metadata["encoding"] == b"json/plain"
    assert passed == plain


async def test_decoding_needs_a_token_and_encoding_one_that_may_change(
    api: httpx.AsyncClient,
) -> None:
    body = {"payloads": [_wire(await _sealed("x"))]}
    assert (await api.post("/codec/decode", json=body)).status_code == 401
    wrong = await api.post("/codec/decode", json=body, headers=_auth("not-a-token-at-all"))
    assert wrong.status_code == 401
    plain = {"payloads": [_wire(_json_payload("sent from the UI"))]}
    assert (await api.post("/codec/encode", json=plain, headers=_auth(READER))).status_code == 403
    encoded = await api.post("/codec/encode", json=plain, headers=_auth(WRITER))
    assert encoded.status_code == 200, encoded.text
    [sealed] = [_unwire(item) for item in encoded.json()["payloads"]]
    assert sealed.metadata["encryption-key-id"] == b"k1" and b"sent from" not in sealed.data
    again = await api.post(
        "/codec/decode", json={"payloads": [_wire(sealed)]}, headers=_auth(READER)
    )
    assert json.loads(_unwire(again.json()["payloads"][0]).data) == "sent from the UI"


async def test_what_it_cannot_open_is_a_400_that_says_why(api: httpx.AsyncClient) -> None:
    [other] = await EncryptionCodec({"k9": bytes(32)}).encode([_json_payload("x")])
    unknown = await api.post(
        "/codec/decode", json={"payloads": [_wire(other)]}, headers=_auth(READER)
    )
    assert unknown.status_code == 400 and "'k9'" in unknown.json()["detail"]
    broken = {"payloads": [{"metadata": {}, "data": "%%% not base64"}]}
    refused = await api.post("/codec/decode", json=broken, headers=_auth(READER))
    assert refused.status_code == 400, refused.text
    assert (await api.post("/codec/decode", json=[1], headers=_auth(READER))).status_code == 422


async def test_only_the_temporal_uis_origin_may_call_it_from_a_browser(
    api: httpx.AsyncClient,
) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
    }
    for origin in (UI, "http://localhost:8233"):
        allowed = await api.options("/codec/decode", headers={"Origin": origin, **preflight})
        assert allowed.status_code == 200, origin
        assert allowed.headers["access-control-allow-origin"] == origin
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = await api.options(
        "/codec/decode", headers={"Origin": "https://evil.example", **preflight}
    )
    assert "access-control-allow-origin" not in other.headers
    # A refusal reaches the UI readable (its CORS headers on the 401), not as a CORS error.
    refused = await api.post("/codec/decode", json={"payloads": []}, headers={"Origin": UI})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == UI
    # Nothing else of the API is opened to the UI's origin.
    runs = await api.options("/runs", headers={"Origin": UI, **preflight})
    assert "access-control-allow-origin" not in runs.headers


async def test_without_keys_there_is_nothing_to_decode() -> None:
    async for http in _client():
        answer = await http.post("/codec/decode", json={"payloads": []})
        assert answer.status_code == 404
        assert "LOOPS_PAYLOAD_KEYS is unset" in answer.json()["detail"]
