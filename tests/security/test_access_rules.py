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


def _table(settings: Settings) -> list[tuple[str, str, bool]]:
    return [(t.name, t.secret, t.read_only) for t in tokens.load(settings)]


def test_named_and_bare_tokens() -> None:
    settings = Settings(
        LOOPS_API_TOKENS=" alice:s3cret-a , bare-one,bob:has:colons ",
        LOOPS_API_READ_TOKENS="dash:s3cret-d, bare-two",
    )
    assert _table(settings) == [
        ("alice", "s3cret-a", False),
        ("token-2", "bare-one", False),
        ("bob", "has:colons", False),
        ("dash", "s3cret-d", True),
        ("read-token-2", "bare-two", True),
    ]


def test_a_token_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# who may\n\nci:c1-secret\n  grafana:g-secret:read  \n")
    settings = Settings(LOOPS_API_TOKENS="alice:a-secret", LOOPS_API_TOKENS_FILE=str(path))
    assert _table(settings) == [
        ("alice", "a-secret", False),
        ("ci", "c1-secret", False),
        ("grafana", "g-secret", True),
    ]


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"LOOPS_API_TOKENS": "a:x1,a:x2"}, "'a' is used twice"),
        ({"LOOPS_API_TOKENS": "a:same", "LOOPS_API_READ_TOKENS": "b:same"}, "also given"),
        ({"LOOPS_API_TOKENS": "local:x"}, "open access"),
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


def test_a_file_line_without_a_name(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("ci:ok-secret\njust-a-token\n")
    with pytest.raises(ValueError, match="line 2: expected name:token"):
        tokens.load(Settings(LOOPS_API_TOKENS_FILE=str(path)))


def test_match_compares_every_token_and_knows_the_kind() -> None:
    table = tokens.load(Settings(LOOPS_API_TOKENS="a:one-secret", LOOPS_API_READ_TOKENS="r:two"))
    assert tokens.match("one-secret", table) == tokens.ApiToken("a", "one-secret")
    assert tokens.match("two", table) == tokens.ApiToken("r", "two", read_only=True)
    assert tokens.match("three", table) is None
    assert "one-secret" not in repr(table)


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({"LOOPS_API_HOST": "0.0.0.0"}, True),
        ({"LOOPS_API_HOST": "::"}, True),
        ({"LOOPS_API_HOST": "10.0.0.5"}, True),
        ({"LOOPS_API_HOST": "0.0.0.0", "LOOPS_API_READ_TOKENS": "r:x"}, False),
        ({"LOOPS_API_HOST": "0.0.0.0", "LOOPS_API_TOKENS": "a:x"}, False),
        ({"LOOPS_API_HOST": "127.0.0.1"}, False),
        ({"LOOPS_API_HOST": "localhost"}, False),
    ],
)
def test_refusal_to_start(variables: dict[str, str], refused: bool) -> None:
    said = refusal_to_start(Settings(**variables))  # type: ignore[arg-type]
    assert (said is not None) is refused
    if said:
        assert "LOOPS_API_TOKENS" in said and "127.0.0.1" in said


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
