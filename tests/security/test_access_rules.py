"""The access decisions as plain functions: token tables, hosts, caps and budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopworks.api import tokens
from loopworks.api.hosts import allowed_hosts, host_allowed, hostname
from loopworks.api.quotas import (
    BudgetRefused,
    Kind,
    budget_for,
    caps,
    in_progress_query,
    reached,
    refusal,
    rules_refusal,
)
from loopworks.api.security import refusal_to_start
from loopworks.schemas.run import Budget
from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit

# Makes a token as long as a token must be (api/tokens.py, MIN_TOKEN_CHARS).
PAD = "-0123456789abcdef"


def _table(settings: Settings) -> list[tuple[str, str, bool]]:
    return [(t.name, t.secret, t.read_only) for t in tokens.load(settings)]


def test_named_and_bare_tokens() -> None:
    settings = Settings(
        LOOPS_API_TOKENS=f" alice:s3cret-a{PAD} , bare-one{PAD},bob:has:colons{PAD} ",
        LOOPS_API_READ_TOKENS=f"dash:s3cret-d{PAD}, bare-two{PAD}",
    )
    assert _table(settings) == [
        ("alice", f"s3cret-a{PAD}", False),
        ("token-2", f"bare-one{PAD}", False),
        ("bob", f"has:colons{PAD}", False),
        ("dash", f"s3cret-d{PAD}", True),
        ("read-token-2", f"bare-two{PAD}", True),
    ]


def test_a_token_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# who may\n\nci:c1-secret{PAD}\n  grafana:g-secret{PAD}:read  \n")
    settings = Settings(LOOPS_API_TOKENS=f"alice:a-secret{PAD}", LOOPS_API_TOKENS_FILE=str(path))
    assert _table(settings) == [
        ("alice", f"a-secret{PAD}", False),
        ("ci", f"c1-secret{PAD}", False),
        ("grafana", f"g-secret{PAD}", True),
    ]


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"LOOPS_API_TOKENS": f"a:x1{PAD},a:x2{PAD}"}, "'a' is used twice"),
        ({"LOOPS_API_TOKENS": f"a:same{PAD}", "LOOPS_API_READ_TOKENS": f"b:same{PAD}"}, "also"),
        ({"LOOPS_API_TOKENS": f"local:x{PAD}"}, "open access"),
        # A token that can be guessed, named or bare, in any of the three sources.
        ({"LOOPS_API_TOKENS": "alice:x1"}, "'alice' has 2 characters, fewer than the 16"),
        ({"LOOPS_API_READ_TOKENS": "same-x1-0123456"}, "'read-token-1' has 15 characters"),
        ({"LOOPS_API_TOKENS": "bad name:x"}, "LOOPS_API_TOKENS entry 1"),
        ({"LOOPS_API_TOKENS": ":x"}, "LOOPS_API_TOKENS entry 1"),
        ({"LOOPS_API_READ_TOKENS": "ok:y,d:"}, "LOOPS_API_READ_TOKENS entry 2: the token named"),
        ({"LOOPS_API_TOKENS_FILE": "/nonexistent/tokens"}, "cannot be read"),
    ],
)
def test_an_ambiguous_table_is_refused_without_repeating_a_token(
    variables: dict[str, str], says: str
) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        tokens.load(Settings(**variables))  # type: ignore[arg-type]
    assert "x1" not in str(refused.value) and "same" not in str(refused.value)


def test_a_short_token_in_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"ci:ok-secret{PAD}\nbot:guessable:read\n")
    with pytest.raises(ValueError, match="'bot' has 9 characters") as refused:
        tokens.load(Settings(LOOPS_API_TOKENS_FILE=str(path)))
    assert "guessable" not in str(refused.value)


def test_a_file_line_without_a_name(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"ci:ok-secret{PAD}\njust-a-token{PAD}\n")
    with pytest.raises(ValueError, match="line 2: expected name:token"):
        tokens.load(Settings(LOOPS_API_TOKENS_FILE=str(path)))


def test_match_compares_every_token_and_knows_the_kind() -> None:
    one, two = f"one-secret{PAD}", f"two{PAD}"
    table = tokens.load(Settings(LOOPS_API_TOKENS=f"a:{one}", LOOPS_API_READ_TOKENS=f"r:{two}"))
    assert tokens.match(one, table) == tokens.ApiToken("a", one)
    assert tokens.match(two, table) == tokens.ApiToken("r", two, read_only=True)
    assert tokens.match(f"three{PAD}", table) is None
    assert one not in repr(table)


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({"LOOPS_API_HOST": "0.0.0.0"}, True),
        ({"LOOPS_API_HOST": "::"}, True),
        ({"LOOPS_API_HOST": "10.0.0.5"}, True),
        ({"LOOPS_API_HOST": "0.0.0.0", "LOOPS_API_READ_TOKENS": f"r:x{PAD}"}, False),
        ({"LOOPS_API_HOST": "0.0.0.0", "LOOPS_API_TOKENS": f"a:x{PAD}"}, False),
        ({"LOOPS_API_HOST": "127.0.0.1"}, False),
        ({"LOOPS_API_HOST": "localhost"}, False),
    ],
)
def test_refusal_to_start(variables: dict[str, str], refused: bool) -> None:
    said = refusal_to_start(Settings(**variables))  # type: ignore[arg-type]
    assert (said is not None) is refused
    if said:
        assert "LOOPS_API_TOKENS" in said and "127.0.0.1" in said


CREDENTIALS = '{"github.com": {"username": "x-access-token", "token": "ghp_0123456789abcdef"}}'


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({"LOOPS_API_TOKENS": f"a:x{PAD}", "LOOPS_GIT_CREDENTIALS": CREDENTIALS}, True),
        ({"LOOPS_API_READ_TOKENS": f"r:x{PAD}", "LOOPS_GIT_CREDENTIALS": CREDENTIALS}, True),
        (
            {
                "LOOPS_API_TOKENS": f"a:x{PAD}",
                "LOOPS_GIT_CREDENTIALS": CREDENTIALS,
                "LOOPS_ALLOWED_ORIGINS": "https://github.com/acme/",
            },
            False,
        ),
        # One user on loopback, no tokens: the operator is the only client.
        ({"LOOPS_GIT_CREDENTIALS": CREDENTIALS}, False),
        ({"LOOPS_API_TOKENS": f"a:x{PAD}"}, False),
    ],
)
def test_a_shared_api_with_credentials_needs_allowed_origins(
    variables: dict[str, str], refused: bool
) -> None:
    said = refusal_to_start(Settings(**variables))  # type: ignore[arg-type]
    assert (said is not None) is refused, said
    if said:
        assert "LOOPS_ALLOWED_ORIGINS" in said and "github.com" in said
        assert "ghp_" not in said


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("Example.COM:8000", "example.com"),
        ("example.com.", "example.com"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("", ""),
    ],
)
def test_hostname(header: str, name: str) -> None:
    assert hostname(header) == name


def test_allowed_hosts() -> None:
    assert allowed_hosts(Settings()) == ("localhost", "127.0.0.1", "::1")
    exposed = allowed_hosts(
        Settings(LOOPS_API_HOST="0.0.0.0", LOOPS_API_ALLOWED_HOSTS=" API , *.corp.example")
    )
    assert exposed == ("localhost", "127.0.0.1", "::1", "api", "*.corp.example")
    assert "10.0.0.5" in allowed_hosts(Settings(LOOPS_API_HOST="10.0.0.5"))


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("localhost:8000", True),
        ("app.localhost", True),
        ("127.0.0.2:1", True),
        ("api:8000", True),
        ("x.corp.example", True),
        ("corp.example", False),
        ("evilcorp.example", False),
        ("evil.example", False),
        ("", False),
        ("10.0.0.5", False),
    ],
)
def test_host_allowed(header: str, allowed: bool) -> None:
    assert host_allowed(header, ("localhost", "api", "*.corp.example")) is allowed


def test_a_star_allows_every_host() -> None:
    assert host_allowed("anything.example", ("*",))


def test_caps_and_their_settings() -> None:
    settings = Settings(LOOPS_MAX_RUNS_PER_CLIENT="2", LOOPS_MAX_RUNS="0")
    runs = caps(settings, Kind.RUNS)
    assert (runs.per_client.setting, runs.per_client.limit) == ("LOOPS_MAX_RUNS_PER_CLIENT", 2)
    assert not reached(runs.per_client, 1) and reached(runs.per_client, 2)
    assert not reached(runs.overall, 10_000), "0 turns a cap off"
    said = refusal(Kind.RUNS, runs.per_client, 2, "alice")
    assert "'alice' has 2 runs" in said and "LOOPS_MAX_RUNS_PER_CLIENT" in said
    graphs = caps(Settings(), Kind.GRAPHS)
    assert "LOOPS_MAX_GRAPHS" in refusal(Kind.GRAPHS, graphs.overall, 20, "bob")


def test_the_in_progress_queries() -> None:
    mine = in_progress_query(Kind.RUNS, "q", 'al"ice')
    assert mine == (
        'WorkflowType = "LoopWorkflow" AND ExecutionStatus = "Running" AND TaskQueue = "q"'
        ' AND LoopGraph IS NULL AND LoopStartedBy = "al\\"ice"'
    )
    assert in_progress_query(Kind.GRAPHS, "q", None) == (
        'WorkflowType = "TaskGraphWorkflow" AND ExecutionStatus = "Running" AND TaskQueue = "q"'
    )


def test_budget_for() -> None:
    operator = Settings(LOOPS_RUN_BUDGET_TOKENS="1000", LOOPS_RUN_BUDGET_USD="5")
    assert budget_for(None, operator) == Budget(max_tokens=1000, max_cost_usd=5)
    assert budget_for(Budget(max_tokens=10), operator) == Budget(max_tokens=10, max_cost_usd=5)
    with pytest.raises(BudgetRefused, match="LOOPS_RUN_BUDGET_TOKENS") as refused:
        budget_for(Budget(max_tokens=1001), operator)
    assert refused.value.field == "budget.max_tokens"
    unlimited = Settings(LOOPS_RUN_BUDGET_TOKENS="0", LOOPS_RUN_BUDGET_USD="0")
    assert budget_for(None, unlimited) is None
    assert budget_for(Budget(max_tokens=7), unlimited) == Budget(max_tokens=7)


def test_rules_refusal() -> None:
    assert rules_refusal(100, 100) is None
    assert "LOOPS_MAX_RULES" in (rules_refusal(101, 100) or "")
    assert rules_refusal(10_000, 0) is None
