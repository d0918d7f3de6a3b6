"""scripts/editable_install.py: a strict editable install's link tree is stale when a
module or package-data file was added to the checkout after it, or one it links to was
removed; then the tests, mypy and `scripts/up.sh` are told to refresh it."""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "editable_install.py"
stale: Callable[[Path, Path], list[str]] = runpy.run_path(str(SCRIPT))["stale"]

PYPROJECT = """
[tool.setuptools]
package-dir = { "loopworks" = "." }
packages = ["loopworks", "loopworks.cli", "loopworks.prompts"]

[tool.setuptools.package-data]
"loopworks" = ["py.typed"]
"loopworks.prompts" = ["templates/*.md"]
"""


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout and its install's link tree, as setuptools lays it out: one link per
    file of the listed packages, under build/."""
    root = tmp_path / "checkout"
    files = ["py.typed", "cli/__init__.py", "cli/app.py", "prompts/__init__.py"]
    files += ["prompts/templates/default.md", "tests/test_app.py"]
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    (root / "pyproject.toml").write_text(PYPROJECT)
    tree = root / "build" / "__editable__.loopworks-0.1.0-py3-none-any" / "loopworks"
    for name in files[:-1]:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).symlink_to(root / name)
    return root, tree


def test_an_install_that_links_every_file_is_current(checkout: tuple[Path, Path]) -> None:
    assert stale(*checkout) == []


def test_a_module_or_prompt_added_after_the_install_is_named(
    checkout: tuple[Path, Path],
) -> None:
    root, tree = checkout
    (root / "cli" / "up.py").write_text("")
    (root / "prompts" / "templates" / "review.md").write_text("")
    (root / "prompts" / "notes.txt").write_text("")  # not package data: never installed
    assert stale(root, tree) == [
        "not installed: cli/up.py",
        "not installed: prompts/templates/review.md",
    ]


def test_a_module_removed_after_the_install_is_named(checkout: tuple[Path, Path]) -> None:
    root, tree = checkout
    (root / "cli" / "app.py").unlink()
    assert stale(root, tree) == ["removed from the checkout: cli/app.py"]
