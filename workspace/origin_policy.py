"""Which origins a deployment lets runs and graphs use: one decision, `admit`, made the
same way by the API (as a request arrives) and by the worker (before git touches it).

An API client is not the operator: the repository it names is where the worker clones
from and pushes to, and what the API and the worker fetch. So an origin is admitted only
by the operator's settings:

- LOOPS_ALLOWED_SCHEMES: https and ssh unless others are named; `ext::`, `fd::` and every
  `<transport>::` form never (git would run a program the URL names).
- LOOPS_ALLOWED_ORIGINS: URL prefixes or hosts. Unset, any URL whose host resolves to
  public addresses only; loopback, link-local, private, CGNAT, unspecified and multicast
  addresses (IPv4-mapped, 6to4, Teredo and NAT64 forms of them too) are refused unless
  the host is named here.
- LOOPS_LOCAL_ROOTS: local repositories only under these directories, symlinks resolved,
  and never inside the service's data or workspaces directory.
- Credentials never in a URL (they would be kept in workflow inputs, state and history):
  LOOPS_GIT_CREDENTIALS holds them (schemas/git_credentials.py).

The service's own default origin is always admitted. `admit` is pure: the addresses a
host resolves to and the real path of a local origin are given to it
(workspace/origin_access.py finds them).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from loopworks.schemas.git_names import is_url
from loopworks.schemas.origin_rules import (
    ALLOWED_ORIGINS,
    ALLOWED_SCHEMES,
    GIT_CREDENTIALS,
    KNOWN_SCHEMES,
    LOCAL_ROOTS,
    SCHEME_ALIASES,
    OriginRules,
)

DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
# git's `<transport>::<address>`: ext:: runs a shell command, fd:: reads file descriptors.
_TRANSPORT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_BRACKETED = re.compile(r"^(?P<user>[^@\[\]]*@)?\[(?P<inner>[^\]]*)\]:(?P<path>.*)$", re.S)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    # Why not, and the setting that would admit it (None when none would).
    reason: str = ""
    setting: str | None = None
    # Admitted over http(s): the addresses the host was found at, which git and webhooks
    # then connect to and to no other (workspace/origin_access.py pins them); empty: none
    # pinned (another transport, an address for a host, a host not found).
    addresses: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.allowed


ADMITTED = Verdict(True)


def _refused(reason: str, setting: str | None = None) -> Verdict:
    return Verdict(False, reason, setting)


@dataclass(frozen=True)
class Location:
    """An origin taken apart: a URL (scp-like `user@host:path` is ssh) or a local path
    (scheme "")."""

    scheme: str
    host: str = ""
    port: int | None = None
    path: str = ""
    user: str | None = None
    password: bool = False

    @property
    def local(self) -> bool:
        return self.scheme in ("", "file")


def parse_origin(origin: str) -> Location | Verdict:
    """`origin` taken apart, or a refusal when git could not be given it safely."""
    text = origin.strip()
    if not text or text != origin or any(ord(c) < 0x20 or c == "\x7f" for c in text):
        return _refused("an origin cannot be empty or hold spaces around it or control bytes")
    if text.startswith("-"):
        return _refused(f"{text!r} would be read by git as an option")
    if _TRANSPORT.match(text):
        return _refused(
            f"{text.split('::')[0]}:: origins make git run a program; they are never allowed"
        )
    if "://" in text:
        return _parse_url(text)
    if is_url(text):
        return _parse_scp(text)
    return Location(scheme="", path=text)


def _parse_url(text: str) -> Location | Verdict:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as err:
        return _refused(f"{text!r} is not a usable URL: {err}")
    scheme = SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    userinfo, at, _ = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return Location(
        scheme=scheme,
        host=(parts.hostname or "").lower(),
        port=port,
        path=unquote(parts.path),
        user=unquote(user) if at else None,
        password=bool(colon),
    )


def _parse_scp(text: str) -> Location | Verdict:
    # git's scp-like syntax, as git reads it: `[user@]host:path`, the host ending at the
    # first colon, or bracketed (`[host]:path`, `user@[::1]:path`, `[user@host]:path`).
    head, _, path = text.partition(":")
    if bracketed := _BRACKETED.match(text):
        head = f"{bracketed['user'] or ''}{bracketed['inner']}"
        path = bracketed["path"]
    elif "[" in head or "]" in head:
        return _refused(f"{text!r} is not a usable ssh address")
    user, at, host = head.rpartition("@")
    return Location(
        scheme="ssh",
        host=host.strip("[]").lower(),
        path=path,
        user=user if at else None,
        password=":" in user,
    )


def needs_addresses(location: Location, rules: OriginRules) -> bool:
    """Whether `admit` needs the addresses the host resolves to: a URL when no allow-list
    names origins (with one, a host is admitted by name or not at all)."""
    return not location.local and not rules.allowed


def admit(
    origin: str,
    rules: OriginRules,
    addresses: tuple[str, ...] = (),
    real_path: str | None = None,
    marked: bool = False,
    reaches: tuple[str, ...] = (),
) -> Verdict:
    """Whether runs may use `origin`, and if not, why and which setting would admit it.

    `addresses`: what a URL's host resolves to (needed when `needs_addresses`); a host
    that resolves to nothing is refused. `real_path`: a local origin's path with symlinks
    resolved (default: the path as given, made absolute). `marked`: a local origin carries
    the mark of a service's own origin (workspace/stores.py), which lets clones write into
    its store directly: only this service's own origin may, never one a client names.
    `reaches`: where git goes besides a local origin's path when it opens it (the git dir
    of a `.git` file, a common dir, alternates; `stores.reached_by_git`), resolved."""
    if origin in rules.own or (real_path is not None and real_path in rules.own):
        return ADMITTED
    location = parse_origin(origin)
    if isinstance(location, Verdict):
        return location
    if location.local and marked:
        return _refused("it carries the mark of a loopworks service's own origin, not this one's")
    if location.local:
        return _admit_local(location, rules, real_path, reaches)
    return _admit_url(origin, location, rules, addresses)


def _admit_local(
    location: Location, rules: OriginRules, real_path: str | None, reaches: tuple[str, ...] = ()
) -> Verdict:
    if location.scheme == "file":
        if location.host not in ("", "localhost"):
            return _refused(f"file:// URLs name no host, not {location.host!r}")
        if "file" not in rules.schemes:
            return _refused("file:// origins are not allowed", ALLOWED_SCHEMES)
    real = real_path or os.path.abspath(os.path.expanduser(location.path))
    if any(_under(real, private) for private in rules.private_dirs):
        return _refused(
            f"{real} is inside the service's own data or workspaces directory: never an origin"
        )
    for reached in reaches:
        if any(_under(reached, private) for private in rules.private_dirs):
            return _refused(
                f"{real} has git read {reached} (its .git file, commondir or alternates name "
                "it), inside the service's own data or workspaces directory: never an origin"
            )
    if not rules.local_roots:
        return _refused("local repositories are not allowed", LOCAL_ROOTS)
    if not any(_under(real, root) for root in rules.local_roots):
        roots = ", ".join(rules.local_roots)
        return _refused(f"{real} is under none of the local roots ({roots})", LOCAL_ROOTS)
    return ADMITTED


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _admit_url(
    origin: str, location: Location, rules: OriginRules, addresses: tuple[str, ...]
) -> Verdict:
    scheme = location.scheme
    if scheme not in KNOWN_SCHEMES:
        return _refused(f"{scheme}:// origins make git run a remote helper; never allowed")
    if location.password or (location.user is not None and scheme != "ssh"):
        return _refused(
            "an origin URL cannot carry credentials (they would be kept in the run's "
            "history): give the URL without them and configure the credential instead",
            GIT_CREDENTIALS,
        )
    if not location.host:
        return _refused(f"{origin!r} names no host")
    if any(segment in (".", "..") for segment in location.path.split("/")):
        return _refused(f"{origin!r} has `.` or `..` in its path")
    if scheme not in rules.schemes:
        return _refused(f"{scheme} origins are not allowed", ALLOWED_SCHEMES)
    if rules.allowed:
        if any(_names(entry, origin, location) for entry in rules.allowed):
            return ADMITTED
        return _refused(f"{_where(location)} is not an allowed origin", ALLOWED_ORIGINS)
    if not addresses:
        return _refused(f"{location.host} does not resolve to any address")
    for address in addresses:
        if not public_address(address):
            return _refused(
                f"{location.host} resolves to {address}, a private, loopback or otherwise "
                "internal address: name the host to allow it",
                ALLOWED_ORIGINS,
            )
    return ADMITTED


def _where(location: Location) -> str:
    port = "" if location.port is None else f":{location.port}"
    return f"{location.scheme}://{location.host}{port}"


def _names(entry: str, origin: str, location: Location) -> bool:
    """Whether an LOOPS_ALLOWED_ORIGINS entry names this origin: a URL prefix matched at a
    path boundary, or a host (optionally :port) matched on the scheme's default port
    unless the entry names another."""
    if "/" in entry:
        if not origin.startswith(entry):
            return False
        return entry.endswith(("/", ":")) or len(origin) == len(entry) or origin[len(entry)] == "/"
    host, _, port = entry.lower().rpartition(":") if _has_port(entry) else (entry.lower(), "", "")
    if host.strip("[]") != location.host:
        return False
    wanted = int(port) if port else DEFAULT_PORTS.get(location.scheme)
    return (location.port or DEFAULT_PORTS.get(location.scheme)) == wanted


def _has_port(entry: str) -> bool:
    head, colon, tail = entry.rpartition(":")
    return bool(colon) and tail.isdigit() and (not head.startswith("[") or head.endswith("]"))


def public_address(address: str) -> bool:
    """Whether `address` is a public unicast address, looking inside IPv6 forms that
    carry an IPv4 address (mapped, 6to4, Teredo, NAT64, IPv4-compatible)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return public_address(str(ip.ipv4_mapped))
        if int(ip) < 2**32:  # :: , ::1 and the deprecated IPv4-compatible ::a.b.c.d
            return False
        embedded = [ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if any(v4 is not None and not public_address(str(v4)) for v4 in embedded):
            return False
    return ip.is_global and not (
        ip.is_multicast
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or ip.is_unspecified
    )
