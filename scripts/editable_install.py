"""Does the editable install still cover the checkout? Exit 0 if so; otherwise name
what it lacks, and the command that refreshes it, and exit 1.

scripts/test.sh installs the checkout in setuptools' strict editable mode: a tree of
links under build/, one per file, that static tools (mypy, IDEs, import-linter) read as
the `loopworks` package, as Python does. The links follow edits, but a module or
prompt added since the install is missing there, and one removed leaves a dangling
link, until the install command runs again. Any other install (setuptools' default
import hook, a wheel) passes, unless `--require-link-tree` is given: static tools
cannot follow the import hook.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ".venv/bin/python -m pip install -e '.[test]' --config-settings editable_mode=strict"


def link_tree(root: Path) -> Path | None:
    """The `loopworks` directory of this checkout's strict editable install, if that is
    how loopworks is installed."""
    spec = importlib.util.find_spec("loopworks")
    locations = (spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location)
        if path.name == "loopworks" and path.resolve().parent.parent == root / "build":
            return path
    return None


def stale(root: Path, tree: Path) -> list[str]:
    """What the link tree lacks of the packages pyproject lists (their modules and
    package data), and its links whose file is gone."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_data: dict[str, list[str]] = setuptools.get("package-data", {})
    found = []
    for package in setuptools["packages"]:
        folder = root.joinpath(*package.split(".")[1:])
        for pattern in ["*.py", *package_data.get(package, [])]:
            for path in sorted(folder.glob(pattern)):
                relative = path.relative_to(root)
                if not (tree / relative).exists():
                    found.append(f"not installed: {relative}")
    for link in sorted(tree.rglob("*")):
        if link.is_symlink() and not link.exists():
            found.append(f"removed from the checkout: {link.relative_to(tree)}")
    return found


def main(argv: list[str]) -> int:
    tree = link_tree(ROOT)
    if tree is None:
        if "--require-link-tree" not in argv:
            return 0
        problems = ["loopworks is not installed from this checkout in strict editable mode"]
    else:
        problems = stale(ROOT, tree)
    if problems:
        lines = ["the editable install does not match the checkout:", *problems]
        print("\n  ".join(lines) + f"\nrefresh it: {INSTALL}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
