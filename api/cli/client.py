"""A tiny synchronous client for the loopworks API.

Every failure becomes a `CliError` carrying the sentence the API wrote (its 422
`message`, else its `detail`), so the CLI can print it and exit 1.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx

from loopworks.api.cli.config import CliConfig

# Updates (pause, approve, clear-block) wait on the workflow; the API gives them 30 s.
REQUEST_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# A live event stream is quiet while a step runs; only the connection has a deadline.
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)


class CliError(Exception):
    """Something the user should read on stderr; the CLI exits 1."""


class ApiError(CliError):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message


def error_message(response: httpx.Response) -> str:
    """The API's own words: `message` (422s), else `detail`, else the body's text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    text = ""
    if isinstance(body, Mapping):
        found = body.get("message") or body.get("detail")
        if isinstance(found, list):
            found = "; ".join(_describe_error(item) for item in found)
        text = str(found or "")
    if not text:
        text = response.text.strip()[:500] or response.reason_phrase
    if response.status_code == 401:
        text += " (set LOOPS_API_TOKEN or pass --token)"
    return text


def _describe_error(item: Any) -> str:
    if not isinstance(item, Mapping):
        return str(item)
    loc = ".".join(str(part) for part in item.get("loc", ()))
    msg = str(item.get("msg", "invalid"))
    return f"{loc}: {msg}" if loc else msg


def run_path(run_id: str, *rest: str) -> str:
    return "/".join(["/runs", quote(run_id, safe=""), *rest])


class ApiClient:
    def __init__(self, config: CliConfig, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = config.api_url
        headers = {"Accept": "application/json", "User-Agent": "loops-cli"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._http = httpx.Client(
            base_url=config.api_url, headers=headers, timeout=REQUEST_TIMEOUT, transport=transport
        )

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
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as err:
            raise CliError(f"cannot reach the API at {self.base_url}: {err}") from err
        if response.is_error:
            raise ApiError(response.status_code, error_message(response))
        return response

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return _json(self.request("GET", path, params=params))

    def post_json(
        self, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Any:
        return _json(self.request("POST", path, json=body, headers=headers))

    def get_text(self, path: str) -> str:
        return self.request("GET", path, headers={"Accept": "text/markdown, text/plain"}).text

    @contextmanager
    def stream(
        self, path: str, params: Mapping[str, Any], headers: Mapping[str, str]
    ) -> Iterator[httpx.Response]:
        """An open streaming response; its errors are raised as they are by `request`."""
        with self._http.stream(
            "GET", path, params=params, headers=headers, timeout=STREAM_TIMEOUT
        ) as response:
            if response.is_error:
                response.read()
                raise ApiError(response.status_code, error_message(response))
            yield response

    # --- the runs API ----------------------------------------------------------------

    def run_state(self, run_id: str) -> dict[str, Any]:
        state = self.get_json(run_path(run_id))
        if not isinstance(state, dict):
            raise CliError(f"unexpected answer for run {run_id}: {state!r}")
        return state

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        events = self.get_json(run_path(run_id, "events"), params={"after": after})
        if not isinstance(events, list):
            raise CliError(f"unexpected events answer for run {run_id}: {events!r}")
        return [event for event in events if isinstance(event, dict)]

    def list_runs(self, limit: int = 50, status: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        runs = self.get_json("/runs", params=params)
        if not isinstance(runs, list):
            raise CliError(f"unexpected list answer: {runs!r}")
        return [run for run in runs if isinstance(run, dict)]


def _json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError as err:
        raise CliError(
            f"the API answered {response.request.url.path} with something other than JSON"
        ) from err
