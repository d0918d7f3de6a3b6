"""The pieces of redaction beyond command output: URL credentials, every string of a
value, log records, an activity's failure (the whole path: test_redaction.py)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from loopworks.checks.redaction import (
    REDACTED,
    RedactingFilter,
    redact,
    redact_url_credentials,
    redacted,
)
from loopworks.schemas.settings import Settings
from loopworks.worker.redacting import redacted_failure
from loopworks.workspace import refs
from loopworks.workspace.runner import GitError
from tests.security.test_redaction import KEY, MIRROR, URL_TOKEN

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        (
            "fatal: unable to access 'https://user:tok3n@host.example/r.git/': 403",
            "fatal: unable to access 'https://***@host.example/r.git/': 403",
        ),
        ("ssh://git:pw@h:22/r and http://x@y/z", "ssh://***@h:22/r and http://***@y/z"),
        # A login name is no credential: an ssh origin comes through whole.
        ("ssh://git@github.com/team/app.git", None),
        ("https://ghp_tokenAsUser@github.com/team/app.git", "https://***@github.com/team/app.git"),
        ("mail bob@example.com via https://example.com/a", None),
        ("git@github.com:team/app.git", None),
    ],
)
def test_url_credentials_are_redacted(text: str, clean: str | None) -> None:
    assert redact_url_credentials(text) == (clean or text)
    assert redact(text, []) == (clean or text)
    # The workspace's redaction is the same rule, not a copy of it.
    assert refs.redact(text) == (clean or text)


class _Inner(BaseModel):
    note: str
    n: int = 1


class _Outer(BaseModel):
    inner: _Inner
    items: list[str]
    extra: dict[str, Any]


def test_redacted_reaches_every_string_and_copies_only_what_changed() -> None:
    value = _Outer(
        inner=_Inner(note=f"key {KEY}"),
        items=["plain", f"see {MIRROR}"],
        extra={"k": (KEY, 3), "clean": "text"},
    )
    clean = redacted(value, [KEY])
    assert clean.inner.note == f"key {REDACTED}"
    assert clean.items == ["plain", "see https://***@git.example.com/team/app.git"]
    assert clean.extra == {"k": (REDACTED, 3), "clean": "text"}
    assert value.inner.note == f"key {KEY}"  # the original is left alone
    untouched = _Outer(inner=_Inner(note="n"), items=["a"], extra={})
    assert redacted(untouched, [KEY]) is untouched


class _Phase(StrEnum):
    A = "A"


class _Stepped(BaseModel):
    phase: _Phase
    note: str


def test_redacted_keeps_an_enum_member_an_enum_member() -> None:
    """Seen as a pydantic serializer warning on every run's record: redacted, a StrEnum
    field came back a plain str."""
    clean = _Stepped(phase=_Phase.A, note="n")
    assert redacted(clean, [KEY]) is clean
    copied = redacted(_Stepped(phase=_Phase.A, note=f"key {KEY}"), [KEY])
    assert copied.phase is _Phase.A and copied.note == f"key {REDACTED}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copied.model_dump_json()


def _log_through(record_args: tuple[Any, ...], msg: str, exc: BaseException | None) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"tests.security.redaction.{id(stream)}")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        if exc is None:
            logger.warning(msg, *record_args)
        else:
            try:
                raise exc
            except BaseException:
                logger.exception(msg, *record_args)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_the_log_filter_redacts_message_arguments_and_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)  # what the worker's process holds
    assert KEY not in _log_through((), f"the key is {KEY}", None)
    out = _log_through((KEY, 3, MIRROR), "got %s in %d tries from %s", None)
    assert (
        out == f"WARNING got {REDACTED} in 3 tries from https://***@git.example.com/team/app.git\n"
    )
    out = _log_through(("push",), "%s failed", GitError(f"push to {MIRROR} failed: {KEY}"))
    assert "GitError" in out and KEY not in out and URL_TOKEN not in out
    # Clean records keep their arguments, for formatters that read them (uvicorn's).
    record = logging.LogRecord("x", logging.INFO, "f", 1, "%s %s", ("a", 2), None)
    RedactingFilter().filter(record)
    assert record.args == ("a", 2)


def test_the_entry_points_install_log_redaction_for_every_logger() -> None:
    """Installed once, it covers loggers and handlers configured after it (uvicorn's)."""
    code = (
        "import logging, sys\n"
        "from loopworks.checks.redaction import install_log_redaction\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "install_log_redaction()\n"
        "late = logging.getLogger('late'); late.propagate = False\n"
        "late.addHandler(logging.StreamHandler(sys.stdout))\n"
        f"late.warning('late %s', {KEY!r})\n"
        f"logging.getLogger('temporalio.activity').error('failed: ' + {MIRROR!r})\n"
    )
    env = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": KEY}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert f"late {REDACTED}" in out and "failed: https://***@git.example.com" in out
    assert KEY not in out and URL_TOKEN not in out
    for entry in ("worker/__main__.py", "api/__main__.py"):
        source = (Path(__file__).resolve().parents[2] / entry).read_text()
        assert "install_log_redaction()" in source, entry


def test_an_activity_failure_is_redacted_with_its_causes_and_flags() -> None:
    secrets = frozenset({KEY})
    try:
        try:
            raise GitError(f"fetch of {MIRROR} failed")
        except GitError as cause:
            message = f"no origin ({KEY})"
            raise ApplicationError(message, type="OriginLacks", non_retryable=True) from cause
    except ApplicationError as raised:
        original = raised
    failure = redacted_failure(original, secrets)
    assert isinstance(failure, ApplicationError) and failure is not original
    assert failure.message == f"no origin ({REDACTED})"
    assert failure.type == "OriginLacks" and failure.non_retryable
    cause = failure.__cause__
    assert isinstance(cause, ApplicationError) and cause.type == "GitError"
    assert cause.message == "fetch of https://***@git.example.com/team/app.git failed"
    plain = RuntimeError("nothing secret")
    assert redacted_failure(plain, secrets) is plain


PAYLOAD_KEY = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="  # 32 bytes, base64
GIT_TOKEN = "ghp_R4nd0mT0kenV4lue1234567890abcdefXYZ"


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("LOOPS_PAYLOAD_KEYS", f"k1:{PAYLOAD_KEY},k2:not-base64!!", PAYLOAD_KEY),
        (
            "LOOPS_GIT_CREDENTIALS",
            '{"github.com": {"origins": "https://github.com/acme/", "username": "x", '
            f'"token": "{GIT_TOKEN}"}}}}',
            GIT_TOKEN,
        ),
    ],
    ids=["payload-keys", "git-credentials"],
)
def test_a_setting_refused_at_start_quotes_nothing_of_its_secret(
    name: str, value: str, secret: str, tmp_path: Path
) -> None:
    """pydantic quoted a refused input's first and last 25 characters, and the worker and
    the API log a refused setting as they exit: a third of an AES key, or a token's tail,
    reached the start-up log, which redaction knew only whole."""
    with pytest.raises(ValueError) as refused:
        Settings(LOOPS_DATA_DIR=tmp_path, **{name: value})
    said = str(refused.value)
    pieces = {secret[i : i + 8] for i in range(len(secret) - 7)}
    assert not [piece for piece in pieces if piece in said], said
