"""The code speaks for itself: no comment, docstring or prompt points at a document a reader
of this repository does not have (the seeds, issue numbers, a design file kept elsewhere),
and every pointer into the repository's own documents (`docs/loop.md#stop-reasons`,
`SECURITY.md#quotas`) names a file and a heading that exist.

The rule a comment relies on is stated where it applies; the longer story is in docs/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_docs_links import anchors

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# Not the project's own text: the virtualenv, build output, egg-info, caches.
_SKIPPED_DIRS = {".venv", "build", "__pycache__", "node_modules"}
# This file names what it looks for.
_THIS_FILE = Path(__file__).resolve()

# References into documents outside the repository.
_OUTSIDE = [
    re.compile(r"seed[ _]?\d", re.IGNORECASE),
    re.compile(r"issue \d", re.IGNORECASE),
    re.compile(r"DESIGN"),
]
# A pointer into the repository's own documents, with an optional anchor.
_POINTER = re.compile(r"(?<![\w/])((?:docs/[\w.-]+\.md|SECURITY\.md|README\.md))(?:#([\w-]+))?")


def _skipped(path: Path) -> bool:
    parts = path.relative_to(ROOT).parts[:-1]
    return any(
        part in _SKIPPED_DIRS or part.startswith(".") or part.endswith(".egg-info")
        for part in parts
    )


def sources() -> list[Path]:
    """The package's and the tests' Python files, and the prompts the models read."""
    found = [path for path in ROOT.rglob("*.py") if not _skipped(path) and path != _THIS_FILE]
    found += [path for path in (ROOT / "prompts").rglob("*.md") if not _skipped(path)]
    return sorted(found)


def _lines(path: Path) -> Iterator[tuple[str, str]]:
    text = path.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        yield f"{path.relative_to(ROOT)}:{number}", line


def outside_references() -> list[str]:
    return [
        f"{where}: {line.strip()}"
        for path in sources()
        for where, line in _lines(path)
        if any(pattern.search(line) for pattern in _OUTSIDE)
    ]


def broken_pointers() -> list[str]:
    """Pointers from the package's code into the docs (tests name files of the repositories
    they make, `docs/notes.md` among them, which are not ours)."""
    problems: list[str] = []
    for path in sources():
        if path.relative_to(ROOT).parts[0] == "tests":
            continue
        for where, line in _lines(path):
            for match in _POINTER.finditer(line):
                document, anchor = ROOT / match.group(1), match.group(2)
                if not document.is_file():
                    problems.append(f"{where}: no such file {match.group(1)}")
                elif anchor and anchor not in anchors(document.read_text(encoding="utf-8")):
                    problems.append(f"{where}: {match.group(1)} has no heading #{anchor}")
    return problems


def test_the_sweep_reads_the_package() -> None:
    names = {str(path.relative_to(ROOT)) for path in sources()}
    assert {
        "workflows/decisions.py",
        "schemas/run.py",
        "prompts/agents/critic.md",
        "tests/unit/test_task_graph.py",
    } <= names
    assert not any(name.startswith((".venv/", "build/")) for name in names)


def test_no_reference_to_documents_outside_the_repository() -> None:
    found = outside_references()
    assert found == [], "state the rule in our words, or point into docs/:\n" + "\n".join(found)


def test_every_pointer_into_the_docs_resolves() -> None:
    found = broken_pointers()
    assert found == [], "\n".join(found)
