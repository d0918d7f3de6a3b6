"""Git's rules for names, checked without starting git: a ref name (requests name a base
branch, checked as they arrive; workers name the refs they ask for, workspace/runner.py),
whether an origin is a URL or a local path (the CLI, the API and workers tell them apart
alike), and a URL's credentials kept out of text (every redaction, checks/redaction.py's
too, applies this one rule)."""

from __future__ import annotations

import re

# What git-check-ref-format(1) refuses anywhere in a name: control characters and space,
# ~ ^ : ? * [ \, "..", "@{", and empty components.
_REF_REFUSED = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def valid_ref_name(ref: str) -> bool:
    """Whether `git check-ref-format <ref>` accepts `ref` (at least two components), by
    its rules, so naming a branch starts no process."""
    if ref == "@" or "/" not in ref or ref.startswith("/") or ref.endswith(("/", ".")):
        return False
    if _REF_REFUSED.search(ref):
        return False
    return all(not part.startswith(".") and not part.endswith(".lock") for part in ref.split("/"))


def is_url(origin: str) -> bool:
    """True for `scheme://…` and scp-like `host:path` origins, False for local paths."""
    if "://" in origin:
        return True
    head = origin.split("/", 1)[0]
    return ":" in head and not re.match(r"^[A-Za-z]:$", head)


# A URL's userinfo (user, and password), from its `://` to the `@` before its host. Matched
# from the `://` on, so that the scan stays linear over any text (a scheme matched before
# it would be tried from every letter of a long word).
_URL_USERINFO = re.compile(r"://([^/@\s]+)@")
# The scheme just before a `://`, within the longest scheme looked for.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*$")
# Schemes whose user is a login name, not a credential (`ssh://git@host/...`).
_LOGIN_SCHEMES = frozenset({"ssh", "git+ssh", "ssh+git"})
_LOGIN_SCHEME_CHARS = max(map(len, _LOGIN_SCHEMES))


def redact_url_credentials(text: str) -> str:
    """`text` with the userinfo of every URL in it (`https://user:token@host/...`, and
    `https://token@host/...`, a token as the user) replaced by `***`: origins and git's
    messages about them may carry a token. An ssh URL's user without a password
    (`ssh://git@host/...`) is a login name, and stays: such an origin must still work."""
    if "://" not in text:
        return text

    def replaced(match: re.Match[str]) -> str:
        before = text[max(0, match.start() - _LOGIN_SCHEME_CHARS - 1) : match.start()]
        scheme = _SCHEME.search(before)
        login = scheme is not None and scheme.group().lower() in _LOGIN_SCHEMES
        return match.group() if login and ":" not in match[1] else "://***@"

    return _URL_USERINFO.sub(replaced, text)
