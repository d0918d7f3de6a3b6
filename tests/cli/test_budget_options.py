"""`loops new --budget-*` and `loops graph new --budget-* --total-budget-*` against the real
API app (over a fake Temporal): the request carries the budgets, the started workflow's
request holds them, and a budget above the operator's cap is the API's 422, printed as
the CLI prints every failure (docs/cli.md#budgets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from fastapi.testclient import TestClient
from temporalio.client import Client

from loopworks.api.main import create_app
from loopworks.cli import app
from loopworks.cli.app import main
from loopworks.schemas.run import Budget
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient
from tests.cli.test_notify_options import Service, run, sent

pytestmark = pytest.mark.unit


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    settings = Settings(
        LOOPS_DATA_DIR=tmp_path / "data",
        LOOPS_RUN_BUDGET_TOKENS=1000,
        LOOPS_RUN_BUDGET_USD=2.0,
        LOOPS_GRAPH_BUDGET_TOKENS=5000,
        LOOPS_GRAPH_BUDGET_USD=10.0,
    )
    fake = FakeClient()
    with TestClient(
        create_app(settings, client=cast(Client, fake)), base_url="http://localhost"
    ) as http:
        yield Service(fake, http)


def test_a_runs_budget_reaches_its_workflow(service: Service) -> None:
    run(["new", "Write a guide", "--auto"], service)
    assert "budget" not in sent(service)
    argv = ["new", "Write a guide", "--auto", "--budget-tokens", "800", "--budget-usd", "1.5"]
    code, _ = run(argv, service)
    assert code == 0
    assert sent(service)["budget"] == {"max_tokens": 800, "max_cost_usd": 1.5}
    assert service.fake.starts[-1]["params"].request.budget == Budget(
        max_tokens=800, max_cost_usd=1.5
    )


def test_one_limit_asked_the_other_is_the_operators(service: Service) -> None:
    run(["new", "Write a guide", "--auto", "--budget-usd", "0.5"], service)
    assert sent(service)["budget"] == {"max_cost_usd": 0.5}
    request = service.fake.starts[0]["params"].request
    assert request.budget == Budget(max_tokens=1000, max_cost_usd=0.5)


def test_a_graphs_loop_and_total_budgets_reach_its_workflow(service: Service) -> None:
    argv = ["graph", "new", "A goal", "--auto", "--budget-tokens", "900"]
    argv += ["--total-budget-tokens", "4000", "--total-budget-usd", "7.25"]
    code, _ = run(argv, service)
    assert code == 0
    body = sent(service)
    assert body["budget"] == {"max_tokens": 900}
    assert body["total_budget"] == {"max_tokens": 4000, "max_cost_usd": 7.25}
    request = service.fake.starts[0]["params"].request
    assert request.budget == Budget(max_tokens=900, max_cost_usd=2.0)
    assert request.total_budget == Budget(max_tokens=4000, max_cost_usd=7.25)


@pytest.mark.parametrize(
    ("argv", "field", "setting"),
    [
        (["new", "t", "--budget-tokens", "1001"], "budget.max_tokens", "LOOPS_RUN_BUDGET_TOKENS"),
        (["new", "t", "--budget-usd", "2.5"], "budget.max_cost_usd", "LOOPS_RUN_BUDGET_USD"),
        (
            ["graph", "new", "g", "--budget-tokens", "2000"],
            "budget.max_tokens",
            "LOOPS_RUN_BUDGET_TOKENS",
        ),
        (
            ["graph", "new", "g", "--total-budget-usd", "11"],
            "total_budget.max_cost_usd",
            "LOOPS_GRAPH_BUDGET_USD",
        ),
    ],
)
def test_a_budget_above_the_cap_is_printed_as_the_apis_422(
    service: Service,
    argv: list[str],
    field: str,
    setting: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(app, "ApiClient", lambda config: service.client())
    assert main([*argv, "--auto"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("loops: HTTP 422: "), err
    assert field in err and setting in err, err
    assert not service.fake.starts


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "lots"])
def test_a_budget_that_is_no_positive_number_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any request: argparse's usage error, exit 2."""
    with pytest.raises(SystemExit) as exit_:
        main(["graph", "new", "g", "--total-budget-usd", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--total-budget-usd" in err and f"'{value}' is not a number more than 0" in err, err
