"""Finding: the origin policy resolved an origin's host and judged its addresses, then git
(and a webhook's POST) resolved the name again itself. A DNS server that answers a public
address to the check and 127.0.0.1 or 169.254.169.254 to git (rebinding) sent git where
the policy refuses.

Now what connects over http(s) is pinned to the addresses the check admitted: git is
given `-c http.curloptResolve=<host>:<port>:<addresses>` on every command that reaches an
origin, and a webhook is connected to a checked address with the host's name kept in the
Host header and TLS (SECURITY.md, "Origins a deployment allows").

The proof: a name the system cannot resolve (`rebind.invalid`) that the check's resolver
finds at 127.0.0.1, where a real git smart-HTTP server and a real webhook receiver listen.
git and httpx reach them only if they connect where the check said, never asking DNS."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from loopworks.activities import notification
from loopworks.activities.notification import NotificationActivities
from loopworks.playbook.store import PlaybookStore
from loopworks.schemas.notify import (
    Notification,
    NotificationBody,
    NotifyEvent,
    NotifyTarget,
    Webhook,
)
from loopworks.schemas.playbook import Playbook
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_deps
from loopworks.workspace import origin_access
from loopworks.workspace.configured import workspaces_for
from loopworks.workspace.origin_access import OriginRefusedError, check_origin
from tests.integration.stack import bare_remote, git
from tests.security.git_http_server import GitHttpServer, git_http_server

HOST = "rebind.invalid"
WHEN = datetime(2024, 5, 1, tzinfo=UTC)
NETWORK = ("clone", "fetch", "push", "ls-remote")


def _at_loopback(host: str, port: int | None) -> tuple[str, ...]:
    """The check's resolver: finds `rebind.invalid` where the system finds nothing."""
    return ("127.0.0.1",) if host == HOST else ()


@pytest.fixture
def pinned_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(origin_access, "resolve", _at_loopback)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitHttpServer]:
    bare_remote(tmp_path / "served")  # served/remote.git
    with git_http_server(tmp_path / "served") as server:
        yield server


def _settings(tmp_path: Path, name: str, port: int, **extra: str) -> Settings:
    return Settings(
        LOOPS_DATA_DIR=tmp_path / name,
        LOOPS_ALLOWED_SCHEMES="https,http",
        LOOPS_ALLOWED_ORIGINS=f"{HOST}:{port}",
        **extra,
    )


