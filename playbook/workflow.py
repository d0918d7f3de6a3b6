"""PlaybookWorkflow: the one writer of a repository's delta playbook (docs/playbook.md).

An entity workflow, one per playbook (`playbook/<name>`), that lives as long as the
playbook does. Runs deliver their delta batches as signals and read the outcome with the
`applied` query (a workflow admits only a few updates in flight at once, and a hundred
runs may finish together); people send theirs as updates, which answer at once. Either
way it applies them under a lock, in arrival order (code applies them:
`loopworks.playbook.deltas`), each batch that changes something a version of its own, and
commits the versions on origin's playbook branch: the batches that arrived while the last
push ran go in one push. It remembers the batches it applied so a batch sent twice (a
retried activity, two clients) is applied once. Its history is kept short by continuing
as new when the server suggests it, once every handler has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from loopworks.playbook.activities import PlaybookActivities
    from loopworks.playbook.deltas import apply_batch, new_contents, restore
    from loopworks.schemas.playbook import (
        ERROR_MAX,
        AppliedBatch,
        BatchRecord,
        DeltaBatch,
        Playbook,
        PlaybookInput,
        PlaybookRead,
        PlaybookState,
        PlaybookVersionsWrite,
        PlaybookWrite,
        VersionWrite,
    )
    from loopworks.workflows.policies import GIT, execute


# Batches remembered for exactly-once and for their senders' `applied` query: far more
# than could be in flight, or retried, at once. They are carried through continue-as-new
# beside the playbook, in one input Temporal refuses past 2 MiB (and a writer that cannot
# continue as new fails every task after), so their size is bounded too, whatever their
# batch ids and pruned ids: a slim record is 100 to 600 bytes.
REMEMBERED_BATCHES = 500
REMEMBERED_BYTES = 256 * 1024


class BatchMemory:
    """The batches a writer remembers, within `REMEMBERED_BATCHES` and `REMEMBERED_BYTES`
    (of their JSON): the oldest go first, the newest always stays."""

    def __init__(self, records: Iterable[BatchRecord] = ()) -> None:
        self._records: dict[str, BatchRecord] = {}
        self._sizes: dict[str, int] = {}
        for record in records:
            self.keep(record)

    def __len__(self) -> int:
        return len(self._records)

    def get(self, batch_id: str) -> BatchRecord | None:
        return self._records.get(batch_id)

    def done(self, batch_id: str) -> BatchRecord | None:
        """The record of batch `batch_id` if it was applied (not if it failed)."""
        record = self._records.get(batch_id)
        return record if record is not None and record.error is None else None

    def retry(self, batch_id: str) -> None:
        """Forget that batch `batch_id` failed: it is sent again."""
        record = self._records.get(batch_id)
        if record is not None and record.error is not None:
            self._forget(batch_id)

    def records(self) -> dict[str, BatchRecord]:
        """What continue-as-new carries, by batch id, oldest first."""
        return dict(self._records)

    def keep(self, record: BatchRecord) -> None:
        self._forget(record.batch_id)
        self._records[record.batch_id] = record
        # As carried: the record, keyed by its batch id.
        self._sizes[record.batch_id] = len(record.model_dump_json()) + len(record.batch_id) + 4
        while len(self._records) > 1 and (
            len(self._records) > REMEMBERED_BATCHES or sum(self._sizes.values()) > REMEMBERED_BYTES
        ):
            self._forget(next(iter(self._records)))

    def _forget(self, batch_id: str) -> None:
        self._records.pop(batch_id, None)
        self._sizes.pop(batch_id, None)


# The workflow's type: visibility queries name it (api/playbook_curation.py).
PLAYBOOK_WORKFLOW = "PlaybookWorkflow"
# A signal is started with by its name (`writer.deliver_batch`).
DELIVER_SIGNAL = "deliver"


@workflow.defn(name=PLAYBOOK_WORKFLOW)
class PlaybookWorkflow:
    @workflow.init
    def __init__(self, params: PlaybookInput) -> None:
        self._params = params
        self._playbook = params.playbook
        self._applied = BatchMemory(params.applied.values())
        self._lock = asyncio.Lock()
        # Batches delivered and not applied yet, by id, in arrival order: whichever handler
        # holds the lock next applies them all.
        self._pending: dict[str, DeltaBatch] = {}
        self._batches = 0  # applied by this execution, for the tests' continue-as-new

    @workflow.query
    def describe(self) -> PlaybookState:
        playbook = self._playbook
        return PlaybookState(
            name=self._params.name,
            origin=self._params.origin,
            version=playbook.version if playbook else 0,
            items=len(playbook.items) if playbook else 0,
            batches_applied=len(self._applied),
        )

    @workflow.query
    def current(self) -> Playbook | None:
        return self._playbook

    @workflow.query
    def applied(self, batch_id: str) -> AppliedBatch | None:
        """What the batch `batch_id` did (each result's count, not each delta's outcome);
        None until it is applied."""
        record = self._applied.get(batch_id)
        return record.answer() if record is not None else None

    @workflow.signal(name=DELIVER_SIGNAL)
    async def deliver(self, batch: DeltaBatch) -> None:
        """Apply `batch` once, without an update's limit on how many wait at once. Should
        it fail, the `applied` query answers why, and the same batch sent again is tried
        again."""
        try:
            await self._apply(batch)
        except Exception as err:
            # A signal's handler that raises fails the whole writer, and with it the
            # batches waiting in it and its memory of those applied (a batch sent again
            # would then apply twice); its sender, polling, would never learn why.
            if not workflow.patched("playbook-signal-failure-answered"):
                raise
            reason = _reason(err)
            workflow.logger.warning("playbook batch %s failed: %s", batch.batch_id, reason)
            version = self._playbook.version if self._playbook is not None else 0
            failed = BatchRecord(
                batch_id=batch.batch_id, version=version, changed=False, error=reason
            )
            self._applied.keep(failed)

    @workflow.update
    async def apply(self, batch: DeltaBatch) -> AppliedBatch:
        """Apply `batch` once: a batch id seen before answers what it did then."""
        return await self._apply(batch)

    async def _apply(self, batch: DeltaBatch) -> AppliedBatch:
        try:
            return await self._apply_once(batch)
        except Exception:
            # Its sender learns it failed: it must not be committed later, in the group of
            # whichever batch comes next.
            if workflow.patched("playbook-failed-batch-not-pending"):
                self._pending.pop(batch.batch_id, None)
            raise

    async def _apply_once(self, batch: DeltaBatch) -> AppliedBatch:
        self._applied.retry(batch.batch_id)
        if self._applied.done(batch.batch_id) is None:
            self._pending.setdefault(batch.batch_id, batch)
        async with self._lock:
            await self._loaded()
            while True:
                done = self._applied.done(batch.batch_id)
                if done is not None:
                    # Sent again while it was being committed: applied once, and not again.
                    self._pending.pop(batch.batch_id, None)
                    return done.answer()
                # Each group takes the oldest batches waiting, until this one's.
                self._pending.setdefault(batch.batch_id, batch)
                own = await self._apply_pending(batch.batch_id)
                if own is not None:
                    return own

    async def _apply_pending(self, own: str) -> AppliedBatch | None:
        """Apply the batches waiting, oldest first, each a version of its own, and commit
        those versions in one push: when a hundred runs finish together, the writer makes
        a few pushes rather than a hundred in a row. A group stops at `limits.group_bytes`
        of playbooks (the activity's input). Should its commit fail, the handler of batch
        `own` answers with the failure and the group's other batches wait again, first in
        line, for their own handlers. What batch `own` did, whole, if the group held it."""
        playbook = await self._loaded()
        taken: list[DeltaBatch] = []
        writes: list[VersionWrite] = []
        results: list[AppliedBatch] = []
        size = 0
        # Capped sources make smaller versions, and a group is cut by its size.
        cap_sources = workflow.patched("playbook-sources-capped")
        for batch in list(self._pending.values()):
            if self._applied.done(batch.batch_id):  # sent again while it was being committed
                del self._pending[batch.batch_id]
                continue
            updated, applied = apply_batch(
                playbook, batch, self._params.limits, cap_sources=cap_sources
            )
            if applied.changed:
                contents = new_contents(updated, batch)
                grows = len(updated.model_dump_json()) + sum(map(len, contents.values()))
                if writes and size + grows > self._params.limits.group_bytes:
                    break
                size += grows
                writes.append(
                    VersionWrite(
                        playbook=updated,
                        batch_id=batch.batch_id,
                        source=batch.source,
                        contents=contents,
                    )
                )
                playbook = updated
            taken.append(batch)
            results.append(applied)
            del self._pending[batch.batch_id]
        if writes:
            try:
                commits = await self._commit_versions(writes)
            except BaseException:
                waiting = {b.batch_id: b for b in taken if b.batch_id != own}
                self._pending = waiting | {
                    k: b for k, b in self._pending.items() if k not in waiting
                }
                raise
            by_batch = dict(zip((w.batch_id for w in writes), commits, strict=True))
            for applied in results:
                applied.commit = by_batch.get(applied.batch_id)
            self._playbook = playbook
        for applied in results:
            self._remember(applied)
        return next((applied for applied in results if applied.batch_id == own), None)

    @workflow.update
    async def rollback(self, version: int) -> AppliedBatch:
        """Make version `version`'s items current again, as a new version."""
        async with self._lock:
            playbook = await self._loaded()
            if not 1 <= version <= playbook.version:
                raise ApplicationError(
                    f"playbook {playbook.name} has versions 1 to {playbook.version}, not {version}",
                    non_retryable=True,
                )
            target = await self._read(version)
            if target is None:
                raise ApplicationError(
                    f"version {version} of playbook {playbook.name} is not on its branch",
                    non_retryable=True,
                )
            batch_id = f"rollback:{playbook.version + 1}:to:{version}"
            updated, applied = restore(playbook, target.items, batch_id, target.files)
            applied.commit = await self._commit(updated, batch_id, f"rollback to v{version}")
            self._playbook = updated
            self._remember(applied)
            return applied

    @workflow.run
    async def run(self, params: PlaybookInput) -> None:
        try:
            await self._loaded()
        except ActivityError as err:
            # An origin that cannot be read now (down, unreachable) does not end the
            # writer: the next batch's handler reads it again and tells its sender why.
            workflow.logger.warning("playbook %s unread for now: %s", params.name, err)
        limit = params.continue_after_batches
        await workflow.wait_condition(
            lambda: (
                (
                    workflow.info().is_continue_as_new_suggested()
                    or (limit is not None and self._batches >= limit)
                )
                and workflow.all_handlers_finished()
                and not self._lock.locked()
            )
        )
        workflow.continue_as_new(
            params.model_copy(
                update={"playbook": self._playbook, "applied": self._applied.records()}
            )
        )

    async def _loaded(self) -> Playbook:
        """The playbook, read from origin once: its branch may have versions this
        workflow never wrote (an earlier workflow's, a person's rollback by hand)."""
        if self._playbook is None:
            found = await self._read(None)
            if self._playbook is None:  # another handler may have read it meanwhile
                self._playbook = found or Playbook(name=self._params.name)
        return self._playbook

    async def _read(self, version: int | None) -> Playbook | None:
        read = PlaybookRead(name=self._params.name, origin=self._params.origin, version=version)
        return await execute(
            PlaybookActivities.read_playbook, read, GIT, f"read playbook {self._params.name}"
        )

    async def _commit(self, playbook: Playbook, batch_id: str, source: str) -> str:
        write = PlaybookWrite(
            origin=self._params.origin,
            playbook=playbook,
            batch_id=batch_id,
            source=source,
            committed_at=workflow.now(),
        )
        summary = f"commit playbook {playbook.name} v{playbook.version}"
        return await execute(PlaybookActivities.commit_playbook, write, GIT, summary)

    async def _commit_versions(self, writes: list[VersionWrite]) -> list[str]:
        write = PlaybookVersionsWrite(
            origin=self._params.origin, versions=writes, committed_at=workflow.now()
        )
        first, last = writes[0].playbook, writes[-1].playbook
        summary = f"commit playbook {first.name} v{first.version}..v{last.version}"
        return await execute(PlaybookActivities.commit_playbook_versions, write, GIT, summary)

    def _remember(self, applied: AppliedBatch) -> None:
        self._applied.keep(BatchRecord.of(applied))
        self._batches += 1


def _reason(err: Exception) -> str:
    """What a failed batch's sender is told: the message of what failed (git's, for a
    commit), not only that an activity did."""
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    message = getattr(cause, "message", None) or str(cause) or type(cause).__name__
    return str(message)[:ERROR_MAX]
