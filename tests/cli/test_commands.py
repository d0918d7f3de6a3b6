"""Commands against a fake API (answers built from the API's models): request bodies,
error messages, exit codes; and `clean` against the real app over a fake Temporal."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.api.models import RunCreated, RunSummary
from loopworks.cli import commands
from loopworks.cli.app import build_parser, main
from loopworks.cli.client import ApiClient, ApiError, CliError
from loopworks.cli.config import CliConfig
from loopworks.schemas.events import EVENTS
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient
from tests.cli.sample import EVENTS as SAMPLE_EVENTS
from tests.cli.sample import RUN_ID, RUNS, STATE, wire, wire_list

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self, answers: dict[tuple[str, str], httpx.Response]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        key = (request.method, request.url.path)
        if key in self.answers:
            return self.answers[key]
        return httpx.Response(404, json={"detail": "Not Found"})

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


class TtyInput(io.StringIO):
    def isatty(self) -> bool:
        return True


Api = Callable[[httpx.Request], httpx.Response]


def run(
    argv: list[str],
    api: Api,
    stdin: io.StringIO | None = None,
    token: str | None = None,
) -> tuple[int, str]:
    args = build_parser().parse_args(argv)
    config = CliConfig("http://api.test", token)
    out = io.StringIO()
    client = ApiClient(config, transport=httpx.MockTransport(api))
    ctx = commands.Context(config, client, out=out, stdin=stdin or io.StringIO())
    code = args.handler(ctx, args)
    return code, out.getvalue()


CREATED = httpx.Response(
    201, json=wire(RunCreated(run_id=RUN_ID, alias="a", status_url=f"/runs/{RUN_ID}"))
)


def test_new_sends_a_local_repo_as_an_absolute_path_from_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API resolves no relative path (it would from its own directory)."""
    monkeypatch.chdir(tmp_path)
    api = Recorder({("POST", "/runs"): CREATED})
    run(["new", "t", "--repo", "."], api)
    run(["new", "t", "--repo", "sub/../repo"], api)
    run(["new", "t", "--repo", "git@example.com:org/repo.git"], api)
    sent = [json.loads(request.content)["repo"] for request in api.requests]
    assert sent == [str(tmp_path), str(tmp_path / "repo"), "git@example.com:org/repo.git"]


def test_new_sends_the_request_and_prints_only_the_run_id(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - id: r1\n    description: d\n    severity: fail\n    phase: A\n"
        "    check: {kind: pattern, pattern: x}\nthresholds: {A: 0.7}\n"
    )
    api = Recorder({("POST", "/runs"): CREATED})
    argv = ["new", "Write a guide", "--repo", "/srv/repo.git", "--template", "docs"]
    argv += ["--max-iterations", "3", "--interactive", "--rules-file", str(rules)]
    argv += ["--idempotency-key", "k-1"]
    code, out = run(argv, api, token="s3cret-0123456789")
    assert (code, out) == (0, f"{RUN_ID}\n")
    request = api.requests[0]
    assert request.headers["authorization"] == "Bearer s3cret-0123456789"
    assert request.headers["idempotency-key"] == "k-1"
    assert api.body() == {
        "task": "Write a guide",
        "repo": "/srv/repo.git",
        "template": "docs",
        "max_iterations": 3,
        "mode": "interactive",
        "rules": [
            {
                "id": "r1",
                "description": "d",
                "severity": "fail",
                "phase": "A",
                "check": {"kind": "pattern", "pattern": "x"},
            }
        ],
        "thresholds": {"A": 0.7},
    }


def test_new_without_options_sends_only_the_task() -> None:
    api = Recorder({("POST", "/runs"): CREATED})
    run(["new", "t"], api)
    assert api.body() == {"task": "t"}
    assert "authorization" not in api.requests[0].headers


def test_new_no_prep_asks_the_run_to_ignore_the_repositorys_prep_package() -> None:
    api = Recorder({("POST", "/runs"): CREATED})
    run(["new", "t", "--no-prep"], api)
    assert api.body() == {"task": "t", "read_prep_package": False}


