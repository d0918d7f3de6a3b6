"""Access: bearer tokens from LOOPS_API_TOKENS, and the warning when the API is exposed without.

Tokens are shared secrets, not identities: any listed token may do anything. Health and
the OpenAPI docs stay open so probes and people can find out how to authenticate.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from loopworks.api.errors import Unauthorized
from loopworks.schemas.settings import Settings

# auto_error=False: we answer 401 ourselves (FastAPI's own error omits the RFC 6750
# detail), and when no tokens are configured a missing header is fine.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="LoopsApiToken",
    description="One of the tokens in LOOPS_API_TOKENS (only when that variable is set).",
)


def token_matches(presented: str, tokens: Sequence[str]) -> bool:
    """Constant-time against every token: the answer's timing says nothing about which
    token (or how much of one) matched."""
    given = presented.encode()
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(given, token.encode())
    return matched


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    settings: Settings = request.app.state.settings
    tokens = settings.api_token_list
    if not tokens:
        return
    if credentials is None:
        raise Unauthorized("authentication required: send Authorization: Bearer <token>")
    if not token_matches(credentials.credentials, tokens):
        raise Unauthorized("invalid bearer token", challenge='Bearer error="invalid_token"')


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the API on this machine (a name other than
    localhost might resolve anywhere, so it counts as exposed)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposed_without_tokens(settings: Settings) -> bool:
    return not settings.api_token_list and not is_loopback(settings.api_host)
