"""The API as a remote codec server: Temporal's documented protocol, so that the Temporal
UI and `temporal workflow show --codec-endpoint` read encrypted histories.

The protocol: `POST <endpoint>/decode` (and `/encode`) with a JSON body
`{"payloads": [...]}`, the payloads as protobuf JSON (metadata values and data in
base64), answered in the same shape; only the last part of the path names the operation,
so the endpoint may sit under any prefix (here `/codec`). Decoding needs a token (any,
read-only included); encoding, which the UI uses to send a signal with input, a token
that may change things. Browsers reach it from the Temporal UI's origin only
(LOOPS_TEMPORAL_UI_URL; `CodecCors`). What is decoded is served redacted of the API's
secrets, as every answer of the API is (`api.redaction`). docs/operations.md says how to
point the UI and the CLI at it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payload, Payloads

from loopworks.api import redaction
from loopworks.api.errors import ApiError
from loopworks.api.security import is_loopback
from loopworks.schemas.payload_keys import ENV_VAR
from loopworks.schemas.settings import Settings
from loopworks.service.codec import EncryptionCodec, PayloadKeyError

PREFIX = "/codec"
JSON_ENCODING = b"json/plain"


class CodecPayload(BaseModel):
    """One `temporal.api.common.v1.Payload` as protobuf JSON; its other fields (a newer
    server's) pass to protobuf's parser, which checks them."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, str] = Field(
        default_factory=dict, description="each value base64, as protobuf JSON writes bytes"
    )
    data: str = Field(default="", description="base64")


class CodecPayloads(BaseModel):
    """The codec protocol's body, both ways: `temporal.api.common.v1.Payloads` as JSON."""

    payloads: list[CodecPayload] = Field(default_factory=list)


class CodecNotConfigured(ApiError):
    status_code = 404

    def __init__(self) -> None:
        super().__init__(
            f"this deployment does not encrypt Temporal payloads ({ENV_VAR} is unset):"
            " there is nothing to decode"
        )


class CodecRefused(ApiError):
    """A payload the codec cannot take: malformed, or sealed with a key not held."""


def parsed(body: CodecPayloads) -> list[Payload]:
    try:
        message = json_format.ParseDict(body.model_dump(), Payloads())
    except json_format.ParseError as err:
        raise CodecRefused(f"not Temporal payloads as protobuf JSON: {err}") from err
    return list(message.payloads)


def answer(payloads: Sequence[Payload]) -> CodecPayloads:
    as_json: dict[str, Any] = json_format.MessageToDict(Payloads(payloads=payloads))
    return CodecPayloads.model_validate(as_json or {"payloads": []})


async def decode(codec: EncryptionCodec, body: CodecPayloads) -> CodecPayloads:
    try:
        opened = await codec.decode(parsed(body))
    except PayloadKeyError as err:
        raise CodecRefused(str(err)) from err
    return answer([_served(payload) for payload in opened])


async def encode(codec: EncryptionCodec, body: CodecPayloads) -> CodecPayloads:
    return answer(await codec.encode(parsed(body)))


def _served(payload: Payload) -> Payload:
    """A decoded JSON payload redacted as the API serves any state (`api.redaction`);
    the same payload when nothing in it is to be redacted."""
    if payload.metadata.get("encoding") != JSON_ENCODING:
        return payload
    try:
        value = json.loads(payload.data)
    except ValueError:
        return payload
    clean = redaction.served(value)
    if clean is value:
        return payload
    data = json.dumps(clean, ensure_ascii=False, separators=(",", ":")).encode()
    return Payload(metadata=dict(payload.metadata), data=data)


def ui_origins(settings: Settings) -> list[str]:
    """The origins browsers may call the codec endpoint from: the Temporal UI's, from
    LOOPS_TEMPORAL_UI_URL. A UI on a loopback name is reached under either spelling
    (`localhost` or `127.0.0.1`), as `loops up` prints one and people type the other."""
    if not settings.temporal_ui_url:
        return []
    url = urlsplit(settings.temporal_ui_url.strip())
    if not url.scheme or not url.hostname:
        return []
    port = f":{url.port}" if url.port else ""
    hosts = [url.hostname]
    if is_loopback(url.hostname):
        hosts = ["localhost", "127.0.0.1", "[::1]"]
    return [f"{url.scheme}://{host}{port}" for host in hosts]


class CodecCors:
    """CORS on the codec routes only, for the Temporal UI's origin: the UI calls them from
    its own page, and nothing else of the API is opened to another origin."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.origins = frozenset(origin.lower() for origin in origins)
        self.cors = CORSMiddleware(
            app,
            allow_origins=list(origins),
            allow_methods=["POST"],
            # What the UI and the CLI send: the token, the JSON body, the namespace.
            allow_headers=["authorization", "content-type", "x-namespace"],
            # The UI's "include cross-origin credentials" option needs it. The one cookie
            # the API sets, the dashboard's session, is SameSite=Strict, and a change sent
            # with it must carry the session's CSRF value, which the UI does not hold.
            allow_credentials=True,
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith(f"{PREFIX}/")
            and self._from_the_ui(scope)
        ):
            await self.cors(scope, receive, send)
        else:
            # Any other page is answered as if there were no CORS at all: not even a
            # refused preflight's Access-Control-* headers.
            await self.app(scope, receive, send)

    def _from_the_ui(self, scope: Scope) -> bool:
        origin = next((v for k, v in scope["headers"] if k.lower() == b"origin"), b"")
        return origin.decode("latin-1").strip().rstrip("/").lower() in self.origins
