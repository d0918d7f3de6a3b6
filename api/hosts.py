"""Trusted hosts: the API answers only requests addressed to a name it is known by.

A web page can point a name it controls at 127.0.0.1 (DNS rebinding) and then talk to a
`loops up` API from the developer's own browser, as same-origin: the browser sends the
page's name as the Host header. Answering only loopback names, the address the API
binds and the names in LOOPS_API_ALLOWED_HOSTS closes that. Starlette's
TrustedHostMiddleware does the same check; this one says which setting admits a host,
treats any loopback address as loopback, and is a plain function underneath.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from loopworks.api.security import is_loopback
from loopworks.schemas.settings import ANY_ADDRESS, Settings

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ECHO_CHARS = 100


def hostname(header: str) -> str:
    """The name in a Host header: no port, no brackets, lower case, no trailing dot."""
    value = header.strip().lower()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def allowed_hosts(settings: Settings) -> tuple[str, ...]:
    """Loopback names, the bind address, and LOOPS_API_ALLOWED_HOSTS."""
    hosts = list(LOOPBACK_NAMES)
    bind = hostname(settings.api_host)
    if bind not in ANY_ADDRESS:
        hosts.append(bind)
    for entry in (settings.api_allowed_hosts or "").split(","):
        if entry.strip():
            hosts.append(entry.strip().lower().rstrip("."))
    return tuple(dict.fromkeys(hosts))


def host_allowed(header: str, allowed: tuple[str, ...]) -> bool:
    name = hostname(header)
    if not name:
        return False
    if is_loopback(name):
        return True
    for pattern in allowed:
        if pattern == "*" or name == pattern:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


class TrustedHosts:
    """ASGI middleware: a 400 naming LOOPS_API_ALLOWED_HOSTS for any other Host."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan; the API has no websockets
            await self.app(scope, receive, send)
            return
        header = next(
            (value.decode("latin-1") for key, value in scope["headers"] if key == b"host"), ""
        )
        if host_allowed(header, self.allowed):
            await self.app(scope, receive, send)
            return
        shown = hostname(header)[:ECHO_CHARS] or "(none)"
        detail = (
            f"this API does not answer to the host {shown!r}: add it to"
            " LOOPS_API_ALLOWED_HOSTS if clients reach the API by that name"
        )
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
