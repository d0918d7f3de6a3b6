"""The origin policy (workspace/origin_policy.py) applied: resolve what the decision needs (a
host's addresses, a local path's real location) and refuse an origin before any git
process, network connection or file read touches it.

An admitted http(s) origin is pinned to the addresses its host was found at: git is told
them (`pin_args`) and a webhook is connected to one of them, so a name that resolves
differently once checked (DNS rebinding) cannot send either elsewhere (SECURITY.md,
"Origins a deployment allows")."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import replace

from loopworks.schemas.notify import WEBHOOK_SCHEMES
from loopworks.schemas.origin_rules import GIT_CREDENTIALS, OriginRules
from loopworks.workspace.origin_policy import (
    DEFAULT_PORTS,
    Location,
    Verdict,
    admit,
    needs_addresses,
    parse_origin,
)
from loopworks.workspace.refs import redact
from loopworks.workspace.runner import GitError
from loopworks.workspace.stores import own_origin_store, reached_by_git

# What GitRunner calls before it hands git an origin: raises OriginRefusedError, else
# returns what git is to be given before its subcommand (`pin_args`).
OriginCheck = Callable[[str], tuple[str, ...]]
Resolver = Callable[[str, int | None], tuple[str, ...]]
# What connects over these is pinned to the addresses the check admitted: git's http(s)
# goes through libcurl (http.curloptResolve), a webhook through httpx.
PINNED_SCHEMES = frozenset({"http", "https"})


class OriginRefusedError(GitError):
    """The deployment's settings do not allow this origin: asking again cannot help."""


def resolve(host: str, port: int | None) -> tuple[str, ...]:
    """Every address `host` resolves to (numeric forms such as `2130706433` or `0x7f.1`
    included, as git's resolver would read them); empty when it does not resolve."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(str(info[4][0]) for info in found))


def verdict_for(origin: str, rules: OriginRules, resolver: Resolver | None = None) -> Verdict:
    """Whether `origin` is admitted; admitted over http(s), with the addresses to pin."""
    resolver = resolver or resolve
    location = parse_origin(origin)
    if isinstance(location, Verdict):
        return location
    addresses: tuple[str, ...] = ()
    real_path = None
    marked = False
    reaches: tuple[str, ...] = ()
    if location.local:
        real_path = os.path.realpath(os.path.expanduser(location.path))
        marked = own_origin_store(real_path) is not None
        reaches = tuple(reached_by_git(real_path))
    elif needs_addresses(location, rules):
        addresses = resolver(location.host, location.port)
    verdict = admit(origin, rules, addresses, real_path, marked, reaches)
    if not verdict or location.scheme not in PINNED_SCHEMES or _is_address(location.host):
        return verdict
    # A host admitted by name (LOOPS_ALLOWED_ORIGINS, the service's own origin) is looked
    # up only now: what connects is pinned to what was found all the same.
    return replace(verdict, addresses=addresses or resolver(location.host, location.port))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def pin_args(origin: str, addresses: tuple[str, ...]) -> tuple[str, ...]:
    """`-c http.curloptResolve=<host>:<port>:<address>,...`: libcurl (git's http
    transport, git >= 2.37) connects to these addresses for the origin's host and port and
    never looks the name up itself. Nothing when there are none to pin, or for a name libcurl
    would not look up as given (its IDNA form is what it resolves)."""
    location = parse_origin(origin)
    if not addresses or not isinstance(location, Location):
        return ()
    try:
        host = location.host.encode("idna").decode("ascii")
    except UnicodeError:
        return ()
    port = location.port or DEFAULT_PORTS[location.scheme]
    listed = ",".join(f"[{a}]" if ":" in a else a for a in addresses)
    return ("-c", f"http.curloptResolve={host}:{port}:{listed}")


def webhook_verdict(url: str, rules: OriginRules, resolver: Resolver | None = None) -> Verdict:
    """Whether notifications may be POSTed to `url`: an http(s) URL the origin rules
    admit as they would a repository's (docs/notifications.md#which-urls)."""
    location = parse_origin(url)
    if isinstance(location, Verdict):
        return location
    if "://" not in url or location.scheme not in WEBHOOK_SCHEMES:
        return Verdict(False, "a webhook must be an http or https URL")
    return verdict_for(url, rules, resolver)


def refusal(verdict: Verdict) -> str:
    """A refused verdict as one sentence naming the setting that would admit it."""
    if verdict.setting is None:
        return verdict.reason
    if verdict.setting == GIT_CREDENTIALS:
        return f"{verdict.reason} (set {GIT_CREDENTIALS})"
    return f"{verdict.reason} (the setting {verdict.setting} admits it)"


def check_origin(
    origin: str, rules: OriginRules, resolver: Resolver | None = None
) -> tuple[str, ...]:
    """Raise OriginRefusedError unless `origin` is admitted; else the `pin_args` for it."""
    verdict = verdict_for(origin, rules, resolver)
    if not verdict:
        raise OriginRefusedError(f"origin {redact(origin)} refused: {refusal(verdict)}")
    return pin_args(origin, verdict.addresses)


def origin_check(rules: OriginRules, resolver: Resolver | None = None) -> OriginCheck:
    def check(origin: str) -> tuple[str, ...]:
        return check_origin(origin, rules, resolver)

    return check
