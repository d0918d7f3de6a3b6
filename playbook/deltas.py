"""Applying a batch of deltas to a playbook (docs/playbook.md#deltas, after ACE): models
propose, code applies.

Pure and deterministic, no clock, no randomness, no I/O: `PlaybookWorkflow` calls it
inside the workflow, so every replay makes the same version. A batch is applied to a
copy; the playbook passed in is never changed.

Decisions, each for a reason:

- An ADD that is a near-duplicate (`similarity >= limits.similarity`) of an item of the
  same kind is *merged*: the existing content stays (curated text does not churn
  because a run reworded it; UPDATE is how content changes), the batch's source joins
  its sources (the first two and the latest three: the others are counted in
  `more_sources`), and its `updated_in` moves to the new version, since a lesson learnt
  again is still in use. Its helpful count does not move: that counts uses that
  helped, and rediscovering a lesson is not using it.
- An UPDATE, TAG or REMOVE of an unknown id changes nothing and the rest of the batch
  still applies: a model may name an item another batch removed a moment before.
- Pruning runs after the deltas: an item tagged harmful at least as often as helpful
  goes; an item no version has used for `limits.unused_after` versions goes; then,
  while the playbook is over its token budget, the lowest-value item goes (value =
  helpful - harmful; ties: least recently used, then earliest added). Items whose
  content this batch wrote (added, merged into, updated) are kept ahead of older ones,
  so a new lesson gets a chance to be used before the budget can evict it, unless
  they alone exceed the budget: then the lowest-value of them go until they fit. The
  budget always holds.
- Files (docs/playbook.md#files): a batch may bring files (helpers, reference notes);
  an ADD or UPDATE whose content names a file's path gets it, and the version holds
  exactly the files its items name. A merged ADD refreshes the item's files with the
  batch's; an UPDATE's item keeps the files its new content still names; a file no
  item names any more (removed, pruned, rolled back) leaves the version.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopworks.playbook.selection import item_tokens, playbook_tokens
from loopworks.playbook.similarity import most_similar
from loopworks.schemas.playbook import (
    SOURCES_FIRST,
    SOURCES_LATEST,
    AddDelta,
    AppliedBatch,
    DeltaBatch,
    DeltaOutcome,
    Playbook,
    PlaybookItem,
    PlaybookLimits,
    RemoveDelta,
    Tag,
    TagDelta,
    UpdateDelta,
    blob_id,
    item_id,
)


@dataclass
class _Draft:
    """The items of the version being made, and what the batch did to them so far."""

    version: int
    source: str
    items: list[PlaybookItem]
    files: dict[str, str] = field(default_factory=dict)
    batch_files: dict[str, str] = field(default_factory=dict)
    added: int = 0
    written: set[str] = field(default_factory=set)
    cap_sources: bool = True

    def attach(self, item: PlaybookItem, content: str) -> None:
        """Give `item` the batch's files its `content` names; it keeps those of its own
        that `content` still names."""
        named = named_files(content, self.batch_files)
        kept = [path for path in item.files if path in content and path not in named]
        item.files = sorted([*kept, *named])
        for path in named:
            self.files[path] = blob_id(self.batch_files[path])

    def find(self, target: str) -> PlaybookItem | None:
        return next((item for item in self.items if item.id == target), None)

    def touch(self, item: PlaybookItem, *, sourced: bool) -> None:
        """Mark `item` used by this version, crediting the batch's source if `sourced`."""
        item.updated_in = self.version
        if sourced and self.source not in item.sources:
            item.sources.append(self.source)
            kept = SOURCES_FIRST + SOURCES_LATEST
            if self.cap_sources and len(item.sources) > kept:
                item.more_sources += len(item.sources) - kept
                item.sources = item.sources[:SOURCES_FIRST] + item.sources[-SOURCES_LATEST:]

    def next_id(self) -> str:
        """The next unused id of this version. Ids embed the version that added them and
        versions only grow, so no id is ever reused, even after its item was removed."""
        taken = {item.id for item in self.items}
        while True:
            self.added += 1
            candidate = item_id(self.version, self.added)
            if candidate not in taken:
                return candidate


