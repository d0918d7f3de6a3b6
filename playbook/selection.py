"""Which playbook items a run is given: the most relevant to its task, within a budget.

Pure and deterministic (it may run inside a workflow): the same items and task always
give the same items, in the same order.
"""

from __future__ import annotations

import math
import re

from loopworks.playbook.similarity import words
from loopworks.schemas.playbook import ItemKind, PlaybookItem

# About four characters of English or code per token for the tokenizers in use.
CHARS_PER_TOKEN = 4
# Constraints are rules for all work in the repository, not for one kind of task, so
# they are worth giving even on a weaker word match.
CONSTRAINT_BONUS = 0.3
# The track record (helpful minus harmful) moves a score by less than this, either way.
# With the bonus, the most an item can gain over another is 0.3 + 2 * 0.3 < 1: both
# only order items of equal overlap, never lift one past an item sharing one more word.
PRIOR_WEIGHT = 0.3
_DIGITS = re.compile(r"(\d+)")


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` takes: characters / 4, rounded up, at least 1.

    An estimate, not a tokenizer: a budget only has to keep the playbook in the same
    order of size as intended, and a count that does not depend on which model reads
    the prompt stays the same on every replay of the workflow.
    """
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def item_tokens(item: PlaybookItem) -> int:
    """What one item costs in a prompt: its section heading and its content."""
    return estimate_tokens(f"{item.section}: {item.content}")


def playbook_tokens(items: list[PlaybookItem]) -> int:
    """What the whole list costs, the measure `PlaybookLimits.max_tokens` bounds."""
    return sum(item_tokens(item) for item in items)


def id_key(item_id: str) -> tuple[tuple[int, int | str], ...]:
    """`item_id` in natural order, so `pb-2-1` sorts before `pb-10-1` (string order
    would put it after); ids of another shape still sort, by their text."""
    parts = (part for part in _DIGITS.split(item_id) if part)
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in parts)


def relevance(item: PlaybookItem, task_words: set[str]) -> float:
    """The score that ranks items: how many distinct words the item (section and
    content) shares with the task, plus the constraint bonus, plus the bounded track
    record."""
    overlap = len(task_words & set(words(f"{item.section} {item.content}")))
    record = item.helpful - item.harmful
    prior = PRIOR_WEIGHT * record / (abs(record) + 1)
    bonus = CONSTRAINT_BONUS if item.kind == ItemKind.CONSTRAINT else 0.0
    return overlap + bonus + prior


def select_items(
    playbook_items: list[PlaybookItem], task: str, max_tokens: int
) -> list[PlaybookItem]:
    """The items most relevant to `task` whose estimated tokens fit in `max_tokens`,
    best first (score descending, then id).

    Items sharing a word with the task come first (bonus and record add less than one
    word); the others follow while budget remains, so a small playbook is given whole
    (a word match is a weak signal, and an unused budget helps no one). Filling is
    greedy: an item too large for what is left is skipped and smaller ones after it
    may still fit.
    """
    task_words = set(words(task))
    ranked = sorted(
        playbook_items, key=lambda item: (-relevance(item, task_words), id_key(item.id))
    )

    chosen: list[PlaybookItem] = []
    remaining = max_tokens
    for item in ranked:
        cost = item_tokens(item)
        if cost <= remaining:
            chosen.append(item)
            remaining -= cost
    return chosen