def test_a_422_carries_the_apis_message() -> None:
    message = "body.task: String should have at least 1 character"
    api = Recorder(
        {("POST", "/runs"): httpx.Response(422, json={"detail": [], "message": message})}
    )
    with pytest.raises(ApiError) as raised:
        run(["new", ""], api)
    assert str(raised.value) == f"HTTP 422: {message}"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, {"detail": f"run {RUN_ID} not found"}, f"HTTP 404: run {RUN_ID} not found"),
        (409, {"detail": "run is finished"}, "HTTP 409: run is finished"),
        (
            401,
            {"detail": "missing bearer token"},
            "HTTP 401: missing bearer token (set LOOPS_API_TOKEN or pass --token)",
        ),
        (
            422,
            {"detail": [{"loc": ["body", "note"], "msg": "Field required"}]},
            "HTTP 422: body.note: Field required",
        ),
        (502, None, "HTTP 502: Bad Gateway"),
    ],
)
def test_error_messages(status: int, body: Any, expected: str) -> None:
    answer = httpx.Response(status, json=body) if body else httpx.Response(status)
    api = Recorder({("POST", f"/runs/{RUN_ID}/stop"): answer})
    with pytest.raises(ApiError, match=None) as raised:
        run(["stop", RUN_ID], api)
    assert str(raised.value) == expected


def following(status: RunStatus) -> Recorder:
    """An API whose run has already ended with `status`, its events all in."""
    state = STATE.model_copy(update={"status": status})
    return Recorder(
        {
            ("POST", "/runs"): CREATED,
            ("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(state)),
            ("GET", f"/runs/{RUN_ID}/events"): httpx.Response(200, json=wire_list(SAMPLE_EVENTS)),
        }
    )


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (RunStatus.COMPLETED, 0),
        (RunStatus.STOPPED, 1),
        (RunStatus.FAILED, 1),
        (RunStatus.HALTED, 1),
    ],
)
@pytest.mark.parametrize(
    "argv",
    [["new", "x", "--auto", "--follow", "--poll"], ["status", RUN_ID, "--follow", "--poll"]],
    ids=["new", "status"],
)
def test_following_a_run_exits_0_only_when_it_completed(
    argv: list[str], status: RunStatus, code: int
) -> None:
    """As `loops graph status --follow` does: a script gating on the command must not go
    on after a run that did not pass."""
    exit_code, output = run(argv, following(status))
    assert exit_code == code, output


def test_stop_sends_the_reason() -> None:
    api = Recorder({("POST", f"/runs/{RUN_ID}/stop"): httpx.Response(202, json=wire(STATE))})
    code, out = run(["stop", RUN_ID, "--reason", "enough"], api)
    assert code == 0 and "stop requested" in out
    assert api.body() == {"reason": "enough"}


@pytest.mark.parametrize(
    ("argv", "path", "body"),
    [
        (["clear-block", RUN_ID, "--note", "go on"], "clear-block", {"note": "go on"}),
        # An action that takes nothing sends `{}` as JSON: the API takes nothing else.
        (["pause", RUN_ID], "pause", {}),
        (["resume", RUN_ID], "resume", {}),
        (["approve", RUN_ID, "--max-iterations", "2"], "approve", {"max_iterations": 2}),
    ],
)
def test_messages_post_to_their_routes(argv: list[str], path: str, body: Any) -> None:
    api = Recorder({("POST", f"/runs/{RUN_ID}/{path}"): httpx.Response(200, json=wire(STATE))})
    code, _ = run(argv, api)
    assert code == 0
    assert api.body() == body
    assert api.requests[0].headers["content-type"] == "application/json"


