"""The playbook writer's activities: read a version from origin, commit new ones. What
`PlaybookWorkflow` schedules; a run hands its batch over through `delivery`."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.heartbeat import heartbeating
from loopworks.playbook.store import PlaybookStore, PlaybookVersionError
from loopworks.schemas.playbook import (
    Playbook,
    PlaybookRead,
    PlaybookVersionsWrite,
    PlaybookWrite,
    VersionWrite,
)


class PlaybookActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps
        self.store = PlaybookStore.of(deps.workspaces)

    @activity.defn(name="read_playbook")
    async def read_playbook(self, read: PlaybookRead) -> Playbook | None:
        """The playbook's current version (or `read.version`) on origin; None without one."""
        async with heartbeating():
            if read.version is None:
                return await asyncio.to_thread(self.store.current, read.origin, read.name)
            return await asyncio.to_thread(
                self.store.at_version, read.origin, read.name, read.version
            )

    @activity.defn(name="commit_playbook_versions")
    async def commit_playbook_versions(self, write: PlaybookVersionsWrite) -> list[str]:
        """Commit consecutive versions on origin's playbook branch in one update; a retry
        finds them there. A branch whose head is not the version before was written by
        someone else: no retry fixes that, so the batches fail and their senders hear why."""
        async with heartbeating():
            try:
                return await asyncio.to_thread(
                    self.store.write_versions, write.origin, write.versions, write.committed_at
                )
            except PlaybookVersionError as err:
                raise ApplicationError(str(err), non_retryable=True) from err

    @activity.defn(name="commit_playbook")
    async def commit_playbook(self, write: PlaybookWrite) -> str:
        """One version, on its own: a rollback's."""
        versions = [
            VersionWrite(playbook=write.playbook, batch_id=write.batch_id, source=write.source)
        ]
        batched = PlaybookVersionsWrite(
            origin=write.origin, versions=versions, committed_at=write.committed_at
        )
        return (await self.commit_playbook_versions(batched))[0]
