"""The worker's sweep of its clones: at start, then every `SWEEP_EVERY_SECONDS`, in a
thread, removing what the retention policy (workspace/retention.py) decides."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from loopworks.schemas.settings import Settings
from loopworks.workspace.retention import RetentionPolicy
from loopworks.workspace.sweep import sweep

log = logging.getLogger(__name__)

# Retention is counted in hours; a sweep walks only the top of the workspaces root (and,
# with a total cap, the clones' files): cheap at this pace.
SWEEP_EVERY_SECONDS = 600.0


def retention_policy(settings: Settings) -> RetentionPolicy:
    return RetentionPolicy(
        keep_seconds=settings.keep_clones_hours * 3600, max_bytes=settings.clones_max_bytes
    )


async def keep_sweeping(
    root: Path, policy: RetentionPolicy, every: float = SWEEP_EVERY_SECONDS
) -> None:
    """Sweep until cancelled; a sweep that fails (a disk error) is logged, not fatal: the
    worker's steps do not depend on it."""
    while True:
        try:
            decision = await asyncio.to_thread(sweep, root, policy)
            if decision.remove:
                log.info("retention removed %d clone(s) under %s", len(decision.remove), root)
        except OSError as err:
            log.warning("retention could not sweep %s: %s", root, err)
        await asyncio.sleep(every)
