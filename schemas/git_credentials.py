"""Git credentials scoped to hosts, and to repositories (LOOPS_GIT_CREDENTIALS), and the one
decision of which, if any, answers git's request for a credential.

The setting is JSON, host to username and token, and optionally the origins (URL prefixes
on that host) the credential serves:

    {"github.com": {"username": "x-access-token", "token": "ghp_...",
                    "origins": ["https://github.com/acme/"]},
     "git.example.com:8443": {"username": "loops", "token": "..."}}

A host without a port is answered on https's own port only; a host named with a port, on
that port only. Nothing is ever answered over http or any scheme but https (ssh uses its
keys, never these). A credential naming origins is answered only for a repository under
one of them, matched at a path boundary as LOOPS_ALLOWED_ORIGINS matches; git tells the
repository's path because `workspace/lockdown.py` turns `credential.useHttpPath` on for
those hosts, and a request that names none gets nothing.

Kept free of pydantic and of the rest of the package: git runs the credential helper
(workspace/git_credential.py) once per request, so importing this must cost next to
nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

ENV_VAR = "LOOPS_GIT_CREDENTIALS"

# A host as git's credential protocol names it: a DNS name or an address, an optional
# port. Nothing that could end a line of the protocol or smuggle a path or userinfo.
_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$")
_HTTPS_PORT = "443"


@dataclass(frozen=True)
class GitCredential:
    username: str
    # Never in a repr: not in a log, not in a test's failure.
    token: str = field(repr=False)
    # URL prefixes (`https://github.com/acme/`) of the repositories it serves; empty: any
    # repository on its host.
    origins: tuple[str, ...] = ()


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
        if not isinstance(entry, dict) or not {"username", "token"} <= set(entry) <= _FIELDS:
            raise ValueError(
                f"{ENV_VAR}[{host!r}] must be {{'username': ..., 'token': ...}}, optionally"
                " with 'origins': [URL prefixes on that host]"
            )
        username, token = entry["username"], entry["token"]
        for name, value in (("username", username), ("token", token)):
            if not isinstance(value, str) or not value or _unsafe(value):
                raise ValueError(
                    f"{ENV_VAR}[{host!r}].{name} must be a non-empty string on one line"
                )
        origins = _origins(entry.get("origins", []), key, host)
        found[key] = GitCredential(username=username, token=token, origins=origins)
    return found


_FIELDS = frozenset({"username", "token", "origins"})


def _origins(raw: object, key: str, host: str) -> tuple[str, ...]:
    """The origin prefixes of the credential for `key` (its normalised host): each an
    https URL on exactly that host, normalised as git's request will be rebuilt."""
    where = f"{ENV_VAR}[{host!r}].origins"
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ValueError(f"{where} must be a list of URL prefixes")
    found = []
    for prefix in raw:
        scheme, sep, rest = prefix.partition("://")
        named, slash, path = rest.partition("/")
        if scheme.lower() != "https" or not sep or not slash or _unsafe(prefix):
            raise ValueError(
                f"{where}: {prefix!r} is not an https URL prefix with a path, as in"
                f" https://{key}/your-org/"
            )
        if _normal_host(named) != key:
            raise ValueError(f"{where}: {prefix!r} is not on {key}")
        found.append(f"https://{key}/{path}")
    return tuple(found)


def serves(credential: GitCredential, host: str, path: str | None) -> bool:
    """Whether `credential` is for the repository at https://`host`/`path` (`host`
    normalised): any on its host when it names no origins; else one under an origin,
    at a path boundary, and never when git named no path."""
    if not credential.origins:
        return True
    if path is None:
        return False
    url = f"https://{host}/{path.lstrip('/')}"
    return any(_under(url, prefix) for prefix in credential.origins)


def _under(url: str, prefix: str) -> bool:
    # `https://host/acme/repo` names the repository git fetches as `acme/repo.git` too,
    # and never `acme/repo.other` nor `acme/repository`.
    for candidate in (url, url.removesuffix(".git")):
        if candidate.startswith(prefix) and (
            prefix.endswith("/") or len(candidate) == len(prefix) or candidate[len(prefix)] == "/"
        ):
            return True
    return False


def path_scoped_hosts(text: str | None) -> list[str]:
    """The hosts whose credential names origins: git must tell the helper the path of
    each request to them (`credential.<url>.useHttpPath`). Empty when malformed (a
    malformed value stops every entry point before it could be used)."""
    try:
        credentials = parse_credentials(text)
    except ValueError:
        return []
    return [host for host, credential in credentials.items() if credential.origins]


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
    """The credential to answer git's `get` with (its `protocol=`, `host=`, `path=`,
    `username=` lines), or None: only https, only a host configured exactly (port
    included), only a repository its origins name (when it names any), and only for the
    username configured when git already has one."""
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
    if not serves(found, host, request.get("path")):
        return None
    return found


def tokens_of(text: str | None) -> set[str]:
    """The tokens in a LOOPS_GIT_CREDENTIALS value, for redaction; empty when malformed
    (a malformed value stops every entry point before it could be used)."""
    try:
        return {credential.token for credential in parse_credentials(text).values()}
    except ValueError:
        return set()
