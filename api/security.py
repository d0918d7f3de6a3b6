"""Access: who a request comes from (a named token, or `local` when access is open), what
it may do, and whether the API may start at all where it would listen.

Closed unless opened: without tokens the API serves loopback only, and refuses to start on
any other address. A read-only token may GET and follow streams, never change anything.
Health and the OpenAPI docs stay open so probes and people can find out how to
authenticate. A browser signed in to the dashboard sends a session cookie instead of the
header (`api.sessions`); what it changes must carry the session's CSRF header too.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from loopworks.api import sessions, tokens
from loopworks.api.errors import Forbidden, Unauthorized
from loopworks.schemas.git_credentials import parse_credentials
from loopworks.schemas.settings import Settings

# auto_error=False: we answer 401 ourselves (FastAPI's own error omits the RFC 6750
# detail), and when no tokens are configured a missing header is fine.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="LoopsApiToken",
    description="A token of LOOPS_API_TOKENS, LOOPS_API_READ_TOKENS, LOOPS_API_ADMIN_TOKENS or "
    "LOOPS_API_TOKENS_FILE (only when one is set); a read-only token may only GET, and only "
    "an admin token may run the gc.",
)

# What a read-only token may send: reading and following, nothing that changes a run.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the token's name (what `started_by` records), or
    `tokens.OPEN_ACCESS_NAME` when access is open."""

    name: str
    read_only: bool = False
    # Set when the request came with the dashboard's session cookie, not a token.
    session: sessions.Session | None = None
    # Open access (loopback, no tokens) is the operator's own: it may administer too.
    admin: bool = False


def session_of(request: Request, table: tuple[tokens.ApiToken, ...]) -> sessions.Session | None:
    """The dashboard session the request's cookie carries, if it is a valid one."""
    cookie = request.cookies.get(sessions.COOKIE)
    return None if cookie is None else sessions.verify(cookie, table, time.time())


async def authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """Who sent the request, whatever it may do: a 401 without a valid token (when any is
    set). A route that only reads but is a POST (the codec's /decode) needs no more."""
    table: tuple[tokens.ApiToken, ...] = request.app.state.tokens
    if not table:
        return Caller(tokens.OPEN_ACCESS_NAME, admin=True)
    session = None
    if credentials is not None:
        token = tokens.match(credentials.credentials, table)
        if token is None:
            raise Unauthorized("invalid bearer token", challenge='Bearer error="invalid_token"')
    elif (session := session_of(request, table)) is not None:
        token = session.token
        # The browser sends the cookie on its own; a change must also show it comes from
        # one of the session's own pages (api/sessions.py).
        if request.method not in READ_METHODS and not session.csrf_matches(
            request.headers.get(sessions.CSRF_HEADER)
        ):
            raise Forbidden(
                f"a change sent with the dashboard's session must carry {sessions.CSRF_HEADER},"
                " as the dashboard's own pages send it"
            )
    else:
        raise Unauthorized("authentication required: send Authorization: Bearer <token>")
    return Caller(token.name, token.read_only, session, token.admin)


async def require_token(
    request: Request, caller: Annotated[Caller, Depends(authenticated)]
) -> Caller:
    if caller.read_only and request.method not in READ_METHODS:
        raise Forbidden(
            f"the token {caller.name!r} is read-only: it may read runs, graphs and playbooks"
            f" and follow their streams, not {request.method} {request.url.path}"
        )
    return caller


# Routers list `require_token` as a dependency; a route that needs to know who is asking
# declares this too, and FastAPI answers both from one call.
CallerDep = Annotated[Caller, Depends(require_token)]


async def require_admin(caller: CallerDep) -> Caller:
    """The routes that administer the service (the gc): an admin token's only."""
    if not caller.admin:
        raise Forbidden(
            f"the token {caller.name!r} may not administer the service: the gc needs a token"
            " of LOOPS_API_ADMIN_TOKENS (or a `name:token:admin` line of LOOPS_API_TOKENS_FILE)"
        )
    return caller


AdminDep = Annotated[Caller, Depends(require_admin)]


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the API on this machine (a name other than
    localhost might resolve anywhere, so it counts as exposed)."""
    name = host.strip().strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposed_without_tokens(settings: Settings) -> bool:
    return not tokens.load(settings) and not is_loopback(settings.api_host)


def refusal_to_start(settings: Settings) -> str | None:
    """Why the API must not start as configured, or None. Raises ValueError for a token
    setting it cannot use."""
    if exposed_without_tokens(settings):
        return (
            f"the API would listen on {settings.api_host} with no tokens, so anyone who can"
            f" reach port {settings.api_port} could start, stop and steer runs: set"
            " LOOPS_API_TOKENS to name:token pairs (e.g. LOOPS_API_TOKENS=alice:$(openssl rand"
            " -hex 32)), or LOOPS_API_TOKENS_FILE to a file of them, or bind to 127.0.0.1"
            " (LOOPS_API_HOST)"
        )
    return credentials_unbounded(settings) or day_limit_unheld(settings)


def day_limit_unheld(settings: Settings) -> str | None:
    """A client's day limit holds under concurrent starts only through the client's slots
    (api/spend.py): without per-client caps it would not. Why that is refused, or None."""
    limited = settings.client_day_tokens or settings.client_day_usd
    if not limited or (settings.max_runs_per_client and settings.max_graphs_per_client):
        return None
    return (
        "LOOPS_CLIENT_DAY_TOKENS and LOOPS_CLIENT_DAY_USD hold only with per-client caps, which"
        " let racing starts of one client see each other: set LOOPS_MAX_RUNS_PER_CLIENT and"
        " LOOPS_MAX_GRAPHS_PER_CLIENT above 0"
    )


def credentials_unbounded(settings: Settings) -> str | None:
    """A shared deployment (tokens) holding git credentials with no origin allow-list: any
    token holder could name any repository the credentials' hosts serve, and have runs
    clone, read and push it with the operator's credential. Why that is refused, or None."""
    hosts = sorted(parse_credentials(settings.git_credentials))
    if not hosts or settings.allowed_origins or not tokens.load(settings):
        return None
    return (
        f"LOOPS_GIT_CREDENTIALS holds credentials for {', '.join(hosts)} and LOOPS_API_TOKENS"
        " makes this API shared, but LOOPS_ALLOWED_ORIGINS is unset: any token holder could"
        " have runs use those credentials on any repository of those hosts. Set"
        " LOOPS_ALLOWED_ORIGINS to the repositories runs may name (e.g."
        " LOOPS_ALLOWED_ORIGINS=https://github.com/your-org/), and scope each credential"
        ' with "origins" where it serves fewer'
    )
