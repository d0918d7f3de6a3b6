"""The task curator's payload (docs/playbook.md#deltas), and how code turns what curating
roles answer into playbook deltas: updates by action, tags only for items the run was
given, file-safe helper names and reference paths."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loopworks.schemas.curation import (
    REFERENCES_DIR,
    CuratorPayload,
    ItemTag,
    curated_deltas,
    helper_names,
    helper_path,
    reference_paths,
    tag_deltas,
)
from loopworks.schemas.playbook import (
    ITEM_ID_MAX,
    AddDelta,
    ItemKind,
    RemoveDelta,
    Tag,
    TagDelta,
    UpdateDelta,
)

pytestmark = pytest.mark.unit


def test_the_curators_payload_validates_with_its_optional_lists_defaulting_to_empty() -> None:
    payload = CuratorPayload.model_validate({"summary": "Nothing new to record."})
    assert payload.proposed_updates == []
    assert payload.python_helpers == [] and payload.reference_requests == []
    full = CuratorPayload.model_validate(
        {
            "summary": "Record the test command; generate a link checker.",
            "proposed_updates": [
                {
                    "id": "u1",
                    "description": "Run make check",
                    "target": "testing",
                    "priority": "high",
                },
            ],
            "python_helpers": ["check_links"],
            "reference_requests": ["how releases are cut"],
        }
    )
    assert full.proposed_updates[0].kind == ItemKind.CONSTRAINT  # the default kind
    assert full.proposed_updates[0].action == "add"


@pytest.mark.parametrize(
    "bad",
    [
        {},  # summary is required
        {"summary": ""},
        {"summary": "x", "proposed_updates": [{"id": "u", "description": "d", "target": "t"}]},
        {
            "summary": "x",
            "proposed_updates": [
                {"id": "u", "description": "d", "target": "t", "priority": "urgent"}
            ],
        },
        {
            "summary": "x",
            "proposed_updates": [
                {
                    "id": "u",
                    "description": "d",
                    "target": "t",
                    "priority": "low",
                    "action": "rewrite",
                }
            ],
        },
        {"summary": "x", "python_helpers": ["a", "b", "c", "d", "e", "f"]},
        {"summary": "x", "surprise": True},
    ],
)
def test_a_payload_outside_the_schema_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        CuratorPayload.model_validate(bad)


def test_proposed_updates_become_deltas_by_their_action() -> None:
    payload = CuratorPayload.model_validate(
        {
            "summary": "s",
            "proposed_updates": [
                {
                    "id": "new",
                    "description": "Use tabs",
                    "target": "style",
                    "priority": "low",
                    "kind": "skill",
                },
                {
                    "id": "pb-1-1",
                    "description": "Use four spaces",
                    "target": "style",
                    "priority": "medium",
                    "action": "update",
                },
                {
                    "id": "pb-2-1",
                    "description": "It was wrong",
                    "target": "style",
                    "priority": "high",
                    "action": "remove",
                },
            ],
        }
    )
    assert curated_deltas(payload) == [
        AddDelta(kind=ItemKind.SKILL, section="style", content="Use tabs"),
        UpdateDelta(item_id="pb-1-1", content="Use four spaces"),
        RemoveDelta(item_id="pb-2-1", reason="It was wrong"),
    ]


def test_tags_count_only_for_items_the_run_was_given_and_once_each() -> None:
    tags = [
        ItemTag(item_id="pb-1-1", tag=Tag.HELPFUL),
        ItemTag(item_id="pb-9-9", tag=Tag.HARMFUL),  # never given: a guess
        ItemTag(item_id="pb-1-1", tag=Tag.HARMFUL),  # a second tag on the same item
        ItemTag(item_id="pb-2-1", tag=Tag.NEUTRAL),
    ]
    assert tag_deltas(tags, ["pb-1-1", "pb-2-1"]) == [
        TagDelta(item_id="pb-1-1", tag=Tag.HELPFUL),
        TagDelta(item_id="pb-2-1", tag=Tag.NEUTRAL),
    ]


def test_an_item_whose_id_is_longer_than_a_delta_may_name_is_not_tagged() -> None:
    """An item written by hand on the playbook's branch may have any id: building a TAG
    naming a longer one than a delta takes would fail the run's workflow task."""
    long = "use-tabs-" + "x" * ITEM_ID_MAX
    tags = [ItemTag(item_id=ident, tag=Tag.HELPFUL) for ident in (long, "use-tabs", "pb-2-1")]
    assert tag_deltas(tags, [long, "use-tabs", "pb-2-1"]) == [
        TagDelta(item_id="use-tabs", tag=Tag.HELPFUL),
        TagDelta(item_id="pb-2-1", tag=Tag.HELPFUL),
    ]


def test_helper_names_are_file_safe_and_unique() -> None:
    payload = CuratorPayload(
        summary="s", python_helpers=["Check Links", "check_links", "2fa-codes", "../etc"]
    )
    names = helper_names(payload)
    assert names == ["check_links", "helper_2fa_codes", "etc"]
    assert helper_path(names[0]) == ".loops/skills/check_links.py"


def test_reference_notes_get_a_numbered_path_each() -> None:
    paths = reference_paths(["How releases are cut", "How releases are cut", "!!"])
    assert paths == [
        f"{REFERENCES_DIR}/01-how-releases-are-cut.md",
        f"{REFERENCES_DIR}/02-how-releases-are-cut.md",
        f"{REFERENCES_DIR}/03-note.md",
    ]
