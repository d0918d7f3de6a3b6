"""Git credentials scoped to hosts (LOOPS_GIT_CREDENTIALS), and the one decision of which,
if any, answers git's request for a credential.

The setting is JSON, host to username and token:

    {"github.com": {"username": "x-access-token", "token": "ghp_..."},
     "git.example.com:8443": {"username": "loops", "token": "..."}}

A host without a port is answered on https's own port only; a host named with a port, on
that port only. Nothing is ever answered over http or any scheme but https (ssh uses its
keys, never these). Kept free of pydantic and of the rest of the package: git runs the
credential helper (workspace/git_credential.py) once per request, so importing this must
cost next to nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

ENV_VAR = "LOOPS_GIT_CREDENTIALS"

# A host as git's credential protocol names it: a DNS name or an address, an optional
# port. Nothing that could end a line of the protocol or smuggle a path or userinfo.
_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$")
_HTTPS_PORT = "443"


@dataclass(frozen=True)
class GitCredential:
    username: str
    token: str


def parse_credentials(text: str | None) -> dict[str, GitCredential]:
    """The credentials in a LOOPS_GIT_CREDENTIALS value, by normalised host; ValueError
    saying what is wrong (never quoting a token) when it is not the documented shape."""
    if text is None or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{ENV_VAR} is not JSON (line {err.lineno}, column {err.colno}): expected "
            '{"<host>": {"username": "...", "token": "..."}}'
        ) from None
    if not isinstance(raw, dict):
        raise ValueError(f"{ENV_VAR} must be a JSON object of hosts")
    found: dict[str, GitCredential] = {}
    for host, entry in raw.items():
        key = _normal_host(host)
        if key is None:
            raise ValueError(f"{ENV_VAR}: {host!r} is not a host name (optionally with :port)")
        if not isinstance(entry, dict) or set(entry) != {"username", "token"}:
            raise ValueError(f"{ENV_VAR}[{host!r}] must be {{'username': ..., 'token': ...}}")
        username, token = entry["username"], entry["token"]
        for name, value in (("username", username), ("token", token)):
            if not isinstance(value, str) or not value or _unsafe(value):
                raise ValueError(
                    f"{ENV_VAR}[{host!r}].{name} must be a non-empty string on one line"
                )
        found[key] = GitCredential(username=username, token=token)
    return found


def _unsafe(value: str) -> bool:
    return any(char in value for char in "\n\r\0")


def _normal_host(host: object) -> str | None:
    """`host` lower-cased, https's own port dropped; None unless it is a host[:port]."""
    if not isinstance(host, str):
        return None
    host = host.strip().lower()
    if not _HOST.match(host):
        return None
    return host.removesuffix(f":{_HTTPS_PORT}")


def credential_for(
    request: dict[str, str], credentials: dict[str, GitCredential]
) -> GitCredential | None:
    """The credential to answer git's `get` with (its `protocol=`, `host=`, `username=`
    lines), or None: only https, only a host configured exactly (port included), and only
    for the username configured when git already has one."""
    if request.get("protocol") != "https":
        return None
    host = _normal_host(request.get("host", ""))
    if host is None:
        return None
    found = credentials.get(host)
    if found is None:
        return None
    username = request.get("username")
    if username is not None and username != found.username:
        return None
    return found


def tokens_of(text: str | None) -> set[str]:
    """The tokens in a LOOPS_GIT_CREDENTIALS value, for redaction; empty when malformed
    (a malformed value stops every entry point before it could be used)."""
    try:
        return {credential.token for credential in parse_credentials(text).values()}
    except ValueError:
        return set()
