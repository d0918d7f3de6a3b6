"""Who is looking at a page, and signing in and out (docs/dashboard.md#access).

With no tokens configured (local `loops up`, loopback only) every page is open, as the
JSON routes are. With tokens, a page takes the request's bearer token if it has one,
else the session cookie `api.sessions` checks; without either it sends the browser to
the sign-in page, which exchanges a token for that cookie.
"""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, FastAPI, Request, Response, status
from fastapi.responses import RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from loopworks.api import sessions, tokens
from loopworks.api.dashboard import render
from loopworks.api.errors import Forbidden, Unauthorized
from loopworks.api.same_origin import origin_admitted
from loopworks.api.security import Caller, authenticated, bearer, require_token, session_of
from loopworks.schemas.settings import Settings, web_origins

HOME = "/ui/runs"
SIGN_IN = "/ui/sign-in"


class SignInRequired(Exception):
    """A page asked for without a token or a valid session: off to sign in."""

    def __init__(self, after: str) -> None:
        super().__init__(after)
        self.after = after


def install(app: FastAPI) -> None:
    async def to_sign_in(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        return RedirectResponse(
            f"{SIGN_IN}?next={quote(exc.after, safe='/')}", status.HTTP_303_SEE_OTHER
        )

    app.add_exception_handler(SignInRequired, to_sign_in)


async def ui_caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """The caller of a page: as the JSON routes see it, but without a token or a session
    the answer is the sign-in page, not a 401."""
    table: tuple[tokens.ApiToken, ...] = request.app.state.tokens
    if table and credentials is None and session_of(request, table) is None:
        raise SignInRequired(local_path(request.url.path, request.url.query))
    return await require_token(request, await authenticated(request, credentials))


UiCaller = Annotated[Caller, Depends(ui_caller)]


def local_path(path: str, query: str = "") -> str:
    """`path?query` when it is a dashboard page, else the dashboard's home: where sign-in
    may send a browser on (never to another site)."""
    if not path.startswith("/ui/") or path.startswith("//") or "\\" in path:
        return HOME
    return f"{path}?{query}" if query else path


router = APIRouter(tags=["dashboard"], include_in_schema=False)


@router.get("/ui")
async def home() -> RedirectResponse:
    return RedirectResponse(HOME, status.HTTP_303_SEE_OTHER)


@router.get("/ui/sign-in")
async def sign_in_page(request: Request, next: str = HOME) -> Response:
    if not request.app.state.tokens:
        return RedirectResponse(HOME, status.HTTP_303_SEE_OTHER)
    after = local_path(urlsplit(next).path, urlsplit(next).query)
    return render.page(
        request, "sign_in.html", Caller(tokens.OPEN_ACCESS_NAME, read_only=True), {"next": after}
    )


class SignIn(BaseModel):
    token: str = Field(min_length=1, max_length=4096)


def same_site(request: Request) -> None:
    """Refuse a sign-in another site's page sent (login CSRF: being signed in, unawares,
    as someone else). Browsers say where a request comes from in these headers."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise Forbidden("sign in from the dashboard's own page")
    origin = request.headers.get("origin")
    # Judged as every change is (api/same_origin.py).
    settings: Settings = request.app.state.settings
    trusted = web_origins(settings.api_trusted_origins)
    host = request.headers.get("host", "")
    if origin is not None and not origin_admitted(origin, host, trusted):
        raise Forbidden("sign in from the dashboard's own page")


@router.post("/ui/session", status_code=status.HTTP_204_NO_CONTENT)
async def sign_in(request: Request, body: SignIn, response: Response) -> None:
    """Exchange a token for the session cookie (sent by the sign-in page's script)."""
    same_site(request)
    table: tuple[tokens.ApiToken, ...] = request.app.state.tokens
    token = tokens.match(body.token, table) if table else None
    if token is None:
        raise Unauthorized("that is not a token of this API", challenge="Bearer")
    response.set_cookie(
        sessions.COOKIE,
        sessions.issue(token, time.time()),
        max_age=sessions.LIFETIME_SECONDS,
        path="/",
        httponly=True,
        samesite="strict",
        # Behind a proxy that ends TLS the API sees http; the browser's page was https.
        secure=request.url.scheme == "https"
        or request.headers.get("origin", "").lower().startswith("https://"),
    )


@router.delete("/ui/session", status_code=status.HTTP_204_NO_CONTENT)
async def sign_out(response: Response) -> None:
    response.delete_cookie(sessions.COOKIE, path="/", httponly=True, samesite="strict")
