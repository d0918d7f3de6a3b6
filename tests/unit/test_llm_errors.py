"""Which provider errors Temporal retries, and what a person reads when one does not.

The exceptions are the SDK's own, built from real httpx2 requests and responses the way
the client builds them, so a change in the SDK's error classes shows up here.
"""

from __future__ import annotations

import email.utils
import time
from datetime import timedelta
from typing import Any

import anthropic
import httpx2
import pytest
from pydantic_ai.exceptions import (
    ModelAPIError,
    OutputTokenLimitExceeded,
    UnexpectedModelBehavior,
)
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from loopworks.llm.base import InvalidOutput
from loopworks.llm.errors import (
    MAX_RETRY_AFTER,
    MODEL_REQUEST_REJECTED,
    MODEL_UNAVAILABLE,
    classify,
    model_errors,
    retry_after,
)
from loopworks.schemas.roles import Role

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:9/v1/messages"


def request(model: str = "claude-test") -> httpx2.Request:
    return httpx2.Request("POST", URL, json={"model": model, "max_tokens": 16, "messages": []})


def status_error(
    error_class: type[anthropic.APIStatusError],
    status: int,
    message: str = "server says no",
    headers: dict[str, str] | None = None,
) -> anthropic.APIStatusError:
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": "some_error", "message": message},
        "request_id": "req_123",
    }
    response = httpx2.Response(
        status, json=body, headers={"request-id": "req_123", **(headers or {})}, request=request()
    )
    return error_class(f"Error code: {status} - {body}", response=response, body=body)


# status, the SDK's class for it, retried by Temporal?, what the message starts with
STATUSES = [
    (400, anthropic.BadRequestError, False, "invalid request"),
    (401, anthropic.AuthenticationError, False, "authentication failed: check ANTHROPIC_API_KEY"),
    (402, anthropic.PaymentRequiredError, False, "billing problem"),
    (403, anthropic.PermissionDeniedError, False, "permission denied"),
    (404, anthropic.NotFoundError, False, "model not found: check LOOPS_MODEL_*"),
    (408, anthropic.RequestTimeoutError, True, "the model server timed out the request"),
    (409, anthropic.ConflictError, True, "the model server reported a conflict"),
    (413, anthropic.ContentTooLargeError, False, "request too large"),
    (422, anthropic.UnprocessableEntityError, False, "invalid request"),
    (429, anthropic.RateLimitError, True, "rate limited"),
    (500, anthropic.InternalServerError, True, "the model server failed"),
    (502, anthropic.InternalServerError, True, "the model server failed"),
    (503, anthropic.ServiceUnavailableError, True, "the model server failed"),
    (529, anthropic.OverloadedError, True, "the model server is overloaded"),
]


@pytest.mark.parametrize(
    ("status", "error_class", "retried", "summary"), STATUSES, ids=[str(s[0]) for s in STATUSES]
)
def test_status_codes_are_classified(
    status: int, error_class: type[anthropic.APIStatusError], retried: bool, summary: str
) -> None:
    err = classify(status_error(error_class, status))

    assert isinstance(err, ApplicationError)
    assert err.non_retryable is not retried
    assert err.type == (MODEL_UNAVAILABLE if retried else MODEL_REQUEST_REJECTED)
    assert err.message.startswith(summary)
    # The server's own words and the request id travel with it, for a support ticket.
    assert f"HTTP {status}: server says no" in err.message
    assert "request req_123" in err.message
    assert err.next_retry_delay is None


def test_the_sdk_maps_statuses_to_the_classes_the_table_names() -> None:
    """Guard the table above: it must use the classes the client really raises."""
    client = anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0)
    for status, error_class, _, _ in STATUSES:
        response = httpx2.Response(status, json={"error": {}}, request=request())
        assert type(client._make_status_error_from_response(response)) is error_class


def test_other_4xx_fail_without_retry() -> None:
    err = classify(status_error(anthropic.APIStatusError, 418, "teapot"))
    assert err.non_retryable and err.type == MODEL_REQUEST_REJECTED
    assert err.message.startswith("the model server rejected the request (HTTP 418: teapot")


def test_not_found_names_the_requested_model() -> None:
    err = classify(status_error(anthropic.NotFoundError, 404, "model: claude-nope"))
    assert "(requested 'claude-test')" in err.message


def test_invalid_request_carries_the_servers_message() -> None:
    err = classify(status_error(anthropic.BadRequestError, 400, "tools.0.input_schema: invalid"))
    assert err.message == (
        "invalid request (HTTP 400: tools.0.input_schema: invalid; request req_123)"
    )


def test_a_plain_text_error_body_is_shown() -> None:
    response = httpx2.Response(502, text="Bad gateway from the proxy", request=request())
    exc = anthropic.InternalServerError(
        "Bad gateway from the proxy", response=response, body="Bad gateway from the proxy"
    )
    err = classify(exc)
    assert not err.non_retryable
    assert err.message == "the model server failed (HTTP 502: Bad gateway from the proxy)"


@pytest.mark.parametrize(
    ("error_class", "status"),
    [
        (anthropic.RateLimitError, 429),
        (anthropic.OverloadedError, 529),
        (anthropic.ServiceUnavailableError, 503),
    ],
)
def test_retry_after_becomes_the_next_retry_delay(
    error_class: type[anthropic.APIStatusError], status: int
) -> None:
    err = classify(status_error(error_class, status, headers={"retry-after": "7"}))
    assert not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=7)