def test_approve_with_a_json_rules_list(tmp_path: Path) -> None:
    rules = [{"id": "r", "description": "d", "check": {"kind": "pattern", "pattern": "x"}}]
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    api = Recorder({("POST", f"/runs/{RUN_ID}/approve"): httpx.Response(200, json=wire(STATE))})
    run(["approve", RUN_ID, "--rules-file", str(path), "--note", "ok"], api)
    assert api.body() == {"rules": rules, "note": "ok"}


def test_a_bad_rules_file_is_a_failure_before_any_request(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("just a string\n")
    api = Recorder({})
    with pytest.raises(CliError, match="must hold a list of rules"):
        run(["approve", RUN_ID, "--rules-file", str(path)], api)
    with pytest.raises(CliError, match="cannot read"):
        run(["approve", RUN_ID, "--rules-file", str(tmp_path / "missing.json")], api)
    assert api.requests == []


@pytest.mark.parametrize(
    ("argv", "content", "said"),
    [
        (["new", "x", "--auto", "--rules-file"], "- {id: a, weight: .nan}\n", "[0].weight is nan"),
        (
            ["approve", RUN_ID, "--rules-file"],
            "rules: [{id: a, description: 2025-01-01}]\n",
            "rules[0].description is datetime.date(2025, 1, 1)",
        ),
        (
            ["graph", "new", "g", "--auto", "--tasks-file"],
            "- {id: T-001, context: {files: !!set {a: null}}}\n",
            "[0].context.files is {'a'}",
        ),
        (["graph", "approve", "g", "--tasks-file"], "- {1: a}\n", "[0] has a key 1"),
        (["new", "x", "--auto", "--rules-file"], b"\xff\xfe\x00r\x00u", "not UTF-8 text"),
    ],
    ids=["nan", "a date", "a set", "a number as a key", "not UTF-8"],
)
def test_a_document_json_cannot_carry_is_refused_in_a_line_before_any_request(
    argv: list[str],
    content: str | bytes,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """YAML reads dates, sets and .nan, which a request's JSON cannot hold (and a wrong
    file may not be text at all): a traceback, where it is the file's to fix."""
    path = tmp_path / "document.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    # Nothing listens there: a request would say "cannot reach".
    assert main(["--url", "http://127.0.0.1:9", *argv, str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"loops: {path}") or err.startswith(f"loops: cannot read {path}"), err
    assert said in err and err.count("\n") == 1, err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.1", "1.5", "half"])
@pytest.mark.parametrize("command", [["new", "x"], ["graph", "new", "g"]], ids=["run", "graph"])
def test_an_audit_probability_is_a_number_from_0_to_1(
    command: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--url", "http://127.0.0.1:9", *command, "--auto", f"--audit-probability={value}"])
    assert raised.value.code == 2
    assert f"{value!r} is not a number from 0 to 1" in capsys.readouterr().err
    args = build_parser().parse_args([*command, "--audit-probability", "0.25"])
    assert args.audit_probability == 0.25


def test_status_defaults_to_the_most_recent_run() -> None:
    latest = RUNS[0].run_id
    api = Recorder(
        {
            ("GET", "/runs"): httpx.Response(200, json=wire_list(RUNS)),
            ("GET", f"/runs/{latest}"): httpx.Response(
                200, json=wire(STATE.model_copy(update={"run_id": latest}))
            ),
        }
    )
    code, out = run(["status"], api)
    assert code == 0
    assert api.requests[0].url.params["limit"] == "1"
    assert out.splitlines()[0].startswith("write-a-short-guide-to-reflex-loops | completed | 2/4")


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("offline", ["model: offline"]),
        ("anthropic (litellm)", ["model: anthropic (litellm)"]),
        ("", []),
    ],
)
def test_status_names_the_model_answering_the_run(source: str, said: list[str]) -> None:
    """A run on canned answers says so; a run recorded before runs named it, nothing."""
    state = STATE.model_copy(update={"model_source": source})
    api = Recorder({("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(state))})
    code, out = run(["status", RUN_ID], api)
    assert code == 0
    assert out.splitlines()[2:] == said, out


def test_status_without_any_run() -> None:
    api = Recorder({("GET", "/runs"): httpx.Response(200, json=[])})
    with pytest.raises(CliError, match="there are no runs yet"):
        run(["status"], api)


def test_list_and_history_and_artifact() -> None:
    api = Recorder(
        {
            ("GET", "/runs"): httpx.Response(200, json=wire_list(RUNS)),
            ("GET", f"/runs/{RUN_ID}/events"): httpx.Response(200, json=[]),
            ("GET", f"/runs/{RUN_ID}/artifact"): httpx.Response(200, text="# Title\n\nbody"),
        }
    )
    assert run(["list", "--status", "completed"], api)[1].startswith("RUN_ID")
    assert api.requests[-1].url.params["status"] == "completed"
    assert run(["history", RUN_ID], api)[1] == f"no events for {RUN_ID}\n"
    assert run(["artifact", RUN_ID], api)[1] == "# Title\n\nbody\n"


@pytest.mark.parametrize(
    ("status", "note"),
    [
        (
            "running",
            f"loops: run {RUN_ID} is running: this is its latest draft"
            " (commit 0123abcd), not its final artifact\n",
        ),
        ("completed", ""),
        ("failed", ""),
    ],
)
def test_artifact_of_a_live_run_says_it_is_a_draft_on_stderr(status: str, note: str) -> None:
    headers = {"X-Loops-Run-Status": status, "X-Loops-Artifact-Commit": "0123abcd" * 5}
    api = Recorder(
        {("GET", f"/runs/{RUN_ID}/artifact"): httpx.Response(200, text="# T\n", headers=headers)}
    )
    args = build_parser().parse_args(["artifact", RUN_ID])
    config = CliConfig("http://api.test", None)
    out, err = io.StringIO(), io.StringIO()
    client = ApiClient(config, transport=httpx.MockTransport(api))
    assert args.handler(commands.Context(config, client, out=out, err=err), args) == 0
    assert out.getvalue() == "# T\n"  # the artifact alone, for a pipe
    assert err.getvalue() == note


def test_no_runs_to_list() -> None:
    api = Recorder({("GET", "/runs"): httpx.Response(200, json=[])})
    assert run(["list"], api)[1] == "no runs\n"


def test_json_output_is_the_apis_json() -> None:
    api = Recorder(
        {
            ("GET", "/runs"): httpx.Response(200, json=wire_list(RUNS)),
            ("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(STATE)),
            ("GET", f"/runs/{RUN_ID}/events"): httpx.Response(200, json=wire_list(SAMPLE_EVENTS)),
        }
    )
    listed = json.loads(run(["list", "--json"], api)[1])
    assert [RunSummary.model_validate(item) for item in listed] == RUNS
    assert json.loads(run(["status", RUN_ID, "--json"], api)[1]) == wire(STATE)
    lines = run(["history", RUN_ID, "--json"], api)[1].splitlines()
    assert EVENTS.validate_python([json.loads(line) for line in lines]) == SAMPLE_EVENTS
    # Phase switches keep their wire names.
    assert json.loads(lines[7])["payload"] == {"from": "A", "to": "B"}


def test_an_answer_that_is_not_the_apis_model_is_a_clear_error() -> None:
    api = Recorder({("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json={"run_id": RUN_ID})})
    with pytest.raises(CliError, match=f"unexpected answer for run {RUN_ID}"):
        run(["status", RUN_ID], api)


# --- clean: the real route, a fake Temporal, the service's data directory in tmp_path ---


class Service:
    """The API app on a data directory of its own, with `RUN_ID` finished and its clones
    (and other runs' directories beside them) on disk."""

    def __init__(self, root: Path, fake: FakeClient, http: TestClient) -> None:
        self.root = root
        self.fake = fake
        self.http = http
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        # Handed over field by field: the test client may speak another httpx.
        self.requests.append(request)
        answer = self.http.request(
            request.method,
            request.url.raw_path.decode(),
            # Its own Host (the test client's base URL), as a proxy in front would send.
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            content=request.read(),
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def remaining(self) -> list[str]:
        return sorted(path.name for path in self.root.iterdir())


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    settings = Settings(LOOPS_DATA_DIR=tmp_path / "data")
    root = settings.workspaces_dir
    for name in (RUN_ID, f"{RUN_ID}.evaluate", f"{RUN_ID}-other", "another-run", ".cache"):
        (root / name / ".git").mkdir(parents=True)
        (root / name / "artifact.md").write_text("# x\n")
    fake = FakeClient()
    fake.handle(RUN_ID).open_for = 0  # finished
    # A loopback name: the API answers no host it was not told of.
    app = create_app(settings, client=cast(Client, fake))
    with TestClient(app, base_url="http://localhost") as http:
        yield Service(root, fake, http)


def test_clean_refuses_a_run_that_has_not_finished(service: Service) -> None:
    service.fake.handle(RUN_ID).open_for = 1_000_000
    with pytest.raises(CliError, match="has not finished; only a finished run's workspace"):
        run(["clean", RUN_ID, "--yes"], service)
    assert RUN_ID in service.remaining()
    assert [r.method for r in service.requests] == ["GET"]


def test_clean_without_a_terminal_and_without_yes_refuses(service: Service) -> None:
    with pytest.raises(CliError, match="stdin is not a terminal"):
        run(["clean", RUN_ID], service)
    assert RUN_ID in service.remaining()


def test_clean_asks_and_no_keeps_everything(service: Service) -> None:
    code, out = run(["clean", RUN_ID], service, stdin=TtyInput("n\n"))
    assert code == 1, out
    assert out.splitlines() == [
        f"run {RUN_ID} has finished; this deletes its workspaces on the service (8 bytes):",
        f"  {RUN_ID} (4 bytes)",
        f"  {RUN_ID}.evaluate (4 bytes)",
        "its pushed branch stays on its origin",
        "Delete 2 workspace(s)? [y/n] (n): nothing deleted",
    ]
    assert RUN_ID in service.remaining()
    assert [r.method for r in service.requests] == ["GET"]


def test_clean_on_an_empty_answer_deletes_nothing(service: Service) -> None:
    code, out = run(["clean", RUN_ID], service, stdin=TtyInput(""))
    assert code == 1 and out.endswith("nothing deleted\n")
    assert RUN_ID in service.remaining()


def test_clean_on_enter_takes_the_default_no_at_once(service: Service) -> None:
    code, out = run(["clean", RUN_ID], service, stdin=TtyInput("\n"))
    assert code == 1 and out.endswith("? [y/n] (n): nothing deleted\n"), out
    assert out.count("Delete 2 workspace(s)?") == 1
    assert RUN_ID in service.remaining()


def test_clean_deletes_only_the_runs_workspaces(service: Service) -> None:
    code, out = run(["clean", RUN_ID], service, stdin=TtyInput("y\n"))
    assert code == 0, out
    assert out.endswith("? [y/n] (n): deleted 2 workspace(s), 8 bytes\n")
    assert service.remaining() == sorted([".cache", f"{RUN_ID}-other", "another-run"])
    code, out = run(["clean", RUN_ID, "--yes"], service)
    assert (code, out) == (0, f"nothing to clean for {RUN_ID}\n")


def test_clean_with_yes_does_not_ask(service: Service) -> None:
    code, out = run(["clean", RUN_ID, "--yes"], service)
    assert code == 0, out
    assert "Delete" not in out and out.endswith("deleted 2 workspace(s), 8 bytes\n")
    assert [r.method for r in service.requests] == ["GET", "DELETE"]


@pytest.mark.parametrize(
    ("run_id", "status"),
    [("_x", 422), (f"{RUN_ID}.lock", 422), ("a..b", 422), ("../data", 404)],
)
def test_clean_of_a_bad_id_is_the_apis_refusal(service: Service, run_id: str, status: int) -> None:
    # The API checks the id (a path would not even reach the route: no such route).
    with pytest.raises(ApiError) as raised:
        run(["clean", run_id, "--yes"], service)
    assert raised.value.status_code == status
    if status == 422:
        assert raised.value.message.endswith("is not usable as a directory and ref name")
    assert service.remaining() == sorted(
        [RUN_ID, f"{RUN_ID}.evaluate", f"{RUN_ID}-other", "another-run", ".cache"]
    )


# --- main -----------------------------------------------------------------------------


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        [],
        ["nope"],
        ["stop"],
        ["clear-block", RUN_ID],
        ["new", "t", "--max-iterations", "0"],
    ):
        with pytest.raises(SystemExit) as raised:
            main(argv)
        assert raised.value.code == 2, argv
    assert "usage: loops" in capsys.readouterr().err


def test_an_unreachable_api_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://127.0.0.1:9", "list"]) == 1
    assert "cannot reach the API at http://127.0.0.1:9" in capsys.readouterr().err


def test_an_api_url_that_is_not_one_exits_1_in_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://loops:hunter2-secret@[::1", "list"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "loops: not a valid API URL: http://***@[::1 (Invalid port: ':1'); check --url or "
        "LOOPS_API_URL\n"
    ), err


def test_a_password_in_the_api_url_is_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """LOOPS_API_URL may carry a proxy's basic auth; stderr is a terminal's, a CI log's."""
    assert main(["--url", "http://loops:hunter2-secret@127.0.0.1:9", "list"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach the API at http://***@127.0.0.1:9" in err, err
    assert "hunter2-secret" not in err, err


def test_flags_after_the_command_and_the_environment() -> None:
    args = build_parser().parse_args(["--url", "http://a", "list"])
    assert args.url == "http://a"
    args = build_parser().parse_args(["list", "--token", "t"])
    assert (args.url, args.token) == (None, "t")
    env = {"LOOPS_API_URL": "http://env:1/", "LOOPS_API_TOKEN": "e"}
    assert CliConfig.load(environ=env) == CliConfig("http://env:1", "e")
    assert CliConfig.load("http://flag", "f", environ=env) == CliConfig("http://flag", "f")
    assert CliConfig.load(environ={}) == CliConfig("http://127.0.0.1:8000", None)


def test_open_prints_a_runs_dashboard_page_once_the_run_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[str] = []
    monkeypatch.setattr(commands.webbrowser, "open", lambda url: opened.append(url) or True)
    api = Recorder({("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(STATE))})
    code, out = run(["open", RUN_ID], api)
    assert code == 0 and out == f"http://api.test/ui/runs/{RUN_ID}\n"
    assert opened == [f"http://api.test/ui/runs/{RUN_ID}"]
    code, out = run(["open", RUN_ID, "--print"], api)
    assert out == f"http://api.test/ui/runs/{RUN_ID}\n" and len(opened) == 1
    code, out = run(["open", "--print"], api)
    assert out == "http://api.test/ui/runs\n"


def test_open_leaves_the_api_urls_password_out() -> None:
    """Printed to a terminal and kept in the browser's history."""
    assert commands.dashboard_url("https://loops:hunter2-secret@api.test:8443/base/", "r-1") == (
        "https://api.test:8443/base/ui/runs/r-1"
    )
    assert commands.dashboard_url("http://[::1]:8000") == "http://[::1]:8000/ui/runs"


def test_open_takes_an_alias_and_refuses_an_unknown_run(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(commands.webbrowser, "open", lambda url: opened.append(url) or True)
    listed = httpx.Response(200, json=wire_list(RUNS))
    api = Recorder({("GET", "/runs"): listed})
    with pytest.raises(ApiError):
        run(["open", "write-a-guide"], api)
    assert opened == []
    assert api.requests[0].url.params["alias"] == "write-a-guide"
    assert api.requests[-1].url.path.startswith("/runs/")
