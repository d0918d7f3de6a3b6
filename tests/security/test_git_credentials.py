"""Finding: the git token went to any host. The image's GIT_ASKPASS helper answered every
prompt with GIT_USERNAME/GIT_TOKEN, so a run naming `http://attacker/r.git` handed the
attacker the deployment's token, over plain http, from the worker and from the API.

Now a credential is answered only by loopworks' own helper, only over https, only to the
host it was configured for; every other source git has (askpass programs, other helpers,
a repository's or the user's config) is off for the git processes loopworks runs. A
credential-seeking server (401 + `WWW-Authenticate: Basic` to everything) is asked by the
real git paths the worker and the API take and must receive nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopworks.schemas.git_credentials import (
    GitCredential,
    credential_for,
    parse_credentials,
)
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.git_credential import answer
from loopworks.workspace.runner import GitError
from tests.security.credential_seeker import Seeker, credential_seeker, self_signed

TOKEN = "ghp_deployment_token_0123456789"
OTHER_TOKEN = "glpat-other_host_token_987654"
COMMIT = "0" * 40

# What deploy/Dockerfile used to install as GIT_ASKPASS, word for word.
OLD_ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf "%s\\n" "${GIT_USERNAME:-x-access-token}" ;;
  *) printf "%s\\n" "${GIT_TOKEN:-}" ;;
esac
"""


@pytest.fixture
def seeker() -> Iterator[Seeker]:
    with credential_seeker() as server:
        yield server


@pytest.fixture
def image_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seeker: Seeker) -> None:
    """Every credential source the old image and a developer's machine give git: the old
    askpass helper with GIT_TOKEN, SSH_ASKPASS, a global `credential.helper=store` holding
    a token for the seeker's own host, and the env-configured helper the old secrets example
    suggested."""
    askpass = tmp_path / "askpass"
    askpass.write_text(OLD_ASKPASS)
    askpass.chmod(0o755)
    store = tmp_path / "git-credentials"
    store.write_text(f"http://stored:{OTHER_TOKEN}@{seeker.host}\n")
    global_config = tmp_path / "gitconfig"
    global_config.write_text(f"[credential]\n\thelper = store --file={store}\n")
    monkeypatch.setenv("GIT_ASKPASS", str(askpass))
    monkeypatch.setenv("SSH_ASKPASS", str(askpass))
    monkeypatch.setenv("GIT_USERNAME", "x-access-token")
    monkeypatch.setenv("GIT_TOKEN", TOKEN)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "credential.helper")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"store --file={store}")


def _configured(*hosts: str) -> str:
    return json.dumps({h: {"username": "x-access-token", "token": TOKEN} for h in hosts})


def _every_git_path(workspaces: GitWorkspaces, origin: str) -> None:
    """What a run and the API do with an origin: resolve its base, list it, clone it, and
    read files, refs and the log through the origin cache."""
    calls = [
        lambda: workspaces.resolve_base(origin, None),
        lambda: workspaces.resolve_base(origin, "main"),
        lambda: workspaces.checkout("r-1", origin, COMMIT),
        lambda: workspaces.commit_at_ref(origin, "refs/heads/main"),
        lambda: workspaces.read_file(origin, COMMIT, "artifact.md"),
        lambda: workspaces.list_files(origin, COMMIT),
        lambda: workspaces.branch_log(origin, "main"),
    ]
    for call in calls:
        with pytest.raises((GitError, ValueError)):
            call()


@pytest.mark.integration
@pytest.mark.usefixtures("image_environment")
@pytest.mark.parametrize("configured_for", ["github.com", "own-host-over-http"])
def test_a_credential_seeking_server_over_http_gets_nothing(
    tmp_path: Path, seeker: Seeker, configured_for: str
) -> None:
    hosts = ["github.com"] if configured_for == "github.com" else ["github.com", seeker.host]
    workspaces = GitWorkspaces(
        tmp_path / "workspaces", "loopworks", "l@x", credentials=_configured(*hosts)
    )
    _every_git_path(workspaces, seeker.url())
    assert seeker.seen.paths, "git never asked the server: the test proves nothing"
    assert seeker.seen.authorizations == []


@pytest.mark.integration
def test_the_configured_https_host_gets_its_credential_and_no_other_host_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    with credential_seeker(tls=(cert, key)) as seeker:
        elsewhere = GitWorkspaces(
            tmp_path / "a", "loopworks", "l@x", credentials=_configured("github.com")
        )
        with pytest.raises(GitError):
            elsewhere.resolve_base(seeker.url(), None)
        assert seeker.seen.paths and seeker.seen.authorizations == []

        other_port = GitWorkspaces(
            tmp_path / "b", "loopworks", "l@x", credentials=_configured("127.0.0.1")
        )
        with pytest.raises(GitError):
            other_port.resolve_base(seeker.url(), None)
        assert seeker.seen.authorizations == []

        own = GitWorkspaces(
            tmp_path / "c", "loopworks", "l@x", credentials=_configured(seeker.host)
        )
        with pytest.raises(GitError) as raised:
            own.resolve_base(seeker.url(), None)
        assert seeker.seen.credentials() == [f"x-access-token:{TOKEN}"]
        assert TOKEN not in str(raised.value)


