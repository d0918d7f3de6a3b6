"""The documentation holds together: every relative link in README.md, SECURITY.md and
docs/*.md names a file that exists, every `#anchor` a heading of its target (GitHub's
slugs), the README stays short, and docs/configuration.md lists every setting there is.

Links are read from the markdown text outside code (fenced blocks and inline code spans
are examples, not links); absolute URLs are not fetched."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); the target up to whitespace or the closing paren.
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """Each line outside code blocks, with inline code spans blanked, numbered from 1."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        # Four spaces in: an indented code block (the README's commands).
        if not fenced and not line.startswith("    "):
            yield number, _CODE_SPAN.sub("", line)


def links(text: str) -> Iterator[tuple[int, str]]:
    """Every link target of the document's prose, with its line number."""
    for number, line in prose_lines(text):
        for match in _INLINE.finditer(line):
            yield number, match.group(1)
        reference = _REFERENCE.match(line)
        if reference:
            yield number, reference.group(1)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markdown markup dropped (links keep their
    text), lower case, every character but letters, digits, `_`, `-` and spaces removed,
    spaces turned into `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = unicodedata.normalize("NFC", text).strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in "_- ")
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors a document's headings produce, GitHub's `-1`, `-2` for repeats."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(document: Path) -> list[str]:
    """What is wrong with the relative links of `document`, one message per link."""
    problems: list[str] = []
    text = document.read_text(encoding="utf-8")
    for number, target in links(text):
        if not target or _SCHEME.match(target) or target.startswith("//"):
            continue
        path_part, _, anchor = target.partition("#")
        where = f"{document.name}:{number}: {target}"
        resolved = (document.parent / path_part).resolve() if path_part else document
        if not resolved.exists():
            problems.append(f"{where}: no such file {path_part}")
            continue
        if not anchor:
            continue
        if resolved.is_dir() or resolved.suffix != ".md":
            problems.append(f"{where}: an anchor into something other than markdown")
        elif anchor not in anchors(resolved.read_text(encoding="utf-8")):
            problems.append(f"{where}: {resolved.name} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("document", documents(), ids=lambda path: path.name)
def test_every_relative_link_resolves(document: Path) -> None:
    assert broken_links(document) == []


def test_the_docs_are_there() -> None:
    names = {path.name for path in documents()}
    assert {"README.md", "SECURITY.md", "architecture.md", "loop.md"} <= names


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Stop reasons\n\n## Stop reasons\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md#stop-reasons) [ok too](other.md#stop-reasons-1) [self](#page)\n"
        "[gone](missing.md) [no heading](other.md#stop-reason)\n"
        "[web](https://example.com/x#y) `[code](missing-in-code.md)`\n"
        "```\n[fenced](missing-in-a-fence.md)\n```\n"
        "[ref]: nowhere.md\n"
    )
    assert broken_links(page) == [
        "page.md:4: missing.md: no such file missing.md",
        "page.md:4: other.md#stop-reason: other.md has no heading #stop-reason",
        "page.md:9: nowhere.md: no such file nowhere.md",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Stop reasons", "stop-reasons"),
        ("The `loops` CLI", "the-loops-cli"),
        (
            "Agent loop: hand-written vs pydantic-ai Agent",
            "agent-loop-hand-written-vs-pydantic-ai-agent",
        ),
        ("An origin cannot fill a worker's disk", "an-origin-cannot-fill-a-workers-disk"),
        ("The delta playbook: runs learn from runs", "the-delta-playbook-runs-learn-from-runs"),
        ("Step 1 → 2 (**bold**)", "step-1--2-bold"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_setting_is_documented() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", page))
    names = {field.alias for field in Settings.model_fields.values() if field.alias}
    assert names - documented == set(), "settings missing from docs/configuration.md"
