"""The layer contracts in pyproject.toml hold today, and fail when an import they forbid is
planted: a contract that a real circle or an upward import passes would prove nothing.
The imports are planted in the import graph built from the code, never in the code."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter import api  # noqa: F401  (configures import-linter's settings)
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract
from importlinter.domain.contract import Contract

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
_LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
_TYPES: dict[str, type[Contract]] = {"layers": LayersContract, "forbidden": ForbiddenContract}


@pytest.fixture
def graph() -> grimp.ImportGraph:
    # A graph of its own for each check: checking a contract changes the graph it is given.
    return grimp.build_graph("loopworks", include_external_packages=True, cache_dir=None)


def _contract(contract_id: str) -> Contract:
    found = next(c for c in _LINTER["contracts"] if c["id"] == contract_id)
    # As import-linter reads its TOML: a flag as a string.
    options: dict[str, Any] = {
        key: str(value) if isinstance(value, bool) else value for key, value in found.items()
    }
    session = {
        "root_packages": [_LINTER["root_package"]],
        "include_external_packages": str(_LINTER["include_external_packages"]),
    }
    return _TYPES[options["type"]](options["name"], session, options)


def _kept(contract_id: str, graph: grimp.ImportGraph, *planted: tuple[str, str]) -> bool:
    for importer, imported in planted:
        assert not graph.direct_import_exists(importer=importer, imported=imported)
        graph.add_import(importer=importer, imported=imported)
    return _contract(contract_id).check(graph, verbose=False).kept


@pytest.mark.parametrize("contract_id", [c["id"] for c in _LINTER["contracts"]])
def test_every_contract_holds(contract_id: str, graph: grimp.ImportGraph) -> None:
    assert _kept(contract_id, graph)


@pytest.mark.parametrize(
    ("contract_id", "importer", "imported"),
    [
        # The circle the MCP server once closed: a command reaching for the server.
        ("cli-inside", "loopworks.cli.commands", "loopworks.cli.mcp.server"),
        ("cli-inside", "loopworks.cli.graphs", "loopworks.cli.mcp.graph_tools"),
        # Upward across the stack, and inside the playbook package.
        ("layers", "loopworks.schemas.run", "loopworks.workflows.decisions"),
        ("domain", "loopworks.workspace.git", "loopworks.playbook.store"),
        ("playbook", "loopworks.playbook.deltas", "loopworks.playbook.store"),
        ("playbook", "loopworks.playbook.workflow", "loopworks.playbook.writer"),
        # A workflow doing git or asking a model itself.
        ("workflows", "loopworks.workflows.graph.workflow", "loopworks.workspace.git"),
        ("workflows", "loopworks.playbook.workflow", "loopworks.playbook.store"),
        # The CLI loading the server.
        ("cli", "loopworks.cli.commands", "loopworks.workflows.loop"),
    ],
)
def test_a_planted_import_breaks_its_contract(
    contract_id: str, importer: str, imported: str, graph: grimp.ImportGraph
) -> None:
    assert not _kept(contract_id, graph, (importer, imported))
