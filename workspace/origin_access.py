"""The origin policy (workspace/origin_policy.py) applied: resolve what the decision needs (a
host's addresses, a local path's real location) and refuse an origin before any git
process, network connection or file read touches it."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from loopworks.schemas.notify import WEBHOOK_SCHEMES
from loopworks.schemas.origin_rules import GIT_CREDENTIALS, OriginRules
from loopworks.workspace.origin_policy import (
    Verdict,
    admit,
    needs_addresses,
    parse_origin,
)
from loopworks.workspace.refs import redact
from loopworks.workspace.runner import GitError
from loopworks.workspace.stores import own_origin_store

# What GitRunner calls before it hands git an origin: raises OriginRefusedError.
OriginCheck = Callable[[str], None]


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


def verdict_for(
    origin: str,
    rules: OriginRules,
    resolver: Callable[[str, int | None], tuple[str, ...]] = resolve,
) -> Verdict:
    location = parse_origin(origin)
    if isinstance(location, Verdict):
        return location
    addresses: tuple[str, ...] = ()
    real_path = None
    marked = False
    if location.local:
        real_path = os.path.realpath(os.path.expanduser(location.path))
        marked = own_origin_store(real_path) is not None
    elif needs_addresses(location, rules):
        addresses = resolver(location.host, location.port)
    return admit(origin, rules, addresses, real_path, marked)


def webhook_verdict(
    url: str,
    rules: OriginRules,
    resolver: Callable[[str, int | None], tuple[str, ...]] = resolve,
) -> Verdict:
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


def check_origin(origin: str, rules: OriginRules) -> None:
    verdict = verdict_for(origin, rules)
    if not verdict:
        raise OriginRefusedError(f"origin {redact(origin)} refused: {refusal(verdict)}")


def origin_check(rules: OriginRules) -> OriginCheck:
    def check(origin: str) -> None:
        check_origin(origin, rules)

    return check