def test_a_rejected_request_ignores_retry_after() -> None:
    err = classify(status_error(anthropic.AuthenticationError, 401, headers={"retry-after": "7"}))
    assert err.non_retryable and err.next_retry_delay is None


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "1"}, timedelta(seconds=1)),
        ({"Retry-After": "2.5"}, timedelta(seconds=2.5)),
        ({"retry-after-ms": "1500", "retry-after": "9"}, timedelta(seconds=1.5)),
        ({"retry-after-ms": "soon", "retry-after": "9"}, timedelta(seconds=9)),
        ({"retry-after": "0"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "whenever"}, None),
        ({"retry-after": http_date(-60)}, None),
        ({"retry-after": "86400"}, MAX_RETRY_AFTER),
        ({"retry-after": http_date(86400)}, MAX_RETRY_AFTER),
    ],
)
def test_retry_after_header_forms(headers: dict[str, str], expected: timedelta | None) -> None:
    assert retry_after(headers) == expected


def test_retry_after_as_an_http_date() -> None:
    delay = retry_after({"retry-after": http_date(30)})
    assert delay is not None
    assert timedelta(seconds=28) <= delay <= timedelta(seconds=30)


def test_connection_errors_and_timeouts_are_retried() -> None:
    refused = anthropic.APIConnectionError(request=request())
    refused.__cause__ = ConnectionRefusedError("connection refused")
    err = classify(refused)
    assert not err.non_retryable and err.type == MODEL_UNAVAILABLE
    assert err.message == "cannot reach the model server at http://127.0.0.1:9: connection refused"

    timed_out = classify(anthropic.APITimeoutError(request=request()))
    assert not timed_out.non_retryable and timed_out.type == MODEL_UNAVAILABLE
    assert timed_out.message == "the model request to http://127.0.0.1:9 timed out"


def test_temporal_carries_the_delay_and_the_verdict_to_the_server() -> None:
    """What the worker sends when the activity raises: the failure the retry policy reads."""
    converter = DataConverter.default
    failure = Failure()
    retried = classify(status_error(anthropic.RateLimitError, 429, headers={"retry-after": "3"}))
    converter.failure_converter.to_failure(retried, converter.payload_converter, failure)
    info = failure.application_failure_info
    assert info.type == MODEL_UNAVAILABLE and not info.non_retryable
    assert info.next_retry_delay.ToTimedelta() == timedelta(seconds=3)

    failure = Failure()
    rejected = classify(status_error(anthropic.AuthenticationError, 401))
    converter.failure_converter.to_failure(rejected, converter.payload_converter, failure)
    assert failure.application_failure_info.non_retryable
    assert failure.message.startswith("authentication failed: check ANTHROPIC_API_KEY")


# --- what a failed pydantic-ai run becomes ----------------------------------------------


def wrapped(cause: BaseException | None) -> ModelAPIError:
    """pydantic-ai's error for a failed request, the SDK's exception as its cause."""
    error = ModelAPIError("claude-test", "the request failed")
    error.__cause__ = cause
    return error


def raised_by(exc: BaseException) -> BaseException:
    with pytest.raises(Exception) as caught, model_errors(Role.PLANNER):
        raise exc
    return caught.value


def test_a_failed_request_is_classified_by_the_sdks_error() -> None:
    cause = status_error(anthropic.RateLimitError, 429, headers={"retry-after": "7"})
    err = raised_by(wrapped(cause))
    assert isinstance(err, ApplicationError)
    assert err.type == MODEL_UNAVAILABLE and not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=7)
    assert err.__cause__ is not None and err.__cause__.__cause__ is cause

    rejected = raised_by(wrapped(status_error(anthropic.AuthenticationError, 401)))
    assert isinstance(rejected, ApplicationError)
    assert rejected.type == MODEL_REQUEST_REJECTED and rejected.non_retryable


def test_a_failed_request_without_the_sdks_error_is_retried() -> None:
    err = raised_by(wrapped(None))
    assert isinstance(err, ApplicationError)
    assert err.type == MODEL_UNAVAILABLE and not err.non_retryable
    assert err.message == "the model request failed: the request failed"


def test_the_sdks_own_error_is_classified_too() -> None:
    err = raised_by(status_error(anthropic.NotFoundError, 404))
    assert isinstance(err, ApplicationError) and err.non_retryable
    assert err.message.startswith("model not found")


def test_an_answer_cut_off_at_the_token_limit_is_invalid_output() -> None:
    err = raised_by(OutputTokenLimitExceeded("Model token limit (16) exceeded"))
    assert isinstance(err, InvalidOutput) and err.role == Role.PLANNER
    assert "LOOPS_ANTHROPIC_MAX_TOKENS" in err.detail


def test_an_answer_still_invalid_after_its_repair_is_invalid_output() -> None:
    behaviour = UnexpectedModelBehavior("Exceeded maximum output retries (1)")
    behaviour.__cause__ = ValueError("steps: Field required")
    err = raised_by(behaviour)
    assert isinstance(err, InvalidOutput)
    assert err.detail == "Exceeded maximum output retries (1): steps: Field required"
    assert str(err).startswith("planner answered with invalid output: Exceeded")


def test_other_errors_pass_through_unchanged() -> None:
    failure = ApplicationError("already classified", non_retryable=True)
    assert raised_by(failure) is failure
    bug = KeyError("a bug")
    assert raised_by(bug) is bug