def _network_commands(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every git command line run that reaches a remote, as the runner logs it."""
    found = []
    for record in caplog.records:
        line = record.getMessage()
        if line.startswith("git: ") and any(f" {word} " in line for word in NETWORK):
            found.append(line)
    return found


@pytest.mark.integration
@pytest.mark.usefixtures("pinned_resolver")
def test_git_reaches_an_http_origin_only_at_the_addresses_the_check_admitted(
    tmp_path: Path, served: GitHttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="loopworks.workspace.runner")
    origin = f"http://{HOST}:{served.port}/remote.git"
    store = PlaybookStore.of(workspaces_for(_settings(tmp_path, "data", served.port)))

    branch, base = store.resolve_base(origin, None)  # ls-remote
    assert branch == "main"
    workdir = store.checkout("run-1", origin, base)  # clone
    (workdir / "notes.txt").write_text("pinned\n")
    commit = store.commit(workdir, "notes", WHEN)
    store.publish(workdir, "run-1", commit)  # push to the clone's origin
    assert store.push_branch(workdir, "task", commit) == commit  # push, ls-remote
    # A reader without a clone: origin's cache is fetched.
    assert store.read_files("run-2", origin, commit, ["notes.txt"]) == {"notes.txt": "pinned\n"}
    # A commit the run's clone lacks: fetched into it.
    scratch = tmp_path / "served" / "scratch"
    git("pull", "--quiet", "origin", "task", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", "more", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/task", cwd=scratch)
    later = git("rev-parse", "HEAD", cwd=scratch).strip()
    assert (store.checkout("run-1", origin, later) / "notes.txt").exists()  # fetch
    # A call record: pushed from a scratch repository.
    store.record_call(origin, "run-1", "01-plan-001", "{}\n", WHEN)
    assert store.call_records(origin, "run-1") == {"01-plan-001": "{}\n"}
    # Playbook versions: pushed with a lease, and fetched by another writer.
    store.write_version(origin, Playbook(name="p", version=1), "b1", "a person", WHEN)
    other = PlaybookStore.of(workspaces_for(_settings(tmp_path, "other", served.port)))
    other.write_version(origin, Playbook(name="p", version=2), "b2", "a person", WHEN)
    assert store.current(origin, "p") == Playbook(name="p", version=2)

    commands = _network_commands(caplog)
    pin = f"-c http.curloptResolve={HOST}:{served.port}:127.0.0.1 "
    remote = [c for c in commands if "-pack=" not in c]  # not a fetch between local clones
    assert {word for c in remote for word in NETWORK if f" {word} " in c} == set(NETWORK)
    assert all(pin in c for c in remote), [c for c in remote if pin not in c]
    # git asked for the name, at the address the check gave it.
    assert served.hosts and set(served.hosts) == {f"{HOST}:{served.port}"}


@pytest.mark.integration
def test_ls_remote_and_a_cache_fetch_look_the_origin_up_once(
    tmp_path: Path, served: GitHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The address the check admits is the one git is pinned to: one lookup for the
    command, not an early check and then the pin's (docs/workspace.md#reaching-an-origin)."""
    lookups: list[str] = []

    def counted(host: str, port: int | None) -> tuple[str, ...]:
        lookups.append(host)
        return _at_loopback(host, port)

    monkeypatch.setattr(origin_access, "resolve", counted)
    origin = f"http://{HOST}:{served.port}/remote.git"
    store = PlaybookStore.of(workspaces_for(_settings(tmp_path, "data", served.port)))
    branch, base = store.resolve_base(origin, None)  # ls-remote
    assert (branch, lookups) == ("main", [HOST])
    assert store.resolve_base(origin, "main")[1] == base and lookups == [HOST] * 2
    # A reader without a clone: origin's cache is fetched.
    read = store.read_files("run-1", origin, base, ["README.md"])
    assert read == {"README.md": "# demo project\n"} and lookups == [HOST] * 3
    # Checked all the same: a host the deployment does not allow is refused, unasked.
    refused = f"http://{HOST}.other:{served.port}/remote.git"
    for reach in (
        lambda: store.resolve_base(refused, None),
        lambda: store.resolve_base(refused, "main"),
        lambda: store.read_files("run-2", refused, base, ["README.md"]),
    ):
        with pytest.raises(OriginRefusedError, match="refused"):
            reach()
    assert served.hosts == [f"{HOST}:{served.port}"] * len(served.hosts)


@pytest.mark.unit
def test_the_pin_names_the_origins_host_port_and_every_address_the_check_admitted() -> None:
    """A rebinding name: the check sees public addresses, so git is held to them."""
    rules = Settings(LOOPS_ALLOWED_ORIGINS="", LOOPS_ALLOWED_SCHEMES="https,ssh").origin_rules()

    def public(host: str, port: int | None) -> tuple[str, ...]:
        return ("140.82.112.3", "2606:4700::1")

    pinned = check_origin("https://Git.Example/acme/app.git", rules, public)
    resolve = "http.curloptResolve=git.example:443:140.82.112.3,[2606:4700::1]"
    assert pinned == ("-c", resolve)
    # ssh resolves the name itself: nothing to pin it with.
    assert check_origin("ssh://git@git.example/acme/app.git", rules, public) == ()
    # A URL naming an address: nothing to look up.
    assert check_origin("https://140.82.112.3:8443/r.git", rules, public) == ()


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[str]]]:
    hosts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            hosts.append(self.headers["Host"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], hosts
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
@pytest.mark.usefixtures("pinned_resolver")
async def test_a_webhook_is_posted_to_the_address_the_check_admitted(
    tmp_path: Path, receiver: tuple[int, list[str]]
) -> None:
    port, hosts = receiver
    settings = _settings(tmp_path, "data", port, LOOPS_NOTIFY_SECRET="s" * 32)
    event = NotifyEvent.COMPLETED
    body = NotificationBody(kind="run", id="r-1", event=event, status="done", at=WHEN.isoformat())
    webhook = Webhook(url=f"http://{HOST}:{port}/hook")
    sent = Notification(body=body, target=NotifyTarget(webhook=webhook), key="k-1")
    activities = NotificationActivities(build_deps(settings))
    outcome = await ActivityEnvironment().run(activities.send_notification, sent)
    assert outcome.status_code == 200
    assert hosts == [f"{HOST}:{port}"]


@pytest.mark.unit
async def test_a_pinned_https_webhook_keeps_its_name_for_tls() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        url = "https://hooks.example:8443/services/x"
        sent = await notification._post(client, url, ("93.184.215.14",), b"{}", {"X-A": "1"})
    assert sent.status_code == 204
    (request,) = seen
    assert request.url == httpx.URL("https://93.184.215.14:8443/services/x")
    assert request.headers["Host"] == "hooks.example:8443"
    # httpcore's TLS names this host: the server name sent and the certificate checked.
    assert request.extensions["sni_hostname"] == "hooks.example"
