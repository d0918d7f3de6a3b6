"""The one place provider errors become Temporal errors.

Temporal owns retries (the SDK's own are off), so each failed HTTP request is one
activity attempt. A request the server rejects for what it is (bad key, unknown model,
too large) fails at once with a message a person can act on; anything that may pass
later (rate limits, overload, server errors, the network) is retried with the
MODEL_CALL policy's backoff, or after the server's `retry-after` when it sends one.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic_ai.exceptions import ModelAPIError, OutputTokenLimitExceeded, UnexpectedModelBehavior
from temporalio.exceptions import ApplicationError

from loopworks.llm.base import InvalidOutput
from loopworks.schemas.roles import Role

if TYPE_CHECKING:
    import anthropic

CUT_OFF = (
    "the answer was cut off at the output token limit; raise LOOPS_ANTHROPIC_MAX_TOKENS "
    "if answers are this long"
)

# Error types, for a workflow or an operator reading the run's history.
MODEL_REQUEST_REJECTED = "ModelRequestRejected"
MODEL_UNAVAILABLE = "ModelUnavailable"

# A server's `retry-after` is honoured up to this long; a broken proxy's date in the
# far future should slow a run down, not park it for days.
MAX_RETRY_AFTER = timedelta(minutes=5)

# Statuses that may succeed on a later attempt; any other 4xx fails at once
# (docs/models.md#when-a-call-fails).
_RETRYABLE_4XX = frozenset({408, 409, 429})

_REJECTED: dict[int, str] = {
    400: "invalid request",
    401: "authentication failed: check ANTHROPIC_API_KEY",
    402: "billing problem: check the plan and credit balance of the API key's account",
    403: "permission denied: the API key may not use this model or resource",
    404: "model not found: check LOOPS_MODEL_* (or the agent definition's Model) "
    "and ANTHROPIC_BASE_URL",
    413: "request too large: the prompt is more than the server accepts",
    422: "invalid request",
}

_UNAVAILABLE: dict[int, str] = {
    408: "the model server timed out the request",
    409: "the model server reported a conflict",
    429: "rate limited by the model server",
    529: "the model server is overloaded",
}


@contextlib.contextmanager
def model_errors(role: Role) -> Iterator[None]:
    """Turn what pydantic-ai raises for a failed model run into what the workflow reads:
    provider failures into (non-)retryable ApplicationErrors, answers that stayed invalid
    after their repair, or were cut off, into `InvalidOutput`."""
    provider_errors = _anthropic_errors()
    try:
        yield
    except ModelAPIError as exc:
        cause = exc.__cause__
        if isinstance(cause, provider_errors):
            raise classify(cause) from exc
        raise ApplicationError(
            f"the model request failed: {exc.message}", type=MODEL_UNAVAILABLE
        ) from exc
    except OutputTokenLimitExceeded as exc:
        raise InvalidOutput(role, CUT_OFF) from exc
    except UnexpectedModelBehavior as exc:
        raise InvalidOutput(role, invalid_detail(exc)) from exc
    except provider_errors as exc:
        raise classify(exc) from exc


def _anthropic_errors() -> tuple[type[anthropic.APIError], ...]:
    """The Anthropic SDK's error type once the SDK is loaded, else none. Importing the SDK
    costs a process seconds of CPU at start (thousands of modules), and only a worker
    with a real model loads it: without it no error of its kind can exist."""
    module = sys.modules.get("anthropic")
    return (module.APIError,) if module is not None else ()


def invalid_detail(exc: UnexpectedModelBehavior) -> str:
    """What was wrong with a model's last answer: pydantic-ai's message, then the
    validation errors or validator message it was raised from."""
    if exc.__cause__ is None:
        return exc.message
    return f"{exc.message}: {str(exc.__cause__)[:1000]}"


def classify(exc: anthropic.APIError) -> ApplicationError:
    """The ApplicationError an activity raises for a failed model request."""
    import anthropic  # already loaded: `exc` is one of its errors

    if isinstance(exc, anthropic.APIStatusError):
        return _classify_status(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        return ApplicationError(
            f"the model request to {_host(exc)} timed out", type=MODEL_UNAVAILABLE
        )
    if isinstance(exc, anthropic.APIConnectionError):
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        return ApplicationError(
            f"cannot reach the model server at {_host(exc)}{cause}", type=MODEL_UNAVAILABLE
        )
    # A response the SDK could not read (e.g. a proxy's HTML page): maybe a passing fault.
    return ApplicationError(
        f"unexpected answer from the model server: {exc.message}", type=MODEL_UNAVAILABLE
    )


def _classify_status(exc: anthropic.APIStatusError) -> ApplicationError:
    status = exc.status_code
    detail = _detail(exc)
    if status in _RETRYABLE_4XX or status >= 500:
        summary = _UNAVAILABLE.get(status, "the model server failed")
        return ApplicationError(
            f"{summary} ({detail})",
            type=MODEL_UNAVAILABLE,
            next_retry_delay=retry_after(exc.response.headers),
        )
    summary = _REJECTED.get(status, "the model server rejected the request")
    if status == 404 and (model := _requested_model(exc)):
        summary = f"{summary} (requested {model!r})"
    return ApplicationError(
        f"{summary} ({detail})", type=MODEL_REQUEST_REJECTED, non_retryable=True
    )


def retry_after(headers: Mapping[str, str]) -> timedelta | None:
    """The wait a response asks for: `retry-after-ms`, or `retry-after` in seconds or as
    an HTTP date; None when absent, unreadable or not in the future."""
    lowered = {key.lower(): value for key, value in headers.items()}
    seconds: float | None = None
    if (millis := lowered.get("retry-after-ms")) is not None:
        seconds = _number(millis)
        seconds = seconds / 1000 if seconds is not None else None
    if seconds is None and (value := lowered.get("retry-after")) is not None:
        seconds = _number(value)
        if seconds is None:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                return None
    if seconds is None or seconds <= 0:
        return None
    return min(timedelta(seconds=seconds), MAX_RETRY_AFTER)


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number else None  # NaN is no delay


def _detail(exc: anthropic.APIStatusError) -> str:
    parts = [f"HTTP {exc.status_code}"]
    message = exc.api_message or (exc.body if isinstance(exc.body, str) else None)
    if message:
        parts.append(f": {message.strip()[:500]}")
    if exc.request_id:
        parts.append(f"; request {exc.request_id}")
    return "".join(parts)


def _requested_model(exc: anthropic.APIError) -> str | None:
    try:
        body = json.loads(exc.request.content)
    except (ValueError, TypeError, RuntimeError):
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def _host(exc: anthropic.APIError) -> str:
    url = exc.request.url
    return f"{url.scheme}://{url.netloc.decode()}" if url.netloc else str(url)
