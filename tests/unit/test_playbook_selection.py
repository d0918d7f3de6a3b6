"""Choosing the playbook items a run is given: relevance first, within a token budget."""

from __future__ import annotations

import pytest

from loopworks.playbook.selection import (
    estimate_tokens,
    id_key,
    item_tokens,
    playbook_tokens,
    select_items,
)
from loopworks.schemas.playbook import ItemKind, PlaybookItem

pytestmark = pytest.mark.unit


def item(
    item_id: str,
    content: str,
    *,
    section: str = "general",
    kind: ItemKind = ItemKind.SKILL,
    helpful: int = 0,
    harmful: int = 0,
) -> PlaybookItem:
    return PlaybookItem(
        id=item_id,
        kind=kind,
        section=section,
        content=content,
        helpful=helpful,
        harmful=harmful,
        created_in=1,
        updated_in=1,
    )


DOCKER = item("pb-1-1", "Build the image with `docker buildx bake`.", section="deploy")
PYTEST = item("pb-1-2", "Run pytest with -q -x to stop at the first failure.", section="testing")
DOCS = item("pb-1-3", "The API reference lives in docs/api.md.", section="docs")
ITEMS = [DOCKER, PYTEST, DOCS]


def ids(items: list[PlaybookItem]) -> list[str]:
    return [i.id for i in items]


def test_estimate_tokens_is_a_quarter_of_the_characters_and_at_least_one() -> None:
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 400) == 100
    assert item_tokens(DOCS) == estimate_tokens("docs: The API reference lives in docs/api.md.")


def test_the_most_relevant_item_comes_first() -> None:
    chosen = select_items(ITEMS, "Fix the failing pytest test in the testing suite", 1000)
    assert chosen[0] == PYTEST
    chosen = select_items(ITEMS, "Update the API reference docs", 1000)
    assert chosen[0] == DOCS


def test_a_small_playbook_is_given_whole() -> None:
    chosen = select_items(ITEMS, "Rename a variable", 1000)
    assert sorted(ids(chosen)) == ["pb-1-1", "pb-1-2", "pb-1-3"]


def test_the_budget_is_respected_and_relevant_items_win_it() -> None:
    # 15 tokens for PYTEST, 13 for DOCKER, 12 for DOCS.
    budget = item_tokens(PYTEST) + item_tokens(DOCS) - 1
    chosen = select_items(ITEMS, "the pytest failure", budget)
    assert ids(chosen) == ["pb-1-2"]
    assert playbook_tokens(chosen) <= budget
    assert select_items(ITEMS, "the pytest failure", 1) == []


def test_an_item_too_large_for_what_is_left_is_skipped_for_a_smaller_one() -> None:
    budget = item_tokens(PYTEST) + item_tokens(DOCS)
    # DOCKER ranks before DOCS (a tie, by id) but only DOCS fits in what is left.
    chosen = select_items(ITEMS, "the pytest failure", budget)
    assert ids(chosen) == ["pb-1-2", "pb-1-3"]
    assert playbook_tokens(chosen) == budget


def test_constraints_and_track_record_break_ties_but_never_beat_overlap() -> None:
    skill = item("pb-1-1", "Lint before commit.")
    constraint = item("pb-1-2", "Lint before commit!", kind=ItemKind.CONSTRAINT)
    harmful = item("pb-1-3", "Lint after commit.", harmful=50)
    proven = item("pb-1-4", "Lint before merge.", helpful=50)
    strong = item("pb-1-5", "Lint, then merge.", kind=ItemKind.CONSTRAINT, helpful=50)
    candidates = [skill, constraint, harmful, proven, strong]
    chosen = select_items(candidates, "lint before commit", 1000)
    # Three shared words for skill and constraint, two for harmful and proven, one for
    # strong, whose bonus and record do not lift it past a shared word.
    assert ids(chosen) == ["pb-1-2", "pb-1-1", "pb-1-4", "pb-1-3", "pb-1-5"]


def test_the_order_is_deterministic_with_ids_in_natural_order() -> None:
    tied = [item(f"pb-{v}-1", f"Note {v}.") for v in (10, 2, 1)]
    assert ids(select_items(tied, "unrelated", 1000)) == ["pb-1-1", "pb-2-1", "pb-10-1"]
    assert select_items(list(reversed(tied)), "unrelated", 1000) == select_items(
        tied, "unrelated", 1000
    )
    assert id_key("pb-2-1") < id_key("pb-10-1")
