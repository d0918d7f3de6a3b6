"""Redaction: the worker's secrets and the credentials written into URLs, out of every
text that leaves the worker.

A command's output, a file an agent read, a model's text and git's error messages go into
the workflow history, the run's events, prompts, the agent's trajectory (committed, pushed
and served) and logs. The sandbox is meant to keep the worker's secrets out of a command's
reach; this module makes sure that, if one gets through anyway (a command reading
`/proc/<worker>/environ`, a secrets file in a repository, a model repeating one), its value
does not go further: every secret value the worker holds is replaced by `[REDACTED]`, and
the user and password of a URL (`https://user:token@host`) by `***`. `redact` does both on
one text, `redacted` on every text inside a value (a model, a dict), `RedactingFilter` on
every log record. The choke points that call them: command output (`checks.output`), tool
results and trajectory records (`agent.loop`), what a model is given (`activities.model_calls`),
every activity's result and failure (`worker.redacting`), and the logs of the worker and
the API (their entry points install `install_log_redaction`).

It is a second line, not a fix: a secret printed encoded (base64, reversed, split across
lines) gets past any redaction. Only the sandbox stops that.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from loopworks.schemas.git_credentials import ENV_VAR as GIT_CREDENTIALS_VAR
from loopworks.schemas.git_credentials import tokens_of
from loopworks.schemas.git_names import redact_url_credentials
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
    """A secret setting's value and, for a list (LOOPS_API_TOKENS), each of its items and
    each item's token; for LOOPS_GIT_CREDENTIALS, each token in it."""
    if not raw:
        return set()
    parts = [part.strip() for part in raw.split(",")]
    # An API token list's items are `name:token` (LOOPS_API_TOKENS): the token alone too.
    found = {raw.strip(), *parts, *(part.partition(":")[2].strip() for part in parts)}
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


# The variables secrets are read from: the well-known ones and the secret settings'.
_SECRET_VARS = tuple(
    sorted({*SECRET_ENV_VARS, *(Settings.model_fields[f].alias or f for f in SECRET_FIELDS)})
)


def environ_secrets(environ: Mapping[str, str]) -> frozenset[str]:
    """The secret values in an environment: the well-known variables and the variables the
    secret settings are read from."""
    return _secrets_of(tuple(environ.get(name) for name in _SECRET_VARS))


# Every redaction asks for the environment's secrets (a few hundred times a run), and the
# environment rarely changes: its secrets are worked out once for each set of values.
@functools.lru_cache(maxsize=8)
def _secrets_of(values: tuple[str | None, ...]) -> frozenset[str]:
    found: set[str] = set()
    for name, raw in zip(_SECRET_VARS, values, strict=True):
        found |= _values(raw, name)
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
    """`text` with every secret value (of at least MIN_SECRET_CHARS) replaced by `[REDACTED]`
    and the credentials of every URL by `***` (`redact_url_credentials`).

    Longer secrets go first, so one that contains another is replaced whole. With
    `cut_at_start` (the text is the tail of something longer), an end of a secret the cut
    left at the very start is redacted too.
    """
    ordered = _longest_first(secrets)
    text = _replaced(text, ordered)
    if cut_at_start:
        for secret in ordered:
            for start in range(1, len(secret) - MIN_PARTIAL_CHARS + 1):
                if text.startswith(secret[start:]):
                    text = REDACTED + text[len(secret) - start :]
                    break
    return redact_url_credentials(text)


def _longest_first(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets worth redacting, longest first: one that contains another goes whole."""
    return tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True))


def _replaced(text: str, ordered: tuple[str, ...]) -> str:
    for secret in ordered:
        text = text.replace(secret, REDACTED)
    return text


Value = TypeVar("Value")


def redacted(value: Value, secrets: Iterable[str] | None = None) -> Value:
    """`value` with every string inside it redacted (`redact`): a string, or the strings
    of a pydantic model's fields, a dict's keys and values, a list's or a tuple's items,
    at any depth. `secrets` default to the worker's (`worker_secrets`).

    What holds nothing to redact comes back as it was, the same object; a model with
    something to redact comes back a copy (not validated again: only strings changed).
    """
    # Ordered once for the whole value, not again for each string in it.
    ordered = _longest_first(worker_secrets() if secrets is None else secrets)
    return _redacted(value, ordered)  # type: ignore[no-any-return]


def _redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        clean = redact_url_credentials(_replaced(value, secrets))
        # A str subclass (a StrEnum member) comes back from `replace` a plain str even
        # unchanged: keep the member, or a model's enum field turns into a bare string.
        return value if clean == value else clean
    if isinstance(value, BaseModel):
        fields = {**value.__dict__, **(value.__pydantic_extra__ or {})}
        changed = {}
        for name, item in fields.items():
            clean = _redacted(item, secrets)
            if clean is not item:
                changed[name] = clean
        return value.model_copy(update=changed) if changed else value
    if isinstance(value, dict):
        items = [(_redacted(k, secrets), _redacted(v, secrets)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, list | tuple):
        clean_items = [_redacted(item, secrets) for item in value]
        if all(c is i for c, i in zip(clean_items, value, strict=True)):
            return value
        return type(value)(clean_items) if isinstance(value, list) else tuple(clean_items)
    return value


class RedactingFilter(logging.Filter):
    """Redacts a log record in place (its message, arguments, traceback and stack) of the
    process's secrets (`worker_secrets`) and of URL credentials; drops nothing.

    Arguments are redacted one by one where that suffices, so a formatter that reads them
    (uvicorn's access log does) still finds them; otherwise the record carries its whole
    message, redacted, and no arguments.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = worker_secrets()
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, secrets)
        if record.args:
            record.args = _redacted_args(record.args, secrets)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it as it always does
            return True
        clean = redact(message, secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            # The handler formats the exception from exc_text when it is set.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        return True


def _redacted_args(args: Any, secrets: frozenset[str]) -> Any:
    """A record's arguments with every one whose text holds something to redact replaced
    by that text, redacted; the others (numbers, clean objects) as they were."""

    def clean(arg: Any) -> Any:
        if isinstance(arg, int | float | bool) or arg is None:
            return arg
        text = arg if isinstance(arg, str) else str(arg)
        safe = redact(text, secrets)
        return arg if safe == text else safe

    if isinstance(args, Mapping):
        return {key: clean(value) for key, value in args.items()}
    return tuple(clean(arg) for arg in args)


_factory_lock = threading.Lock()
_installed = False


def install_log_redaction() -> None:
    """Redact every log record the process makes, from now on (`RedactingFilter`).

    Installed on the record factory rather than on handlers: it then covers every logger
    and every handler, those configured later included (uvicorn configures its own), and
    the libraries' records (Temporal logs a failed activity's exception). Idempotent."""
    global _installed
    with _factory_lock:
        if _installed:
            return
        make = logging.getLogRecordFactory()
        redacting = RedactingFilter()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(*args, **kwargs)
            redacting.filter(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True


def cap(text: str, limit: int) -> str:
    """`text`, or when longer its last `limit` characters (where a command's verdict is)
    after a note of how much was cut. Redact first: a cut can leave part of a secret."""
    if len(text) <= limit:
        return text
    kept = text[len(text) - limit :] if limit > 0 else ""
    return f"[{len(text) - len(kept)} characters cut]\n{kept}"
