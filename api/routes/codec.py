"""`/codec`: the remote codec server the Temporal UI and CLI decode histories with
(`api.codec`, docs/operations.md#reading-encrypted-histories)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from loopworks.api import codec_server
from loopworks.api.models import ErrorBody
from loopworks.api.security import authenticated, require_token
from loopworks.service.codec import EncryptionCodec

Responses = dict[int | str, dict[str, Any]]
RESPONSES: Responses = {
    400: {"model": ErrorBody, "description": "Not payloads, or sealed with a key not held"},
    401: {"model": ErrorBody, "description": "LOOPS_API_TOKENS is set and no valid token was sent"},
    404: {"model": ErrorBody, "description": "LOOPS_PAYLOAD_KEYS is unset: nothing is encrypted"},
}

router = APIRouter(prefix=codec_server.PREFIX, tags=["codec"], responses=RESPONSES)


def payload_codec(request: Request) -> EncryptionCodec:
    found: EncryptionCodec | None = request.app.state.codec
    if found is None:
        raise codec_server.CodecNotConfigured()
    return found


CodecDep = Annotated[EncryptionCodec, Depends(payload_codec)]


@router.post("/decode", dependencies=[Depends(authenticated)])
async def decode(
    body: codec_server.CodecPayloads, payload_codec: CodecDep
) -> codec_server.CodecPayloads:
    """Open encrypted payloads (any token, read-only ones too); what they hold comes back
    redacted of the API's secrets. Payloads never encrypted come back as they are."""
    return await codec_server.decode(payload_codec, body)


@router.post(
    "/encode",
    dependencies=[Depends(require_token)],
    responses={403: {"model": ErrorBody, "description": "A read-only token"}},
)
async def encode(
    body: codec_server.CodecPayloads, payload_codec: CodecDep
) -> codec_server.CodecPayloads:
    """Encrypt payloads with the current key, as a worker would (a token that may change
    things: the UI encodes what it sends a workflow)."""
    return await codec_server.encode(payload_codec, body)
