"""Rendering a page: the templates' environment, and the headers every page carries.

Autoescaping is on for every template, whatever its name: a task, a model's verdict, a
file's diff are text. The one way to put markup into a page is `Markup`, which only
`markdown.rendered` and the SVG builders here return, from text they escaped themselves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from loopworks.api.security import Caller

HERE = Path(__file__).parent
TEMPLATES_DIR = HERE / "templates"
STATIC_DIR = HERE / "static"
STATIC_PATH = "/ui/static"

# The pages run one script, ours, from this origin; no inline script, style or handler,
# no plugin, no frame around them, no form sent elsewhere. The SVG is markup in the page,
# styled by the stylesheet: it needs nothing more.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    # A page holds its session's CSRF value: never kept by a cache.
    "Cache-Control": "no-store",
}


# The script and the stylesheet: two files, served from memory by name (no path from a
# request ever reaches the file system), each URL carrying its content's hash so that a
# browser may keep it for good and never runs an old script with a new page.
STATIC_FILES = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
_STATIC = {name: (STATIC_DIR / name).read_bytes() for name in STATIC_FILES}

static = APIRouter(prefix=STATIC_PATH, tags=["dashboard"], include_in_schema=False)


@static.get("/{name}")
async def static_file(name: str) -> Response:
    if name not in _STATIC:
        return Response(status_code=404)
    headers = {
        "Cache-Control": "public, max-age=31536000, immutable",
        "X-Content-Type-Options": "nosniff",
    }
    return Response(_STATIC[name], media_type=STATIC_FILES[name], headers=headers)


def _fingerprint(name: str) -> str:
    digest = hashlib.sha256(_STATIC[name]).hexdigest()[:12]
    return f"{STATIC_PATH}/{name}?v={digest}"


def _when(value: str | datetime | None) -> str:
    """A time as the pages show it: UTC, to the second."""
    if not value:
        return ""
    if isinstance(value, datetime):
        when = value
    else:
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return value
    if when.tzinfo is not None:
        try:
            when = when.astimezone(UTC)
        except OverflowError:  # the calendar's first or last day, a zone away from UTC
            return value if isinstance(value, str) else when.isoformat()
    return when.strftime("%Y-%m-%d %H:%M:%S")


def _money(value: float | None) -> str:
    return "" if value is None else f"${value:.4f}"


ENVIRONMENT = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENVIRONMENT.filters["when"] = _when
ENVIRONMENT.filters["money"] = _money
ENVIRONMENT.globals["static"] = {
    "script": _fingerprint("dashboard.js"),
    "style": _fingerprint("dashboard.css"),
}


def render(template: str, context: Mapping[str, Any]) -> str:
    return ENVIRONMENT.get_template(template).render(context)


def page(
    request: Request,
    template: str,
    caller: Caller,
    context: Mapping[str, Any],
    status_code: int = 200,
) -> HTMLResponse:
    """A page for `caller`: who is signed in, whether they may act, and the session's CSRF
    value for the script to send with what it changes."""
    tokens_on = bool(request.app.state.tokens)
    full = {
        "caller": caller,
        "can_act": not caller.read_only,
        "signed_in": tokens_on,
        "csrf": caller.session.csrf if caller.session else "",
        "path": request.url.path,
        **context,
    }
    return HTMLResponse(render(template, full), status_code, headers=SECURITY_HEADERS)


def fragment(template: str, context: Mapping[str, Any]) -> HTMLResponse:
    """A part of a page the script swaps in for the one it has (live updates)."""
    return HTMLResponse(render(template, context), headers=SECURITY_HEADERS)