def _add(draft: _Draft, delta: AddDelta, threshold: float) -> DeltaOutcome:
    match = most_similar(delta.content, draft.items, delta.kind)
    if match is not None and match[1] >= threshold:
        existing = match[0]
        draft.touch(existing, sourced=True)
        if named_files(delta.content, draft.batch_files):
            draft.attach(existing, existing.content + "\n" + delta.content)
        draft.written.add(existing.id)
        return DeltaOutcome(op="ADD", result="merged", item_id=existing.id)
    new = PlaybookItem(
        id=draft.next_id(),
        kind=delta.kind,
        section=delta.section,
        content=delta.content,
        sources=[draft.source],
        created_in=draft.version,
        updated_in=draft.version,
    )
    draft.attach(new, delta.content)
    draft.items.append(new)
    draft.written.add(new.id)
    return DeltaOutcome(op="ADD", result="added", item_id=new.id)


def _update(draft: _Draft, delta: UpdateDelta) -> DeltaOutcome:
    item = draft.find(delta.item_id)
    if item is None:
        return DeltaOutcome(op="UPDATE", result="unknown_item", item_id=delta.item_id)
    item.content = delta.content
    draft.attach(item, delta.content)
    draft.touch(item, sourced=True)
    draft.written.add(item.id)
    return DeltaOutcome(op="UPDATE", result="updated", item_id=item.id)


def _tag(draft: _Draft, delta: TagDelta) -> DeltaOutcome:
    item = draft.find(delta.item_id)
    if item is None:
        return DeltaOutcome(op="TAG", result="unknown_item", item_id=delta.item_id)
    if delta.tag == Tag.HELPFUL:
        item.helpful += 1
    elif delta.tag == Tag.HARMFUL:
        item.harmful += 1
    else:
        item.neutral += 1
    # A tag reports a use; the tagging run's id stays out of sources, which name the
    # runs the lesson came from.
    draft.touch(item, sourced=False)
    return DeltaOutcome(op="TAG", result="tagged", item_id=item.id)


def _remove(draft: _Draft, delta: RemoveDelta) -> DeltaOutcome:
    item = draft.find(delta.item_id)
    if item is None:
        return DeltaOutcome(op="REMOVE", result="unknown_item", item_id=delta.item_id)
    draft.items.remove(item)
    return DeltaOutcome(op="REMOVE", result="removed", item_id=item.id)


def named_files(content: str, files: dict[str, str]) -> list[str]:
    """The paths of `files` that `content` names, sorted."""
    return sorted(path for path in files if path in content)


def held_files(items: list[PlaybookItem], files: dict[str, str]) -> dict[str, str]:
    """`files` (path to blob id) that some item of `items` names, in path order."""
    named = {path for item in items for path in item.files}
    return {path: files[path] for path in sorted(files) if path in named}


def new_contents(playbook: Playbook, batch: DeltaBatch) -> dict[str, str]:
    """The batch's files that `playbook` (the version it made) holds as the batch wrote
    them: what the version's commit must add to the repository."""
    return {
        path: text
        for path, text in batch.files.items()
        if playbook.files.get(path) == blob_id(text)
    }


def is_harmful(item: PlaybookItem) -> bool:
    """Tagged harmful at least as often as helpful (and at least once): on balance, the
    item has not earned its place in the prompt."""
    return item.harmful > 0 and item.harmful >= item.helpful


def is_unused(item: PlaybookItem, version: int, limits: PlaybookLimits) -> bool:
    """No version added, changed, merged into or tagged it for `limits.unused_after`
    versions."""
    return version - item.updated_in >= limits.unused_after


def _evict(candidates: list[PlaybookItem], total: int, max_tokens: int) -> list[PlaybookItem]:
    """Items of `candidates` to drop, in order, until `total` tokens fit in `max_tokens`:
    the lowest value (helpful - harmful) first, then the least recently used, then the
    earliest in the list (the list keeps insertion order: the oldest first)."""
    order = sorted(
        range(len(candidates)),
        key=lambda i: (candidates[i].helpful - candidates[i].harmful, candidates[i].updated_in, i),
    )
    dropped: list[PlaybookItem] = []
    for i in order:
        if total <= max_tokens:
            break
        dropped.append(candidates[i])
        total -= item_tokens(candidates[i])
    return dropped


