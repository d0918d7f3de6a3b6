"""A tiny synchronous client for the loopworks API, speaking its public models.

Answers are parsed with the models the API serves (`loopworks.api.models`, `schemas/`),
so the CLI reads fields by name and a field renamed on one side fails the other's tests.
Every failure becomes a `CliError` carrying the sentence the API wrote (its 422
`message`, else its `detail`), so the CLI can print it and exit 1.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from httpx_sse import EventSource, connect_sse
from pydantic import TypeAdapter, ValidationError

from loopworks.api.models import (
    ErrorBody,
    RunCreated,
    RunSummary,
    RunWorkspace,
    WorkspaceRemoved,
)
from loopworks.cli.config import TOKEN_VARIABLE, URL_VARIABLE, CliConfig
from loopworks.schemas.events import EVENT, EVENTS, Event
from loopworks.schemas.git_names import redact_url_credentials
from loopworks.schemas.run import RunState

# Updates (pause, approve, clear-block) wait on the workflow; the API gives them 30 s.
REQUEST_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# A live event stream is quiet while a step runs; only the connection has a deadline.
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)

# Methods whose requests carry a body: always JSON, `{}` when there is nothing to say.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

T = TypeVar("T")
STATE: TypeAdapter[RunState] = TypeAdapter(RunState)
RUNS: TypeAdapter[list[RunSummary]] = TypeAdapter(list[RunSummary])
CREATED: TypeAdapter[RunCreated] = TypeAdapter(RunCreated)
WORKSPACE: TypeAdapter[RunWorkspace] = TypeAdapter(RunWorkspace)
REMOVED: TypeAdapter[WorkspaceRemoved] = TypeAdapter(WorkspaceRemoved)


class CliError(Exception):
    """Something the user should read on stderr; the CLI exits 1."""


class Unreachable(CliError):
    """No answer at all (refused, reset, timed out): worth another try when following."""


class ApiError(CliError):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message


def error_message(response: httpx.Response) -> str:
    """The API's own words: `message` (422s), else `detail`, else the body's text."""
    text = ""
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        body = None
    if body is not None:
        detail = body.detail
        if isinstance(detail, list):
            detail = "; ".join(_describe_error(item) for item in detail)
        text = body.message or detail
    if not text:
        text = response.text.strip()[:500] or response.reason_phrase
    if response.status_code == 401:
        text += f" (set {TOKEN_VARIABLE} or pass --token)"
    return text


def _describe_error(item: Mapping[str, Any]) -> str:
    """`body.note: Field required`: FastAPI's and pydantic's errors have the same shape."""
    loc = ".".join(str(part) for part in item.get("loc", ()))
    msg = str(item.get("msg", "invalid"))
    return f"{loc}: {msg}" if loc else msg


def parse(adapter: TypeAdapter[T], data: Any, what: str) -> T:
    """`data` as the API's model, or a CliError saying the answer is not one."""
    try:
        return adapter.validate_python(data)
    except ValidationError as err:
        details = "; ".join(_describe_error(item) for item in err.errors()[:3])
        raise CliError(
            f"unexpected answer for {what} (is the API another version?): {details}"
        ) from err


def parse_event(data: str, what: str) -> Event:
    """One event as the live stream sends it (its JSON)."""
    try:
        return EVENT.validate_json(data)
    except ValidationError as err:
        details = "; ".join(_describe_error(item) for item in err.errors()[:3])
        raise CliError(
            f"unexpected event in {what} (is the API another version?): {details}"
        ) from err


def run_path(run_id: str, *rest: str) -> str:
    return "/".join(["/runs", quote(run_id, safe=""), *rest])


class ApiClient:
    def __init__(self, config: CliConfig, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = config.api_url
        headers = {"Accept": "application/json", "User-Agent": "loops-cli"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        try:
            self._http = httpx.Client(
                base_url=config.api_url,
                headers=headers,
                timeout=REQUEST_TIMEOUT,
                transport=transport,
            )
        except httpx.InvalidURL as err:
            url = redact_url_credentials(config.api_url)
            said = redact_url_credentials(str(err))
            raise CliError(
                f"not a valid API URL: {url} ({said}); check --url or {URL_VARIABLE}"
            ) from err

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        if json is None and method in BODY_METHODS:
            # The API takes changes as JSON only, `{}` for an action that needs nothing
            # (docs/api.md#cross-site-requests).
            json = {}
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as err:
            # LOOPS_API_URL may carry a password (a proxy's basic auth): this sentence is
            # printed, and `loops mcp` hands it to a model.
            where = redact_url_credentials(self.base_url)
            raise Unreachable(
                f"cannot reach the API at {where}: {redact_url_credentials(str(err))}"
            ) from err
        if response.is_error:
            raise ApiError(response.status_code, error_message(response))
        return response

    def json(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        response = self.request(method, path, json=body, params=params, headers=headers)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as err:
            raise CliError(
                f"the API answered {response.request.url.path} with something other than JSON"
            ) from err

    def text_response(self, path: str) -> httpx.Response:
        return self.request("GET", path, headers={"Accept": "text/markdown, text/plain"})

    @contextmanager
    def event_stream(self, run_id: str, last_event_id: int) -> Iterator[EventSource]:
        """The run's live event stream, resumed after `last_event_id` (0: from the start).
        Its errors are raised as they are by `request`; connection failures are not."""
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id else {}
        with connect_sse(
            self._http,
            "GET",
            run_path(run_id, "events"),
            params={"follow": 1},
            headers=headers,
            timeout=STREAM_TIMEOUT,
        ) as source:
            if source.response.is_error:
                source.response.read()
                raise ApiError(source.response.status_code, error_message(source.response))
            yield source

    # --- the runs API ----------------------------------------------------------------

    def create_run(self, body: Mapping[str, Any], idempotency_key: str | None) -> RunCreated:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return parse(CREATED, self.json("POST", "/runs", body=body, headers=headers), "new run")

    def run_state(self, run_id: str) -> RunState:
        return parse(STATE, self.json("GET", run_path(run_id)), f"run {run_id}")

    def message(self, run_id: str, action: str, body: Any = None) -> RunState:
        """stop, clear-block, pause, resume, approve: each answers the run's state."""
        answer = self.json("POST", run_path(run_id, action), body=body)
        return parse(STATE, answer, f"{action} of run {run_id}")

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        answer = self.json("GET", run_path(run_id, "events"), params={"after": after})
        return parse(EVENTS, answer, f"the events of run {run_id}")

    def list_runs(
        self, limit: int = 50, status: str | None = None, alias: str | None = None
    ) -> list[RunSummary]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if alias:
            params["alias"] = alias
        return parse(RUNS, self.json("GET", "/runs", params=params), "the list of runs")

    def workspace(self, run_id: str) -> RunWorkspace:
        answer = self.json("GET", run_path(run_id, "workspace"))
        return parse(WORKSPACE, answer, f"the workspace of run {run_id}")

    def remove_workspace(self, run_id: str) -> WorkspaceRemoved:
        answer = self.json("DELETE", run_path(run_id, "workspace"))
        return parse(REMOVED, answer, f"removing the workspace of run {run_id}")
