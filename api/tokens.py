"""The API's tokens: each has a name (who started a run) and a kind (may it change things).

Four sources, all read when the API starts: `LOOPS_API_TOKENS` (tokens that may start,
steer and read runs), `LOOPS_API_READ_TOKENS` (tokens that may only read: GET and event
streams, for watchers and dashboards), `LOOPS_API_ADMIN_TOKENS` (tokens that may also
administer the service: the gc, `POST /gc`) and `LOOPS_API_TOKENS_FILE` (one
`name:token`, `name:token:read` or `name:token:admin` a line, `#` comments). In the
variables an entry is `name:token` or a bare token, which is named by its place
(`token-1`, `read-token-1`, `admin-token-1`) so that a deployment set up before tokens had
names keeps working.

A mistake (a name used twice, a token given two names, a malformed entry, a token shorter
than `MIN_TOKEN_CHARS`) stops the API from starting: a token table that is not what the
operator meant is worse than none, and a short token can be guessed over the network. No
message ever repeats a token.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loopworks.schemas.settings import Settings

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
# Who started a run when the API is open (no tokens, loopback only): not a token's name.
OPEN_ACCESS_NAME = "local"
READ_SUFFIX = ":read"
ADMIN_SUFFIX = ":admin"
# Sixteen characters of `openssl rand -hex` are 64 bits: past guessing through an API that
# answers each try over the network. A person's word ("alice:x") is refused at start.
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class ApiToken:
    name: str
    # Never in a repr: not in a log, not in a test's failure.
    secret: str = field(repr=False)
    read_only: bool = False
    # May administer the service (the gc), besides all a token may do.
    admin: bool = False


def _entry(text: str, where: str, derived: str, read_only: bool, admin: bool = False) -> ApiToken:
    name, sep, secret = text.partition(":")
    if not sep:
        return ApiToken(derived, text, read_only, admin)
    if not NAME.fullmatch(name):
        raise ValueError(
            f"{where}: a name before ':' must be letters, digits, '.', '_', '@' or '-'"
            " (at most 64), as in name:token"
        )
    if not secret:
        raise ValueError(f"{where}: the token named {name!r} is empty")
    return ApiToken(name, secret, read_only, admin)


def parse_tokens(
    text: str | None, variable: str, read_only: bool = False, admin: bool = False
) -> list[ApiToken]:
    """The comma-separated entries of one variable, blanks dropped."""
    prefix = "read-token" if read_only else "admin-token" if admin else "token"
    entries = [part.strip() for part in (text or "").split(",") if part.strip()]
    return [
        _entry(entry, f"{variable} entry {n}", f"{prefix}-{n}", read_only, admin)
        for n, entry in enumerate(entries, 1)
    ]


def parse_token_file(text: str, source: str) -> list[ApiToken]:
    """`name:token`, `name:token:read` or `name:token:admin` a line; blank lines and `#`
    comments skipped."""
    tokens: list[ApiToken] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}"
        read_only = line.endswith(READ_SUFFIX)
        admin = line.endswith(ADMIN_SUFFIX)
        line = line.removesuffix(READ_SUFFIX) if read_only else line.removesuffix(ADMIN_SUFFIX)
        if ":" not in line:
            raise ValueError(f"{where}: expected name:token, name:token:read or name:token:admin")
        tokens.append(_entry(line, where, "", read_only, admin))
    return tokens


def checked(tokens: Sequence[ApiToken]) -> tuple[ApiToken, ...]:
    """The table, or a ValueError naming what is ambiguous in it."""
    names: set[str] = set()
    # Read at start, not compared with what a client sent: no timing to hide here.
    secrets: set[str] = set()
    for token in tokens:
        if token.name in names:
            raise ValueError(f"the API token name {token.name!r} is used twice")
        if token.name == OPEN_ACCESS_NAME:
            raise ValueError(f"{OPEN_ACCESS_NAME!r} names open access, not a token: rename it")
        if token.secret in secrets:
            raise ValueError(f"the token named {token.name!r} is also given another name")
        if len(token.secret) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"the token named {token.name!r} has {len(token.secret)} characters, fewer than"
                f" the {MIN_TOKEN_CHARS} a token needs: make one with `openssl rand -hex 32`"
            )
        names.add(token.name)
        secrets.add(token.secret)
    return tuple(tokens)


def load(settings: Settings) -> tuple[ApiToken, ...]:
    """Every token the API accepts; empty means access is open (loopback only)."""
    tokens = [
        *parse_tokens(settings.api_tokens, "LOOPS_API_TOKENS"),
        *parse_tokens(settings.api_read_tokens, "LOOPS_API_READ_TOKENS", read_only=True),
        *parse_tokens(settings.api_admin_tokens, "LOOPS_API_ADMIN_TOKENS", admin=True),
    ]
    path = settings.api_tokens_file
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise ValueError(
                f"LOOPS_API_TOKENS_FILE {path} cannot be read: {err.strerror or err}"
            ) from err
        tokens += parse_token_file(text, f"LOOPS_API_TOKENS_FILE {path}")
    return checked(tokens)


def match(presented: str, tokens: Sequence[ApiToken]) -> ApiToken | None:
    """The token `presented` is, compared with every one of them (no early exit), so the
    time taken says nothing about which matched."""
    given = presented.encode()
    found: ApiToken | None = None
    for token in tokens:
        if hmac.compare_digest(given, token.secret.encode()):
            found = token
    return found
