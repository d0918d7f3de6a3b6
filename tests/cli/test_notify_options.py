"""`loops new --notify` and `loops graph new --notify` against the real API app (over a fake
Temporal): the request carries the webhooks and events, the started workflow's plan holds
them, and a webhook the deployment refuses is the API's 422, printed as the CLI prints
every failure (docs/notifications.md#asking-for-them)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.cli import app, commands
from loopworks.cli.app import build_parser, main
from loopworks.cli.client import ApiClient, CliError
from loopworks.cli.config import CliConfig
from loopworks.schemas.notify import NotifyEvent, WebhookFormat
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient

pytestmark = pytest.mark.unit

HOOK = "https://hooks.example.com/loops"
SLACK = "https://hooks.example.com/services/T0/B0/XXXX"
CONFIG = CliConfig("http://api.test", None)


class Service:
    """The API app, reached through an httpx transport: every request the CLI sends is
    kept, and answered by the app."""

    def __init__(self, fake: FakeClient, http: TestClient) -> None:
        self.fake = fake
        self.http = http
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.http.request(
            request.method,
            request.url.raw_path.decode(),
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            content=request.read(),
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def client(self) -> ApiClient:
        return ApiClient(CONFIG, transport=httpx.MockTransport(self))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_NOTIFY_SECRET="a-secret",
        # Named, so no name is resolved: only this host is admitted.
        LOOPS_ALLOWED_ORIGINS="hooks.example.com",
    )
    fake = FakeClient()
    with TestClient(
        create_app(settings, client=cast(Client, fake)), base_url="http://localhost"
    ) as http:
        yield Service(fake, http)


def run(argv: list[str], service: Service) -> tuple[int, str]:
    args = build_parser().parse_args(argv)
    out = io.StringIO()
    ctx = commands.Context(CONFIG, service.client(), out=out, stdin=io.StringIO())
    return args.handler(ctx, args), out.getvalue()


def sent(service: Service) -> Any:
    return json.loads(service.requests[-1].content)


NOTIFY = ["--notify", HOOK, "--notify", f"slack:{SLACK}", "--notify-events", "blocked, completed"]
ASKED = {
    "webhooks": [{"url": HOOK, "format": "json"}, {"url": SLACK, "format": "slack"}],
    "events": ["blocked", "completed"],
}


@pytest.mark.parametrize(
    ("argv", "route"),
    [
        (["new", "Write a guide", "--auto"], "/runs"),
        (["graph", "new", "A goal", "--auto"], "/graphs"),
    ],
)
def test_new_asks_for_notifications_and_the_workflow_gets_them(
    service: Service, argv: list[str], route: str
) -> None:
    code, _ = run([*argv, *NOTIFY], service)
    assert code == 0
    assert service.requests[-1].url.path == route
    assert sent(service)["notify"] == ASKED
    (start,) = service.fake.starts
    plan = start["params"].notify
    assert [(w.url, w.format) for w in plan.webhooks] == [
        (HOOK, WebhookFormat.JSON),
        (SLACK, WebhookFormat.SLACK),
    ]
    assert plan.events == [NotifyEvent.BLOCKED, NotifyEvent.COMPLETED]


def test_without_events_every_event_is_asked_for(service: Service) -> None:
    run(["new", "Write a guide", "--auto", "--notify", HOOK], service)
    assert sent(service)["notify"] == {"webhooks": [{"url": HOOK, "format": "json"}]}
    assert service.fake.starts[0]["params"].notify.events == list(NotifyEvent)


def test_events_without_a_webhook_are_refused_before_any_request(service: Service) -> None:
    with pytest.raises(CliError, match="--notify-events needs --notify"):
        run(["new", "t", "--auto", "--notify-events", "blocked"], service)
    assert not service.requests


@pytest.mark.parametrize("command", [["new", "t"], ["graph", "new", "g"]])
def test_a_refused_webhook_is_printed_as_the_apis_422(
    service: Service,
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(app, "ApiClient", lambda config: service.client())
    argv = [*command, "--auto", "--notify", "https://internal.example/hook"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("loops: HTTP 422: "), err
    assert "notify.webhooks.0.url" in err and "webhook not allowed" in err, err
    assert "LOOPS_ALLOWED_ORIGINS" in err, err
    assert not service.fake.starts


def test_an_unknown_event_is_the_apis_422_naming_the_events(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(app, "ApiClient", lambda config: service.client())
    assert main(["new", "t", "--auto", "--notify", HOOK, "--notify-events", "done"]) == 1
    err = capsys.readouterr().err
    assert "notify.events.0" in err and "'blocked'" in err, err
