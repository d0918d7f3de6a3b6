"""The offline model's answers for the delta playbook's roles (docs/playbook.md): the
reflector's tags, the task curator, and the skill sub-loop's generator, reflector and
curator.

Deterministic, like every offline answer. The task curator asks for nothing unless the
task says so, through markers anywhere in the task's text:

- `[skill:<name>]`: the curator asks for the Python helper `<name>` (`python_helpers`);
  the generator writes it at `.loops/skills/<name>.py`, a small stdlib script that counts
  the lines, words and characters of files and has a working `--self-test` (exit 0).
- `[skill-broken:<name>]`: the same, but the helper's `--self-test` fails (exit 1): the
  reflector still accepts it, so its check command is what rejects it. This is the
  failing sub-loop, which must leave the run completed and the playbook unchanged.
- `[reference:<text>]`: the curator asks for a reference note on `<text>`
  (`reference_requests`); the generator writes it as markdown at the path it is given.

A marker may appear more than once (`[skill:a] [skill:b]`); markers are left out of the
lesson the curator adds. Without markers the curator only proposes, on a successful run,
one `add` of a `constraint` naming the task's first acceptance criterion, unless a given
item already says the same (`loopworks.playbook.similarity`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import Any

from loopworks.llm.facts import SELF_TEST_FLAG
from loopworks.playbook.similarity import similarity
from loopworks.schemas.contexts import (
    SkillCuratorContext,
    SkillGeneratorContext,
    SkillReflectorContext,
    TaskCuratorContext,
)
from loopworks.schemas.curation import CONTENT_MAX, MAX_HELPERS, SECTION_MAX
from loopworks.schemas.playbook import ItemKind, PlaybookItem, PlaybookLimits, Tag
from loopworks.schemas.roles import Role

SKILL_MARKER = re.compile(r"\[skill:\s*([^\]]*?)\s*\]")
BROKEN_SKILL_MARKER = re.compile(r"\[skill-broken:\s*([^\]]*?)\s*\]")
REFERENCE_MARKER = re.compile(r"\[reference:\s*([^\]]*?)\s*\]")
_ANY_MARKER = re.compile(r"\[(?:skill|skill-broken|reference):[^\]]*\]")
# As alike as the playbook's own merge threshold: what it would merge, the curator skips.
_SAME = PlaybookLimits().similarity

# The reflector's tag of every item the run was given, by the run's outcome.
_TAG_BY_OUTCOME = {"success": Tag.HELPFUL, "partial": Tag.NEUTRAL, "failure": Tag.HARMFUL}


def playbook_tags(items: Sequence[PlaybookItem], outcome: str) -> list[dict[str, str]]:
    """One tag per item given: helpful on success, neutral when partial, harmful on failure."""
    tag = _TAG_BY_OUTCOME.get(outcome, Tag.NEUTRAL)
    return [{"item_id": item.id, "tag": tag.value} for item in items]


def _markers(pattern: re.Pattern[str], text: str) -> list[str]:
    return list(dict.fromkeys(m for m in pattern.findall(text) if m))


def _file_name(name: str) -> str:
    """A marker's name as the helper's file is named (`curation.helper_names`)."""
    return re.sub(r"[^a-z0-9_]+", "_", name.strip().lower()).strip("_")


def _plain(task: str) -> str:
    """The task on one line, without its markers."""
    return " ".join(_ANY_MARKER.sub(" ", task).split())


def _section(task: str) -> str:
    """The task's longest word (four letters or more), lowercased: a stable section."""
    words = sorted(re.findall(r"[A-Za-z]{4,}", _plain(task)), key=len, reverse=True)
    return (words[0].lower() if words else "general")[:SECTION_MAX]


# --- task curator ---------------------------------------------------------------------------


def _curate_task(ctx: TaskCuratorContext) -> dict[str, Any]:
    named = _markers(SKILL_MARKER, ctx.task) + _markers(BROKEN_SKILL_MARKER, ctx.task)
    helpers = list(dict.fromkeys(name for name in map(_file_name, named) if name))
    references = _markers(REFERENCE_MARKER, ctx.task)
    updates = []
    if ctx.outcome == "success":
        subject = _plain(ctx.task)[:120] or "the task"
        criterion = ctx.acceptance_criteria[0] if ctx.acceptance_criteria else None
        lesson = (
            f"For work like '{subject}', check first that: {criterion}"
            if criterion
            else f"Work like '{subject}' ended in {ctx.outcome}"
        )[:CONTENT_MAX]
        if not any(similarity(lesson, item.content) >= _SAME for item in ctx.playbook_items):
            section = _section(ctx.task)
            updates.append(
                {
                    "id": f"lesson-{section}"[:100],
                    "description": lesson,
                    "target": section,
                    "priority": "medium",
                    "kind": ItemKind.CONSTRAINT.value,
                    "action": "add",
                }
            )
    asked = f"; asked for {len(helpers)} helper(s) and {len(references)} reference(s)"
    summary = f"The run's outcome was {ctx.outcome}: proposed {len(updates)} update(s){asked}."
    return {
        "summary": summary,
        "proposed_updates": updates,
        "python_helpers": helpers[:MAX_HELPERS],
        "reference_requests": references[:MAX_HELPERS],
    }