def over_budget(
    items: list[PlaybookItem], protected: set[str], max_tokens: int
) -> list[PlaybookItem]:
    """The items to drop so that `items` fit in `max_tokens`.

    Items whose ids are `protected` (what this batch wrote) are dropped only when they
    alone exceed the budget, and then only until they fit; the rest of the budget goes
    to the older items, the lowest value first.
    """
    fresh = [item for item in items if item.id in protected]
    older = [item for item in items if item.id not in protected]
    dropped = _evict(fresh, playbook_tokens(fresh), max_tokens)
    total = playbook_tokens(items) - playbook_tokens(dropped)
    return dropped + _evict(older, total, max_tokens)


def _prune(draft: _Draft, limits: PlaybookLimits) -> list[str]:
    """Drop the harmful and the unused, then what the budget cannot hold; their ids."""
    stale = [
        item for item in draft.items if is_harmful(item) or is_unused(item, draft.version, limits)
    ]
    kept = [item for item in draft.items if all(item is not gone for gone in stale)]
    evicted = over_budget(kept, draft.written, limits.max_tokens)
    draft.items = [item for item in kept if all(item is not gone for gone in evicted)]
    return [item.id for item in [*stale, *evicted]]


def apply_batch(
    playbook: Playbook, batch: DeltaBatch, limits: PlaybookLimits, *, cap_sources: bool = True
) -> tuple[Playbook, AppliedBatch]:
    """Apply `batch`'s deltas in order, then prune, making version `playbook.version + 1`.
    `cap_sources`: False only to replay a writer's history from before sources were
    capped.

    When the items come out exactly as they went in (an empty batch, only unknown ids,
    nothing to prune, or an ADD the budget evicted at once), no version is made: the
    original playbook comes back unchanged, with `changed=False` and its own version,
    so a batch that did nothing leaves no commit in the playbook's history. The
    outcomes and pruned ids still say what was tried.
    """
    draft = _Draft(
        version=playbook.version + 1,
        source=batch.source,
        items=[item.model_copy(deep=True) for item in playbook.items],
        files=dict(playbook.files),
        batch_files=dict(batch.files),
        cap_sources=cap_sources,
    )
    outcomes: list[DeltaOutcome] = []
    for delta in batch.deltas:
        if isinstance(delta, AddDelta):
            outcomes.append(_add(draft, delta, limits.similarity))
        elif isinstance(delta, UpdateDelta):
            outcomes.append(_update(draft, delta))
        elif isinstance(delta, TagDelta):
            outcomes.append(_tag(draft, delta))
        else:
            outcomes.append(_remove(draft, delta))
    pruned = _prune(draft, limits)
    files = held_files(draft.items, draft.files)

    if draft.items == playbook.items and files == playbook.files:
        return playbook, AppliedBatch(
            batch_id=batch.batch_id,
            version=playbook.version,
            changed=False,
            outcomes=outcomes,
            pruned=pruned,
        )
    new = Playbook(name=playbook.name, version=draft.version, items=draft.items, files=files)
    applied = AppliedBatch(
        batch_id=batch.batch_id,
        version=draft.version,
        changed=True,
        outcomes=outcomes,
        pruned=pruned,
    )
    return new, applied


def restore(
    current: Playbook,
    target_items: list[PlaybookItem],
    batch_id: str,
    target_files: dict[str, str] | None = None,
) -> tuple[Playbook, AppliedBatch]:
    """Roll back to `target_items` (an earlier version's items, ids and counts as they
    were) and the files they named then, `target_files`, as a new version,
    `current.version + 1`.

    A rollback always makes a version, even when the items already equal the target:
    the history then shows that someone restored, and versions only move forward, so
    ids added after the target (and now gone) are still never reused.
    """
    version = current.version + 1
    items = [item.model_copy(deep=True) for item in target_items]
    files = held_files(items, target_files or {})
    restored = Playbook(name=current.name, version=version, items=items, files=files)
    return restored, AppliedBatch(batch_id=batch_id, version=version, changed=True)