@pytest.mark.integration
@pytest.mark.parametrize("user_helpers", [False, True])
def test_a_credential_scoped_to_origins_is_used_for_no_other_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_helpers: bool
) -> None:
    """The operator's token for `https://<host>/acme/` asked for by another repository on
    the same host (a token holder naming `https://<host>/other/r.git`): not answered."""
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    with credential_seeker(tls=(cert, key)) as seeker:
        scoped = json.dumps(
            {
                seeker.host: {
                    "username": "x-access-token",
                    "token": TOKEN,
                    "origins": [f"https://{seeker.host}/acme/"],
                }
            }
        )
        workspaces = GitWorkspaces(
            tmp_path / "w", "loopworks", "l@x", credentials=scoped, user_helpers=user_helpers
        )
        for elsewhere in ("other/r.git", "acme-evil/r.git", "r.git"):
            with pytest.raises(GitError):
                workspaces.resolve_base(seeker.url(elsewhere), None)
        assert len(seeker.seen.paths) >= 3 and seeker.seen.authorizations == []

        with pytest.raises(GitError) as raised:
            workspaces.resolve_base(seeker.url("acme/r.git"), None)
        assert seeker.seen.credentials() == [f"x-access-token:{TOKEN}"]
        assert TOKEN not in str(raised.value)


@pytest.mark.integration
@pytest.mark.parametrize("user_helpers", [False, True])
def test_the_users_own_helpers_answer_only_when_loops_up_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_helpers: bool
) -> None:
    """A `loops up` user's private https origin authenticates through their own git config
    (LOOPS_GIT_USER_HELPERS, which `loops up` sets on loopback without tokens); a
    deployment's git processes never ask that config."""
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    with credential_seeker(tls=(cert, key)) as seeker:
        store = tmp_path / "git-credentials"
        store.write_text(f"https://me:{OTHER_TOKEN}@{seeker.host}\n")
        global_config = tmp_path / "gitconfig"
        global_config.write_text(f"[credential]\n\thelper = store --file={store}\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
        workspaces = GitWorkspaces(tmp_path / "w", "loopworks", "l@x", user_helpers=user_helpers)
        with pytest.raises(GitError) as raised:
            workspaces.resolve_base(seeker.url(), None)
        assert seeker.seen.paths
        assert seeker.seen.credentials() == ([f"me:{OTHER_TOKEN}"] if user_helpers else [])
        assert OTHER_TOKEN not in str(raised.value)


@pytest.mark.integration
def test_the_credential_is_in_no_clone_config_and_on_no_command_line(tmp_path: Path) -> None:
    from tests.integration.stack import bare_remote

    remote = bare_remote(tmp_path / "remote")
    workspaces = GitWorkspaces(
        tmp_path / "workspaces", "loopworks", "l@x", credentials=_configured("github.com")
    )
    _, commit = workspaces.resolve_base(str(remote), None)
    workdir = workspaces.checkout("r-1", str(remote), commit)
    config = subprocess.run(
        ["git", "config", "--list", "--show-origin"], cwd=workdir, capture_output=True, text=True
    ).stdout
    assert TOKEN not in config
    for path in (tmp_path / "workspaces").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


CREDENTIALS = {
    "github.com": GitCredential("x-access-token", TOKEN),
    "git.example.com:8443": GitCredential("loops", OTHER_TOKEN),
}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("request_lines", "expected"),
    [
        ({"protocol": "https", "host": "github.com"}, TOKEN),
        ({"protocol": "https", "host": "GitHub.com"}, TOKEN),
        ({"protocol": "https", "host": "github.com:443"}, TOKEN),
        ({"protocol": "https", "host": "github.com", "username": "x-access-token"}, TOKEN),
        ({"protocol": "https", "host": "git.example.com:8443"}, OTHER_TOKEN),
        # Never over http, nor any scheme but https.
        ({"protocol": "http", "host": "github.com"}, None),
        ({"protocol": "ssh", "host": "github.com"}, None),
        ({"host": "github.com"}, None),
        # Never to another host, a look-alike, or another port.
        ({"protocol": "https", "host": "attacker.example"}, None),
        ({"protocol": "https", "host": "github.com.attacker.example"}, None),
        ({"protocol": "https", "host": "api.github.com"}, None),
        ({"protocol": "https", "host": "github.com:8443"}, None),
        ({"protocol": "https", "host": "git.example.com"}, None),
        ({"protocol": "https", "host": "git.example.com:443"}, None),
        ({"protocol": "https", "host": ""}, None),
        # Nor for a username git was told that is not the configured one.
        ({"protocol": "https", "host": "github.com", "username": "alice"}, None),
    ],
)
def test_the_helper_answers_only_a_configured_https_host(
    request_lines: dict[str, str], expected: str | None
) -> None:
    found = credential_for(request_lines, CREDENTIALS)
    assert (found.token if found else None) == expected