# --- skill generator (an agent: the files it writes, then its closing line) ------------------


def _helper_script(path: str, task: str, broken: bool) -> str:
    name = PurePosixPath(path).stem
    # A wrong expectation: the self-test then fails, as a broken helper's would.
    words = 5 if broken else 4
    return f'''#!/usr/bin/env python3
"""{name}: count the lines, words and characters of files (standard library only).

Usage:
  python3 {path} [FILE ...]    print the counts of each FILE (standard input without one)
  python3 {path} {SELF_TEST_FLAG}   check the helper itself: exits 0 when it works
"""

# Asked for by the task: {_plain(task)[:200]}

from __future__ import annotations

import argparse
import sys

SAMPLE = "hello world\\nfoo bar\\n"
EXPECTED = {{"lines": 2, "words": {words}, "chars": 20}}


def counts(text: str) -> dict[str, int]:
    return {{"lines": len(text.splitlines()), "words": len(text.split()), "chars": len(text)}}


def self_test() -> int:
    got = counts(SAMPLE)
    if got != EXPECTED:
        print(f"self-test failed: {{got}} != {{EXPECTED}}")
        return 1
    print("self-test passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", nargs="*", help="files to count (default: standard input)")
    parser.add_argument("{SELF_TEST_FLAG}", action="store_true", help="run the self-test")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    sources = args.files or ["-"]
    for source in sources:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as handle:
                text = handle.read()
        found = counts(text)
        print(f"{{source}}: {{found['lines']}} lines, {{found['words']}} words, "
              f"{{found['chars']}} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _reference_note(request: str, task: str) -> str:
    return "\n".join(
        [
            f"# {request}",
            "",
            f"Written by the skill sub-loop for the task: {_plain(task)[:200]}",
            "",
            "## What to know",
            "",
            f"- {request}",
            "",
        ]
    )


def _generate_skills(ctx: SkillGeneratorContext) -> dict[str, Any]:
    broken = {_file_name(name) for name in _markers(BROKEN_SKILL_MARKER, ctx.task)}
    files = [
        {
            "path": path,
            "content": _helper_script(path, ctx.task, PurePosixPath(path).stem in broken),
        }
        for path in ctx.helper_paths
    ]
    files += [
        {"path": path, "content": _reference_note(request, ctx.task)}
        for request, path in zip(ctx.reference_requests, ctx.reference_paths, strict=False)
    ]
    return {
        "files": files,
        "changed": [f"wrote {file['path']}" for file in files],
        "summary": f"Wrote {len(ctx.helper_paths)} helper(s) and "
        f"{len(files) - len(ctx.helper_paths)} reference note(s)",
    }


# --- skill reflector ------------------------------------------------------------------------


def _review_skills(ctx: SkillReflectorContext) -> dict[str, Any]:
    reviews = []
    for path, content in ctx.files.items():
        helper = path in ctx.helper_paths or path.endswith(".py")
        if not content.strip():
            verdict, command, feedback = "REJECT", "", "the file is empty"
        elif helper:
            verdict, command = "ACCEPT", f"python3 {path} {SELF_TEST_FLAG}"
            feedback = "a documented stdlib helper with a self-test"
        else:
            verdict, command, feedback = "ACCEPT", "", "a reference note with content"
        reviews.append(
            {"path": path, "verdict": verdict, "check_command": command, "feedback": feedback}
        )
    return {"reviews": reviews}


# --- skill curator --------------------------------------------------------------------------


def _first_line(content: str) -> str:
    """The first line of a file that says something: not a shebang, without the markup of
    a heading or a docstring."""
    for line in content.splitlines():
        text = line.strip().strip('#"').strip()
        if text and not line.startswith("#!"):
            return text
    return ""


def _curate_skills(ctx: SkillCuratorContext) -> dict[str, Any]:
    deltas = []
    for accepted in ctx.accepted:
        path = accepted.review.path
        helper = bool(accepted.review.check_command) or path.endswith(".py")
        first = _first_line(accepted.content) or path
        if helper:
            kind, section = ItemKind.SKILL, "skills"
            content = (
                f"Helper `{path}`: {first} Run `python3 {path}` with its "
                f"arguments (`python3 {path} --help` prints its usage); "
                f"`{accepted.review.check_command}` checks it."
            )
        else:
            kind, section = ItemKind.REFERENCE, "references"
            content = (
                f"Reference note `{path}`: {first.rstrip('.')}. Read it when the work concerns it."
            )
        deltas.append(
            {"op": "ADD", "kind": kind.value, "section": section, "content": content[:CONTENT_MAX]}
        )
    skills = sum(d["kind"] == ItemKind.SKILL.value for d in deltas)
    summary = f"Recorded {skills} skill(s) and {len(deltas) - skills} reference(s)."
    return {"summary": summary, "deltas": deltas}


# Registered in `offline_answers._DEFAULTS`; each takes its role's context model.
CURATION_DEFAULTS: dict[Role, Callable[[Any], dict[str, Any]]] = {
    Role.TASK_CURATOR: _curate_task,
    Role.SKILL_GENERATOR: _generate_skills,
    Role.SKILL_REFLECTOR: _review_skills,
    Role.SKILL_CURATOR: _curate_skills,
}
