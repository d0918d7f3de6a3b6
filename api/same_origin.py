"""No cross-site writes: a web page the user visits cannot change anything through the API.

A `loops up` API on loopback without tokens trusts whoever reaches it, and a browser
reaches it for any page: a form or `fetch(..., {mode: "no-cors"})` sends a *simple*
request (POST with no body, or with `text/plain`, form or multipart content) cross-site
without asking first. So every request that changes something (any method but GET, HEAD
and OPTIONS) must

- not come from another site: `Sec-Fetch-Site: cross-site` is refused (403);
- when it carries an `Origin`, carry the API's own (the scheme-less host and port of its
  `Host` header, the name TrustedHosts already admitted) or one LOOPS_API_TRUSTED_ORIGINS
  names (403 otherwise; `Origin: null`, a sandboxed or file page's, is no origin of ours);
- when it can carry a body (POST, PUT, PATCH), say `Content-Type: application/json` (415
  otherwise): the one content type a browser never sends cross-site without a CORS
  preflight, and the API grants no preflight (it has no CORS handling, so `OPTIONS`
  answers 405 without any `Access-Control-Allow-*`). The action routes (pause, resume,
  stop, approve, clear-block) take an empty object, `{}`.

DELETE needs no body rule: a browser always preflights it. Clients that are not browsers
(the CLI, curl, the MCP server) send no `Origin` and no `Sec-Fetch-Site`, and JSON. The
checks are plain functions; the middleware only reads the headers and answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from loopworks.api.codec_server import PREFIX as CODEC_PREFIX
from loopworks.schemas.settings import TRUSTED_ORIGINS, web_origins

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON = "application/json"
DEFAULT_PORTS = {"http": 80, "https": 443}
ECHO_CHARS = 100


@dataclass(frozen=True)
class Refusal:
    status: int
    detail: str


def own_origin(origin: str, host_header: str) -> bool:
    """Whether `origin` (`scheme://host[:port]`) is the one the request was sent to, by
    its Host header: the same name, on the same port (a missing port is the origin's
    scheme's default, as the browser connected there)."""
    try:
        sent = urlsplit(origin)
        sent_port = sent.port or DEFAULT_PORTS.get(sent.scheme)
        addressed = urlsplit(f"//{host_header.strip()}")
        addressed_port = addressed.port or DEFAULT_PORTS.get(sent.scheme)
    except ValueError:
        return False
    if sent.scheme not in DEFAULT_PORTS or not sent.hostname or sent.path not in ("", "/"):
        return False
    same_name = sent.hostname.rstrip(".") == (addressed.hostname or "").rstrip(".")
    return same_name and sent_port == addressed_port


def origin_admitted(origin: str, host_header: str, trusted: Iterable[str]) -> bool:
    """Whether a page of `origin` (an `Origin` header) may change things here: the API's
    own, by the Host it addressed, or one of the `trusted` origins (a proxy that ends TLS
    or rewrites Host: LOOPS_API_TRUSTED_ORIGINS)."""
    normal = origin.strip().lower().rstrip("/")
    return normal in trusted or own_origin(normal, host_header)


def media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def refusal(method: str, headers: dict[str, str], trusted: Iterable[str] = ()) -> Refusal | None:
    """Why a request with these (lower-cased) headers may not change anything, or None."""
    if method.upper() in SAFE_METHODS:
        return None
    if headers.get("sec-fetch-site", "").strip().lower() == "cross-site":
        return Refusal(
            403, "a page of another site may not change anything here (Sec-Fetch-Site: cross-site)"
        )
    origin = headers.get("origin")
    if origin is not None and not origin_admitted(origin, headers.get("host", ""), trusted):
        shown = origin[:ECHO_CHARS]
        return Refusal(
            403,
            f"a page of {shown!r} may not change anything here: only the API's own pages,"
            f" and those of the origins {TRUSTED_ORIGINS} names, may",
        )
    if method.upper() in BODY_METHODS:
        given = headers.get("content-type", "")
        if media_type(given) != JSON:
            said = f"not {given[:ECHO_CHARS]!r}" if given else "none was sent"
            return Refusal(
                415,
                f"send the body as JSON with Content-Type: {JSON} ({said}); routes that take"
                " nothing else take an empty object, {}",
            )
    return None


class NoCrossSiteWrites:
    """ASGI middleware: `refusal`'s 403 or 415 before any route runs. The Temporal UI's
    page (`codec_origins`) calls the codec routes from another origin, perhaps another
    site, to read histories (api/codec_server.py, which answers its preflight): there, and only
    there, its origin passes; the body must still be JSON."""

    def __init__(
        self, app: ASGIApp, trusted: str | None, codec_origins: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.trusted = frozenset(web_origins(trusted))
        self.codec_origins = frozenset(origin.lower().rstrip("/") for origin in codec_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            key.decode("latin-1").lower(): value.decode("latin-1")
            for key, value in scope["headers"]
        }
        origin = headers.get("origin", "").strip().lower().rstrip("/")
        if scope["path"].startswith(f"{CODEC_PREFIX}/") and origin in self.codec_origins:
            headers.pop("origin")
            headers.pop("sec-fetch-site", None)
        refused = refusal(scope["method"], headers, self.trusted)
        if refused is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": refused.detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": refused.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
