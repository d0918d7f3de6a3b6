"""Applying delta batches to a playbook: each operation, merging, pruning, the budget."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loopworks.playbook.deltas import apply_batch, restore
from loopworks.playbook.selection import playbook_tokens
from loopworks.playbook.similarity import most_similar, normalise, similarity
from loopworks.schemas.playbook import (
    CONTENT_MAX,
    ITEM_ID_MAX,
    AddDelta,
    Delta,
    DeltaBatch,
    ItemKind,
    Playbook,
    PlaybookItem,
    PlaybookLimits,
    RemoveDelta,
    Tag,
    TagDelta,
    UpdateDelta,
)

pytestmark = pytest.mark.unit

LIMITS = PlaybookLimits()


def batch(*deltas: Delta, source: str = "run-1", batch_id: str = "b-1") -> DeltaBatch:
    return DeltaBatch(batch_id=batch_id, source=source, deltas=list(deltas))


def add(content: str, kind: ItemKind = ItemKind.SKILL, section: str = "testing") -> AddDelta:
    return AddDelta(kind=kind, section=section, content=content)


def item(
    item_id: str,
    content: str,
    *,
    kind: ItemKind = ItemKind.SKILL,
    version: int = 1,
    helpful: int = 0,
    harmful: int = 0,
) -> PlaybookItem:
    return PlaybookItem(
        id=item_id,
        kind=kind,
        section="testing",
        content=content,
        helpful=helpful,
        harmful=harmful,
        sources=["run-0"],
        created_in=version,
        updated_in=version,
    )


def playbook(*items: PlaybookItem, version: int = 1) -> Playbook:
    return Playbook(name="app-12345678", version=version, items=list(items))


LINT = "Run `ruff check` before committing any Python change."
DOCS = "The API reference lives in docs/api.md."


def test_normalise_drops_case_punctuation_markdown_and_stopwords() -> None:
    assert normalise("**Run** the `ruff check`,  before\ncommitting!") == (
        "run ruff check before committing"
    )


def test_similarity_catches_rewording_reordering_and_small_edits() -> None:
    assert similarity(LINT, "run RUFF CHECK before committing any python change") == 1.0
    assert similarity("lint before you commit", "before you commit, lint") >= 0.85
    assert similarity(LINT, "Run ruff check before comitting any Python change.") >= 0.85
    assert similarity(LINT, DOCS) < 0.5


def test_most_similar_looks_only_at_the_same_kind() -> None:
    items = [item("pb-1-1", LINT, kind=ItemKind.CONSTRAINT), item("pb-1-2", DOCS)]
    assert most_similar(LINT, items, ItemKind.REFERENCE) is None
    match = most_similar(LINT, items, ItemKind.CONSTRAINT)
    assert match is not None
    assert match[0].id == "pb-1-1"
    assert match[1] == 1.0


def test_add_makes_an_item_with_an_id_of_the_new_version() -> None:
    new, applied = apply_batch(playbook(version=3), batch(add(LINT), add(DOCS)), LIMITS)
    assert new.version == 4
    assert [i.id for i in new.items] == ["pb-4-1", "pb-4-2"]
    first = new.items[0]
    assert (first.content, first.sources, first.created_in, first.updated_in) == (
        LINT,
        ["run-1"],
        4,
        4,
    )
    assert applied.changed
    assert applied.version == 4
    assert [(o.op, o.result, o.item_id) for o in applied.outcomes] == [
        ("ADD", "added", "pb-4-1"),
        ("ADD", "added", "pb-4-2"),
    ]


def test_the_original_playbook_is_not_changed() -> None:
    before = playbook(item("pb-1-1", LINT))
    apply_batch(before, batch(TagDelta(item_id="pb-1-1", tag=Tag.HELPFUL)), LIMITS)
    assert before.items[0].helpful == 0
    assert before.items[0].updated_in == 1


def test_update_replaces_content_and_credits_the_source() -> None:
    new, applied = apply_batch(
        playbook(item("pb-1-1", LINT)),
        batch(UpdateDelta(item_id="pb-1-1", content="Run `make lint` first.")),
        LIMITS,
    )
    (updated,) = new.items
    assert updated.content == "Run `make lint` first."
    assert updated.sources == ["run-0", "run-1"]
    assert updated.updated_in == 2
    assert applied.outcomes[0].result == "updated"


@pytest.mark.parametrize(
    ("tag", "counts"),
    [(Tag.HELPFUL, (1, 0, 0)), (Tag.HARMFUL, (0, 1, 0)), (Tag.NEUTRAL, (0, 0, 1))],
)
def test_tag_counts_a_use(tag: Tag, counts: tuple[int, int, int]) -> None:
    # Two helpful uses, so one harmful tag does not prune it.
    start = item("pb-1-1", LINT, helpful=2)
    new, applied = apply_batch(playbook(start), batch(TagDelta(item_id="pb-1-1", tag=tag)), LIMITS)
    (tagged,) = new.items
    assert (tagged.helpful - 2, tagged.harmful, tagged.neutral) == counts
    assert tagged.updated_in == 2
    assert tagged.sources == ["run-0"]
    assert applied.outcomes[0].result == "tagged"


def test_remove_drops_the_item() -> None:
    new, applied = apply_batch(
        playbook(item("pb-1-1", LINT), item("pb-1-2", DOCS)),
        batch(RemoveDelta(item_id="pb-1-1", reason="obsolete")),
        LIMITS,
    )
    assert [i.id for i in new.items] == ["pb-1-2"]
    assert applied.outcomes[0].result == "removed"


@pytest.mark.parametrize(
    "delta",
    [
        {"op": "TAG", "item_id": "pb-1-1-" + "x" * ITEM_ID_MAX, "tag": "helpful"},
        {"op": "UPDATE", "item_id": "x" * (ITEM_ID_MAX + 1), "content": "x"},
        {"op": "REMOVE", "item_id": "", "reason": "x"},
        {"op": "REMOVE", "item_id": "pb-1-1", "reason": "x" * (CONTENT_MAX + 1)},
    ],
)
def test_a_delta_names_an_id_and_a_reason_of_bounded_length(delta: dict[str, str]) -> None:
    """Every outcome echoes the id its delta named: an id of any length would let one
    batch make its answer, and what the writer kept of it, as large as it likes."""
    with pytest.raises(ValidationError):
        DeltaBatch.model_validate({"batch_id": "b-1", "source": "s", "deltas": [delta]})


def test_an_answer_counts_its_results() -> None:
    deltas = [TagDelta(item_id="pb-1-1", tag=Tag.HELPFUL), add(DOCS), RemoveDelta(item_id="pb-9-9")]
    _, applied = apply_batch(playbook(item("pb-1-1", LINT)), batch(*deltas), LIMITS)
    assert applied.results == {"added": 1, "tagged": 1, "unknown_item": 1}


@pytest.mark.parametrize(
    "delta",
    [
        UpdateDelta(item_id="pb-9-9", content="x"),
        TagDelta(item_id="pb-9-9", tag=Tag.HELPFUL),
        RemoveDelta(item_id="pb-9-9"),
    ],
)
def test_unknown_id_changes_nothing_and_the_rest_of_the_batch_applies(delta: Delta) -> None:
    new, applied = apply_batch(playbook(item("pb-1-1", LINT)), batch(delta, add(DOCS)), LIMITS)
    assert [(o.result, o.item_id) for o in applied.outcomes] == [
        ("unknown_item", "pb-9-9"),
        ("added", "pb-2-1"),
    ]
    assert [i.id for i in new.items] == ["pb-1-1", "pb-2-1"]
    assert new.items[0] == item("pb-1-1", LINT)


def test_duplicate_add_merges_into_the_existing_item() -> None:
    new, applied = apply_batch(
        playbook(item("pb-1-1", LINT), item("pb-1-2", DOCS)),
        batch(add("run RUFF check before committing any python change!!")),
        LIMITS,
    )
    assert [i.id for i in new.items] == ["pb-1-1", "pb-1-2"]
    merged = new.items[0]
    assert merged.content == LINT
    assert merged.sources == ["run-0", "run-1"]
    assert merged.updated_in == 2
    assert merged.helpful == 0
    assert [(o.result, o.item_id) for o in applied.outcomes] == [("merged", "pb-1-1")]


def test_an_item_names_its_first_and_latest_sources_and_counts_the_rest() -> None:
    """Every run that learns a lesson again joins its sources, which neither budget
    counts, yet every prompt given the item carries them whole."""
    current = playbook(item("pb-1-1", LINT))
    for n in range(1, 2001):
        merge = batch(add(LINT), source=f"run-{n:04d}", batch_id=f"b-{n}")
        current, _ = apply_batch(current, merge, LIMITS)
    (merged,) = current.items
    assert merged.sources == ["run-0", "run-0001", "run-1998", "run-1999", "run-2000"]
    assert merged.more_sources == 1996
    assert len(merged.to_line()) < 500
    # An item never merged into that often is written as it always was.
    assert "more_sources" not in item("pb-1-2", DOCS).to_line()


def test_duplicate_add_within_one_batch_merges_into_the_earlier_one() -> None:
    new, applied = apply_batch(
        playbook(version=0), batch(add(LINT), add(DOCS), add(LINT.upper().replace("`", ""))), LIMITS
    )
    assert [i.id for i in new.items] == ["pb-1-1", "pb-1-2"]
    assert new.items[0].sources == ["run-1"]
    assert [(o.result, o.item_id) for o in applied.outcomes] == [
        ("added", "pb-1-1"),
        ("added", "pb-1-2"),
        ("merged", "pb-1-1"),
    ]


def test_the_same_text_of_another_kind_is_not_merged() -> None:
    new, applied = apply_batch(
        playbook(item("pb-1-1", LINT, kind=ItemKind.SKILL)),
        batch(add(LINT, kind=ItemKind.CONSTRAINT)),
        LIMITS,
    )
    assert [(i.id, i.kind) for i in new.items] == [
        ("pb-1-1", ItemKind.SKILL),
        ("pb-2-1", ItemKind.CONSTRAINT),
    ]
    assert applied.outcomes[0].result == "added"


def test_items_tagged_harmful_as_often_as_helpful_are_pruned() -> None:
    new, applied = apply_batch(
        playbook(
            item("pb-1-1", LINT, helpful=1),
            item("pb-1-2", DOCS, helpful=2),
            item("pb-1-3", "Use uv to install packages.", helpful=1),
        ),
        batch(
            TagDelta(item_id="pb-1-1", tag=Tag.HARMFUL),
            TagDelta(item_id="pb-1-2", tag=Tag.HARMFUL),
        ),
        LIMITS,
    )
    assert [i.id for i in new.items] == ["pb-1-2", "pb-1-3"]
    assert applied.pruned == ["pb-1-1"]


def test_items_unused_for_n_versions_are_pruned() -> None:
    limits = PlaybookLimits(unused_after=3)
    new, applied = apply_batch(
        playbook(
            item("pb-1-1", LINT, version=1),
            item("pb-2-1", DOCS, version=2),
            version=3,
        ),
        batch(add("Use uv to install packages.")),
        limits,
    )
    # Version 4: pb-1-1 was last used 3 versions before, pb-2-1 only 2.
    assert [i.id for i in new.items] == ["pb-2-1", "pb-4-1"]
    assert applied.pruned == ["pb-1-1"]


def sized(prefix: str, chars: int) -> str:
    """Content of exactly `chars` characters, distinct per prefix."""
    return (prefix + " " + "filler " * chars)[:chars]


def test_the_budget_drops_the_lowest_value_item_first() -> None:
    # Each item is 100 tokens: "testing: " and 391 characters of content.
    items = [
        item("pb-1-1", sized("alpha", 391), helpful=3),
        item("pb-1-2", sized("beta", 391), helpful=1, harmful=0),
        item("pb-1-3", sized("gamma", 391), helpful=2),
    ]
    before = playbook(*items)
    assert playbook_tokens(before.items) == 300
    limits = PlaybookLimits(max_tokens=250, similarity=1.0)
    new, applied = apply_batch(before, batch(add("Use uv to install packages.")), limits)
    assert applied.pruned == ["pb-1-2"]
    assert [i.id for i in new.items] == ["pb-1-1", "pb-1-3", "pb-2-1"]
    assert playbook_tokens(new.items) <= 250


def test_the_budget_ties_go_to_the_least_recently_used_then_the_oldest() -> None:
    items = [
        item("pb-1-1", sized("alpha", 391), version=2),
        item("pb-1-2", sized("beta", 391), version=1),
        item("pb-1-3", sized("gamma", 391), version=1),
    ]
    limits = PlaybookLimits(max_tokens=150, similarity=1.0)
    new, applied = apply_batch(playbook(*items, version=2), batch(add("Use uv.")), limits)
    assert applied.pruned == ["pb-1-2", "pb-1-3"]
    assert [i.id for i in new.items] == ["pb-1-1", "pb-3-1"]


def test_the_budget_evicts_what_this_batch_wrote_only_when_it_alone_is_too_big() -> None:
    old = item("pb-1-1", "Use uv to install packages.", helpful=5)
    limits = PlaybookLimits(max_tokens=100)
    # 94 tokens: fits alone, not with the old item's 9.
    new, applied = apply_batch(playbook(old), batch(add(sized("big", 365))), limits)
    # The new item is worth 0 and the old one 5, yet the old one goes.
    assert applied.pruned == ["pb-1-1"]
    assert [i.id for i in new.items] == ["pb-2-1"]
    assert playbook_tokens(new.items) <= 100

    # 303 tokens: more than the whole budget, so it goes and the old item stays; the
    # items end as they began, so no version is made, but the report says what happened.
    before = playbook(old)
    new, applied = apply_batch(before, batch(add(sized("huge", 1200))), limits)
    assert new is before
    assert not applied.changed
    assert applied.outcomes[0].result == "added"
    assert applied.pruned == ["pb-2-1"]


def test_a_batch_that_changes_nothing_makes_no_version() -> None:
    before = playbook(item("pb-1-1", LINT), version=4)
    new, applied = apply_batch(before, batch(RemoveDelta(item_id="pb-1-9")), LIMITS)
    assert new is before
    assert (applied.version, applied.changed, applied.pruned) == (4, False, [])
    assert applied.outcomes[0].result == "unknown_item"

    new, applied = apply_batch(before, batch(), LIMITS)
    assert new is before
    assert not applied.changed


def test_ids_are_never_reused_after_a_removal() -> None:
    first, _ = apply_batch(playbook(version=0), batch(add(LINT)), LIMITS)
    second, _ = apply_batch(first, batch(RemoveDelta(item_id="pb-1-1")), LIMITS)
    third, applied = apply_batch(second, batch(add(LINT)), LIMITS)
    assert [i.id for i in third.items] == ["pb-3-1"]
    assert applied.outcomes[0].item_id == "pb-3-1"

    # Within one batch too: removing the item just added frees no number.
    fourth, _ = apply_batch(
        third, batch(add(DOCS), RemoveDelta(item_id="pb-4-1"), add("Use uv.")), LIMITS
    )
    assert [i.id for i in fourth.items] == ["pb-3-1", "pb-4-2"]


def test_restore_makes_a_new_version_with_the_target_items() -> None:
    target = [item("pb-1-1", LINT, helpful=2)]
    current = playbook(item("pb-1-1", LINT, helpful=2, harmful=2), item("pb-5-1", DOCS), version=5)
    restored, applied = restore(current, target, "rollback-1")
    assert restored.version == 6
    assert restored.name == current.name
    assert restored.items == target
    assert (applied.batch_id, applied.version, applied.changed) == ("rollback-1", 6, True)
    assert applied.outcomes == []

    again, applied = restore(restored, target, "rollback-2")
    assert again.version == 7
    assert applied.changed
