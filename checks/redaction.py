"""The second line of defence for what leaves a command (issue 11, item 6).

A command's output goes into the workflow history, the run's events and the agent's
trajectory (committed to git and sent back to the model). The sandbox is meant to keep the
worker's secrets out of a command's reach; this module makes sure that, if one gets through
anyway (a command reading `/proc/<worker>/environ`, a secrets file), its value does not
leave the activity: every secret value the worker holds is replaced by `[REDACTED]` and the
text is capped.

It is a second line, not a fix: a command that prints a secret encoded (base64, reversed,
split across lines) gets it past any redaction. Only the sandbox stops that.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping

from loopworks.schemas.git_credentials import ENV_VAR as GIT_CREDENTIALS_VAR
from loopworks.schemas.git_credentials import tokens_of
from loopworks.schemas.settings import SECRET_FIELDS, Settings

REDACTED = "[REDACTED]"

# Shorter values are not redacted: a short "secret" ("test", "changeme") is also a common
# word, and redacting it would garble ordinary output; real API keys and tokens are longer.
MIN_SECRET_CHARS = 8

# A secret cut by truncation leaves its end at the start of the kept text; an end this long
# is redacted too (a shorter one shows at most 3 characters of a key, too few to matter,
# while matching single characters would garble every truncated output).
MIN_PARTIAL_CHARS = 4

# Secrets the worker process may hold in its environment without Settings knowing them:
# the ones the worker or its libraries read (the Anthropic SDK, Temporal's env config, the
# OpenTelemetry exporter's auth header), GIT_TOKEN (how deployments gave git a token
# before LOOPS_GIT_CREDENTIALS), and the most common CI and cloud credentials of the
# machines workers run on. Kept short on purpose: each is a credential by definition, so
# redacting it costs nothing.
SECRET_ENV_VARS: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS_CLIENT_KEY_DATA",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "GIT_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


def _values(raw: str | None, name: str = "") -> set[str]:
    """A secret setting's value and, for a list (LOOPS_API_TOKENS), each of its items;
    for LOOPS_GIT_CREDENTIALS, each token in it."""
    if not raw:
        return set()
    found = {raw.strip(), *(part.strip() for part in raw.split(","))}
    if name == GIT_CREDENTIALS_VAR:
        found |= tokens_of(raw)
    return {value for value in found if len(value) >= MIN_SECRET_CHARS}


def settings_secrets(settings: Settings) -> frozenset[str]:
    """The secret values of `settings`: every field `SECRET_FIELDS` names."""
    found: set[str] = set()
    for name in SECRET_FIELDS:
        value = getattr(settings, name)
        alias = Settings.model_fields[name].alias or name
        found |= _values(value if isinstance(value, str) else None, alias)
    return frozenset(found)


def environ_secrets(environ: Mapping[str, str]) -> frozenset[str]:
    """The secret values in an environment: the well-known variables and the variables the
    secret settings are read from."""
    names = {*SECRET_ENV_VARS, *(Settings.model_fields[f].alias or f for f in SECRET_FIELDS)}
    found: set[str] = set()
    for name in names:
        found |= _values(environ.get(name), name)
    return frozenset(found)


# What the worker's settings hold, remembered when its dependencies are built (at start):
# the agents' tools run far from the settings (pydantic-ai calls them with a workspace and
# arguments only), and a second line of defence must not depend on every caller threading
# the secrets through. A set, not one value: tests build several workers in one process,
# and redacting one more value is harmless.
_remembered: set[str] = set()
_lock = threading.Lock()


def remember(secrets: Iterable[str]) -> None:
    """Add the worker's secrets to those every command's output is redacted of."""
    with _lock:
        _remembered.update(s for s in secrets if len(s) >= MIN_SECRET_CHARS)


def worker_secrets() -> frozenset[str]:
    """Every secret the worker process knows: its settings' (as remembered at start) and its
    environment's now (so a process that built no settings is covered too)."""
    with _lock:
        remembered = frozenset(_remembered)
    return remembered | environ_secrets(os.environ)


def redact(text: str, secrets: Iterable[str], *, cut_at_start: bool = False) -> str:
    """`text` with every secret value (of at least MIN_SECRET_CHARS) replaced by `[REDACTED]`.

    Longer secrets go first, so one that contains another is replaced whole. With
    `cut_at_start` (the text is the tail of something longer), an end of a secret the cut
    left at the very start is redacted too.
    """
    ordered = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
    for secret in ordered:
        text = text.replace(secret, REDACTED)
    if cut_at_start:
        for secret in ordered:
            for start in range(1, len(secret) - MIN_PARTIAL_CHARS + 1):
                if text.startswith(secret[start:]):
                    text = REDACTED + text[len(secret) - start :]
                    break
    return text


def cap(text: str, limit: int) -> str:
    """`text`, or when longer its last `limit` characters (where a command's verdict is)
    after a note of how much was cut. Redact first: a cut can leave part of a secret."""
    if len(text) <= limit:
        return text
    kept = text[len(text) - limit :] if limit > 0 else ""
    return f"[{len(text) - len(kept)} characters cut]\n{kept}"
