"""The files a playbook keeps with its items (docs/playbook.md#files), as pure logic: which
item a batch's file goes with, what a version holds, what its commit must add, what a
rollback brings back, what a batch may carry, and what of the skill sub-loop's files and
deltas reaches it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from loopworks.activities.skills import _read_files
from loopworks.playbook.deltas import apply_batch, new_contents, restore
from loopworks.schemas.contexts import AcceptedFile
from loopworks.schemas.curation import HelperReview, HelperVerdict
from loopworks.schemas.learning import CUT_NOTE, fits, kept_files, without_missing_files
from loopworks.schemas.playbook import (
    FILE_MAX_CHARS,
    AddDelta,
    DeltaBatch,
    ItemKind,
    Playbook,
    PlaybookItem,
    PlaybookLimits,
    RemoveDelta,
    Tag,
    TagDelta,
    UpdateDelta,
    blob_id,
    files_named,
)

pytestmark = pytest.mark.unit

LIMITS = PlaybookLimits()
HELPER = ".loops/skills/count_words.py"
NOTE = ".loops/references/01-tests.md"
CODE = "print('count')\n"


def skill(content: str) -> AddDelta:
    return AddDelta(kind=ItemKind.SKILL, section="skills", content=content)


def learnt() -> Playbook:
    """Version 1: one skill naming the helper, stored with it."""
    batch = DeltaBatch(
        batch_id="run-1:skill",
        source="run-1",
        deltas=[skill(f"Count words with `python3 {HELPER} FILE`")],
        files={HELPER: CODE},
    )
    playbook, applied = apply_batch(Playbook(name="p"), batch, LIMITS)
    assert applied.changed
    return playbook


def test_an_item_gets_the_files_its_content_names_and_the_version_holds_them() -> None:
    batch = DeltaBatch(
        batch_id="b",
        source="run-1",
        deltas=[
            skill(f"Count words with `python3 {HELPER} FILE`"),
            AddDelta(kind=ItemKind.CONSTRAINT, section="style", content="Wrap at 88"),
        ],
        files={HELPER: CODE, NOTE: "# tests\n"},
    )
    playbook, _ = apply_batch(Playbook(name="p"), batch, LIMITS)
    helper, rule = playbook.items
    assert (helper.files, rule.files) == ([HELPER], [])
    # The note no item names is not kept.
    assert playbook.files == {HELPER: blob_id(CODE)}
    assert new_contents(playbook, batch) == {HELPER: CODE}
    assert playbook.files_of([rule]) == {} and playbook.files_of([helper]) == playbook.files


def test_blob_id_is_gits() -> None:
    made = subprocess.run(
        ["git", "hash-object", "--stdin"], input=CODE, capture_output=True, text=True, check=True
    )
    assert blob_id(CODE) == made.stdout.strip()


def test_removing_the_item_takes_its_file_out_of_the_next_version() -> None:
    playbook = learnt()
    gone = DeltaBatch(
        batch_id="b2", source="alice", deltas=[RemoveDelta(item_id=playbook.items[0].id)]
    )
    after, applied = apply_batch(playbook, gone, LIMITS)
    assert applied.changed and after.items == [] and after.files == {}


def test_an_update_keeps_the_files_its_content_still_names_and_takes_new_ones() -> None:
    playbook = learnt()
    item_id = playbook.items[0].id
    dropped = DeltaBatch(
        batch_id="b2",
        source="alice",
        deltas=[UpdateDelta(item_id=item_id, content="Count words by hand")],
    )
    after, _ = apply_batch(playbook, dropped, LIMITS)
    assert after.items[0].files == [] and after.files == {}

    newer = "print('count, faster')\n"
    replaced = DeltaBatch(
        batch_id="b3",
        source="run-2",
        deltas=[UpdateDelta(item_id=item_id, content=f"Run `python3 {HELPER}`")],
        files={HELPER: newer},
    )
    after, _ = apply_batch(playbook, replaced, LIMITS)
    assert after.items[0].files == [HELPER]
    assert after.files == {HELPER: blob_id(newer)}
    assert new_contents(after, replaced) == {HELPER: newer}


def test_a_merged_add_refreshes_the_items_file() -> None:
    playbook = learnt()
    newer = "print('count v2')\n"
    again = DeltaBatch(
        batch_id="b2",
        source="run-2",
        deltas=[skill(f"Count words with `python3 {HELPER} FILE`.")],
        files={HELPER: newer},
    )
    after, applied = apply_batch(playbook, again, LIMITS)
    assert applied.outcomes[0].result == "merged"
    assert after.items[0].files == [HELPER]
    assert after.files == {HELPER: blob_id(newer)}


def test_the_same_file_again_makes_no_version() -> None:
    playbook = learnt()
    same = DeltaBatch(batch_id="b2", source="run-1", deltas=[], files={HELPER: CODE})
    after, applied = apply_batch(playbook, same, LIMITS)
    assert not applied.changed and after is playbook


def test_a_rollback_brings_back_the_files_the_old_items_named() -> None:
    playbook = learnt()
    emptied, _ = apply_batch(
        playbook,
        DeltaBatch(batch_id="b2", source="a", deltas=[RemoveDelta(item_id=playbook.items[0].id)]),
        LIMITS,
    )
    back, _ = restore(emptied, playbook.items, "rollback:3:to:1", playbook.files)
    assert back.files == playbook.files and back.version == 3
    before, _ = restore(back, emptied.items, "rollback:4:to:2", emptied.files)
    assert before.files == {}


def test_a_line_without_files_is_written_as_before() -> None:
    old = PlaybookItem(
        id="pb-1-1", kind=ItemKind.SKILL, section="s", content="c", created_in=1, updated_in=1
    )
    assert '"files"' not in old.to_line()
    read = Playbook.from_jsonl("p", 1, old.to_line() + "\n")
    assert read.items == [old]
    with_file = old.model_copy(update={"files": [HELPER]})
    assert f'"files":["{HELPER}"]' in with_file.to_line()
    # Files no item names are not the version's, whatever the tree held.
    read = Playbook.from_jsonl("p", 1, old.to_line(), {HELPER: "ab" * 20})
    assert read.files == {}


@pytest.mark.parametrize(
    "path", ["README.md", ".loops/skills/../x.py", ".loops/skills/a/b.py", ".loops/run.json"]
)
def test_a_batch_carries_only_helpers_and_notes(path: str) -> None:
    with pytest.raises(ValidationError):
        DeltaBatch(batch_id="b", source="s", files={path: "x"})


def test_a_batch_file_is_capped() -> None:
    with pytest.raises(ValidationError):
        DeltaBatch(batch_id="b", source="s", files={HELPER: "x" * (FILE_MAX_CHARS + 1)})


def accepted(path: str, content: str) -> AcceptedFile:
    review = HelperReview(path=path, verdict=HelperVerdict.ACCEPT)
    return AcceptedFile(review=review, content=content)


def test_a_file_the_generators_read_may_have_cut_is_not_stored() -> None:
    cut = "x" * FILE_MAX_CHARS
    assert kept_files([accepted(HELPER, CODE), accepted(NOTE, cut)]) == {HELPER: CODE}


def test_a_file_too_long_to_store_is_carried_marked_as_cut(tmp_path: Path) -> None:
    """The sub-loop carries a generated file whole when the playbook could store it, and
    otherwise its start with a note saying it was cut: never a cut file posing as whole."""
    (tmp_path / ".loops/skills").mkdir(parents=True)
    short, longest = CODE, "x" * (FILE_MAX_CHARS - 1)
    long = "".join(f"print({n})\n" for n in range(FILE_MAX_CHARS // 5))
    for name, text in (("short.py", short), ("longest.py", longest), ("long.py", long)):
        (tmp_path / ".loops/skills" / name).write_text(text)
    paths = [f".loops/skills/{name}" for name in ("short.py", "longest.py", "long.py")]

    read = _read_files(tmp_path, paths)

    assert read[paths[0]] == short and read[paths[1]] == longest
    assert read[paths[2]] == long[:FILE_MAX_CHARS] + CUT_NOTE
    assert f"shorter than {FILE_MAX_CHARS:,} characters" in CUT_NOTE
    assert [fits(text) for text in read.values()] == [True, True, False]
    assert kept_files([accepted(path, text) for path, text in read.items()]) == {
        paths[0]: short,
        paths[1]: longest,
    }


def test_the_skill_curators_deltas_naming_a_file_later_runs_would_not_get_are_dropped() -> None:
    """An item is given the batch's files its content names, and an updated one keeps its
    own: a delta naming any other helper or note would send later runs to a missing file."""
    other = ".loops/skills/check_links.py"
    item = PlaybookItem(
        id="pb-1-1",
        kind=ItemKind.SKILL,
        section="skills",
        content=f"Run `{other}`.",
        created_in=1,
        updated_in=1,
        files=[other],
    )
    deltas = [
        skill(f"Count words with `python3 {HELPER} FILE`."),
        skill(f"Check links with python3 {other}."),
        UpdateDelta(item_id="pb-1-1", content=f"Run `python3 {other}` before `{HELPER}`."),
        UpdateDelta(item_id="pb-1-1", content=f"Read {NOTE} first."),
        TagDelta(item_id="pb-1-1", tag=Tag.HELPFUL),
        skill("Run the tests with `python3 -m unittest` (helpers live in `.loops/skills/`)."),
    ]

    recorded, dropped = without_missing_files(deltas, {HELPER: CODE}, [item])

    assert recorded == [deltas[0], deltas[2], deltas[4], deltas[5]]
    assert dropped == [
        f"ADD naming {other}: not a file kept",
        f"UPDATE naming {NOTE}: not a file kept",
    ]
    assert files_named(f"See {NOTE}. Then `{HELPER}`, and {NOTE} again.") == [NOTE, HELPER]
