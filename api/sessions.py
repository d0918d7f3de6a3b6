"""The dashboard's sign-in: a browser cannot add `Authorization: Bearer` to a page it
navigates to, so a person signs in once with their token and the API sets a session
cookie (docs/dashboard.md#access).

The cookie never holds the token. It holds the token's name, when the session ends, and
an HMAC of both keyed with the token itself: any API process that knows the token can
check it (no session store, no key shared between processes), and removing a token from
the API's table ends every session signed with it. A read-only token's session may only
read, as the token may.

A session is sent by the browser on its own, so a request that changes something must
also prove it comes from a dashboard page: the `X-Loops-CSRF` header, whose value only a
page served to that session holds (an HMAC of the cookie, keyed with the token). A page
from another site can neither read it nor, without CORS, send a custom header; the cookie
is `SameSite=Strict` and `HttpOnly` besides.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import sha256

from loopworks.api.tokens import ApiToken

COOKIE = "loops_session"
CSRF_HEADER = "X-Loops-CSRF"
# A session lasts a working day; signing in again makes a new one.
LIFETIME_SECONDS = 12 * 60 * 60

_SESSION = b"loopworks dashboard session\0"
_CSRF = b"loopworks dashboard csrf\0"


def _mac(token: ApiToken, purpose: bytes, message: str) -> str:
    return hmac.new(token.secret.encode(), purpose + message.encode(), sha256).hexdigest()


def issue(token: ApiToken, now: float) -> str:
    """A new session's cookie value: `<name>.<expires>.<mac>`."""
    expires = int(now) + LIFETIME_SECONDS
    signed = f"{token.name}.{expires}"
    return f"{signed}.{_mac(token, _SESSION, signed)}"


@dataclass(frozen=True)
class Session:
    token: ApiToken
    cookie: str

    @property
    def csrf(self) -> str:
        """What the session's pages carry for their requests that change something."""
        return _mac(self.token, _CSRF, self.cookie)

    def csrf_matches(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.csrf.encode())


def verify(cookie: str, tokens: Sequence[ApiToken], now: float) -> Session | None:
    """The session `cookie` is, while it lasts and its token is still in the table."""
    # Names may hold dots: the two fixed fields are split off the end.
    signed, _, mac = cookie.rpartition(".")
    name, _, expires = signed.rpartition(".")
    if not (name and expires.isdigit() and mac):
        return None
    if int(expires) <= now:
        return None
    for token in tokens:
        # Every token of that name is checked alike (there is one: names are unique).
        if token.name == name and hmac.compare_digest(
            mac.encode(), _mac(token, _SESSION, signed).encode()
        ):
            return Session(token, cookie)
    return None
