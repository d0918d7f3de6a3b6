"""How failures become HTTP responses.

Anything a client sent maps to 4xx with a sentence naming what to fix; Temporal being
down or slow maps to 503/504, so a 500 only ever means a bug in loopworks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from temporalio.client import RPCTimeoutOrCancelledError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loopworks.checks.redaction import redacted, worker_secrets

log = logging.getLogger("loopworks.api")


class ApiError(Exception):
    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})
        # Fields the body carries beside `detail`.
        self.fields: dict[str, Any] = {}


class Unauthorized(ApiError):
    """No bearer token, or not one of LOOPS_API_TOKENS (RFC 6750's challenge says which)."""

    status_code = status.HTTP_401_UNAUTHORIZED

    def __init__(self, message: str, challenge: str = "Bearer") -> None:
        super().__init__(message, headers={"WWW-Authenticate": challenge})


class Forbidden(ApiError):
    """A valid token that may not do this (a read-only token sending a change)."""

    status_code = status.HTTP_403_FORBIDDEN


class QuotaExceeded(ApiError):
    """A cap or limit the operator set is reached: the message names it and its setting,
    and so do the body's `limit` and `left` (what is left of it: 0 of a cap)."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS

    def __init__(
        self, message: str, retry_after_s: int, limit: str | None = None, left: float = 0
    ) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})
        if limit is not None:
            self.fields = {"limit": limit, "left": left}


class RunNotFound(ApiError):
    status_code = status.HTTP_404_NOT_FOUND
    kind = "run"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"{self.kind} {run_id} not found")


class GraphNotFound(RunNotFound):
    """A graph's routes asked for an id that is no graph of ours."""

    kind = "graph"


class TaskNotFound(ApiError):
    """A graph has no task of that id."""

    status_code = status.HTTP_404_NOT_FOUND

    def __init__(self, graph_id: str, task_id: str) -> None:
        super().__init__(f"graph {graph_id} has no task {task_id}")


class NotApplicable(ApiError):
    """A message that does not fit the run's state (stop a finished run, clear an unblocked one)."""

    status_code = status.HTTP_409_CONFLICT


class ArtifactMissing(ApiError):
    status_code = status.HTTP_404_NOT_FOUND


class TemporalUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE

    def __init__(self, message: str = "Temporal is unreachable") -> None:
        super().__init__(message)


class TemporalBusy(ApiError):
    """Temporal turned the request away for now (RESOURCE_EXHAUSTED): a run's query
    buffer is full while it works through a task, or a namespace's rate limit is hit."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    RETRY_AFTER_SECONDS = 1

    def __init__(self, what: str = "the request") -> None:
        super().__init__(
            f"Temporal is turning {what} away for now (too many at once): try again shortly",
            headers={"Retry-After": str(self.RETRY_AFTER_SECONDS)},
        )


class StateUnavailable(ApiError):
    """The run exists but nothing can tell its state now (no worker answers its queries)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE


class UpstreamError(ApiError):
    """Temporal or a git origin failed in a way the client could not have caused."""

    status_code = status.HTTP_502_BAD_GATEWAY


def invalid(
    field: str, message: str, value: Any = None, where: str = "body"
) -> RequestValidationError:
    """A 422 in exactly FastAPI's shape, for checks pydantic cannot make (catalog, disk)."""
    return RequestValidationError(
        [{"type": "value_error", "loc": (where, field), "msg": message, "input": value}]
    )


def describe_errors(errors: Iterable[Mapping[str, Any]]) -> str:
    """`body.max_iterations: Input should be ...`, one clause per error."""
    parts: list[str] = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        text = str(error.get("msg", "invalid"))
        if error.get("type") == "json_invalid":
            # The location's second element is a character offset, not a field.
            reason = (error.get("ctx") or {}).get("error")
            offset = f" at position {loc[1]}" if len(loc) > 1 else ""
            parts.append(f"body: malformed JSON{offset}" + (f" ({reason})" if reason else ""))
            continue
        parts.append(f"{'.'.join(loc)}: {text}" if loc else text)
    return "; ".join(parts)


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    # (A body sent as anything but JSON never gets here: api/same_origin.py answers 415.)
    message = describe_errors(errors)
    detail = [
        {**error, "input": _echoed(error["input"])} if "input" in error else error
        for error in jsonable_encoder(errors)
    ]
    # What was sent comes back redacted like any answer: a pasted token, a URL's password.
    content = redacted({"detail": detail, "message": message}, worker_secrets())
    return JSONResponse(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, content=content)


# FastAPI echoes each invalid value whole (for a missing field, the whole body): a 3 MB
# task came back as a 3 MB 422. What was sent is the client's; a glimpse says which.
ECHO_CHARS = 300


def _echoed(value: Any) -> Any:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, allow_nan=False)
        except ValueError:
            # NaN or Infinity, which Python's parser reads but JSON has no number for:
            # echoed as the text sent, since a response cannot hold them.
            text = value = json.dumps(value)
    if len(text) <= ECHO_CHARS:
        return value
    return f"{text[:ECHO_CHARS]}… ({len(text)} characters in all)"


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(
        status_code=exc.status_code,
        content=redacted({"detail": exc.message, **exc.fields}, worker_secrets()),
        headers=exc.headers or None,
    )


_RPC_STATUS = {
    RPCStatusCode.UNAVAILABLE: (status.HTTP_503_SERVICE_UNAVAILABLE, "Temporal is unreachable"),
    RPCStatusCode.DEADLINE_EXCEEDED: (
        status.HTTP_504_GATEWAY_TIMEOUT,
        "Temporal did not answer in time",
    ),
    # The SDK reports its own rpc_timeout expiring as CANCELLED ("Timeout expired").
    RPCStatusCode.CANCELLED: (status.HTTP_504_GATEWAY_TIMEOUT, "Temporal did not answer in time"),
}


# How Temporal refuses a workflow's input, or a message, over its payload limit (2 MB by
# default): what the client sent is too large, which no retry mends.
_OVER_BLOB_LIMIT = "Blob data size exceeds limit"
TOO_LARGE_FOR_TEMPORAL = (
    "the request is more than Temporal holds in one workflow input or message (2 MB by "
    "default): send less (fewer or shorter criteria, rules or tasks, a smaller prep package)"
)


async def _rpc_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RPCError)
    if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return await _api_error(request, TemporalBusy())
    if exc.status == RPCStatusCode.INVALID_ARGUMENT and _OVER_BLOB_LIMIT in exc.message:
        return JSONResponse(
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            content={"detail": TOO_LARGE_FOR_TEMPORAL},
        )
    code, message = _RPC_STATUS.get(
        exc.status, (status.HTTP_502_BAD_GATEWAY, f"Temporal error: {exc.message}")
    )
    log.warning(
        "%s %s: Temporal RPC failed: %s %s",
        request.method,
        request.url.path,
        exc.status.name,
        exc.message,
    )
    return JSONResponse(status_code=code, content={"detail": message})


async def _rpc_timeout(request: Request, exc: Exception) -> JSONResponse:
    # Updates and queries wait on a worker; with none polling the call times out here.
    return JSONResponse(
        status_code=status.HTTP_504_GATEWAY_TIMEOUT,
        content={"detail": "Temporal did not answer in time (is a worker running?)"},
    )


async def _already_started(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        status_code=status.HTTP_409_CONFLICT,
        content={"detail": "a run with this id already exists; retry to get a new id"},
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RPCError, _rpc_error)
    app.add_exception_handler(RPCTimeoutOrCancelledError, _rpc_timeout)
    app.add_exception_handler(WorkflowAlreadyStartedError, _already_started)
