"""The layout keeps one idea per module: no module of the package is over 400 lines, and
the loop's workflow module keeps to its handlers and state machine."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def package_modules() -> list[Path]:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = [name.split(".", 1)[1] for name in packages["packages"] if "." in name]
    return sorted(
        path for folder in folders for path in (ROOT / folder.replace(".", "/")).glob("*.py")
    )


def test_no_module_is_over_400_lines() -> None:
    modules = package_modules()
    assert len(modules) > 50
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these along their seams: {long}"


def test_the_loop_workflow_module_stays_small() -> None:
    assert len((ROOT / "workflows" / "loop.py").read_text().splitlines()) < 350