SCOPED = {
    "github.com": GitCredential(
        "x-access-token", TOKEN, ("https://github.com/acme/", "https://github.com/solo/tool")
    )
}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("path", "answered"),
    [
        ("acme/repo.git", True),
        ("acme/team/repo", True),
        ("/acme/repo.git", True),
        ("solo/tool.git", True),
        ("solo/tool", True),
        ("solo/tool/sub.git", True),
        # Another repository of the same host, or one whose name only begins the same.
        ("other/repo.git", False),
        ("acme-evil/repo.git", False),
        ("acmerepo.git", False),
        ("solo/tool.evil", False),
        ("solo/toolbox.git", False),
        # git named no repository: which one it is for cannot be told.
        (None, False),
    ],
)
def test_a_credential_naming_origins_answers_only_for_them(
    path: str | None, answered: bool
) -> None:
    request = {"protocol": "https", "host": "github.com"}
    if path is not None:
        request["path"] = path
    assert (credential_for(request, SCOPED) is not None) is answered


@pytest.mark.unit
def test_origins_are_parsed_normalised_and_must_be_https_on_their_host() -> None:
    value = json.dumps(
        {
            "GitHub.com:443": {
                "username": "u",
                "token": TOKEN,
                "origins": ["HTTPS://GitHub.com/acme/"],
            }
        }
    )
    assert parse_credentials(value)["github.com"].origins == ("https://github.com/acme/",)
    assert TOKEN not in repr(parse_credentials(value))
    for origins in (
        ["http://github.com/acme/"],
        ["https://gitlab.com/acme/"],
        ["https://github.com:8443/acme/"],
        ["https://github.com"],
        "https://github.com/acme/",
        [7],
    ):
        bad = json.dumps({"github.com": {"username": "u", "token": TOKEN, "origins": origins}})
        with pytest.raises(ValueError, match="origins") as raised:
            parse_credentials(bad)
        assert TOKEN not in str(raised.value)


@pytest.mark.unit
def test_git_tells_the_path_only_to_hosts_whose_credential_names_origins() -> None:
    from loopworks.schemas.git_credentials import path_scoped_hosts
    from loopworks.workspace.lockdown import path_scoped

    value = json.dumps(
        {
            "github.com": {"username": "u", "token": TOKEN, "origins": ["https://github.com/a/"]},
            "git.example.com:8443": {"username": "u", "token": OTHER_TOKEN},
        }
    )
    assert path_scoped(path_scoped_hosts(value)) == (
        "-c",
        "credential.https://github.com.useHttpPath=true",
    )
    assert path_scoped_hosts("not json") == []


@pytest.mark.unit
def test_the_helper_reads_its_credentials_from_the_environment_and_answers_get_only() -> None:
    environ = {"LOOPS_GIT_CREDENTIALS": _configured("github.com")}
    request = {"protocol": "https", "host": "github.com"}
    assert answer("get", request, environ) == f"username=x-access-token\npassword={TOKEN}\n"
    assert answer("store", request, environ) == ""
    assert answer("erase", request, environ) == ""
    assert answer("get", request, {}) == ""
    assert answer("get", request, {"LOOPS_GIT_CREDENTIALS": "not json"}) == ""


@pytest.mark.unit
@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[]",
        '{"github.com": "token"}',
        '{"github.com": {"token": "t"}}',
        '{"github.com": {"username": "u", "token": ""}}',
        '{"github.com": {"username": "u", "token": "a\\nprotocol=https"}}',
        '{"https://github.com": {"username": "u", "token": "t"}}',
        '{"user@github.com": {"username": "u", "token": "t"}}',
        '{"github.com/path": {"username": "u", "token": "t"}}',
        '{"github.com": {"username": "u", "token": "t", "scope": "all"}}',
    ],
)
def test_a_malformed_credential_setting_is_refused_without_quoting_it(value: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_credentials(value)
    assert "protocol=https" not in str(raised.value)


@pytest.mark.unit
def test_the_credential_setting_is_redacted_token_by_token() -> None:
    from loopworks.checks.redaction import environ_secrets, settings_secrets
    from loopworks.schemas.settings import Settings

    value = json.dumps(
        {
            "github.com": {"username": "x-access-token", "token": TOKEN},
            "git.example.com": {"username": "loops", "token": OTHER_TOKEN},
        }
    )
    settings = Settings(LOOPS_GIT_CREDENTIALS=value)
    assert {TOKEN, OTHER_TOKEN} <= settings_secrets(settings)
    assert {TOKEN, OTHER_TOKEN} <= environ_secrets({"LOOPS_GIT_CREDENTIALS": value})


@pytest.mark.integration
def test_git_follows_no_redirect_to_where_the_origin_policy_never_looked(tmp_path: Path) -> None:
    """An admitted host answering `302 Location: http://169.254.169.254/...` must not send
    git on to an address the policy refuses."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with credential_seeker() as target:

        class Redirect(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", target.url() + "/info/refs?service=git-upload-pack")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            workspaces = GitWorkspaces(tmp_path / "w", "loopworks", "l@x")
            with pytest.raises(GitError):
                workspaces.resolve_base(f"http://127.0.0.1:{server.server_address[1]}/r.git", None)
        finally:
            server.shutdown()
            server.server_close()
        assert target.seen.paths == []
