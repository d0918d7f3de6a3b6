"""A blocked run as `loops status` shows it: the block's reason and how to release it,
where the custodiet's write-up is committed, and the write-up itself."""

from __future__ import annotations

from loopworks.schemas.run import RunState


def blocked_notes(state: RunState) -> list[str]:
    block = state.block
    where = [f"the state of the work: {block.path} on the run's work ref"] if block.path else []
    if block.during != "audit":
        where.insert(0, f"blocked during {block.during}, refusing {block.refused}")
    report = ["", *block.report.rstrip().splitlines()] if block.report else []
    return [
        f"blocked: {block.reason or 'custodiet audit'}"
        f" (release with: loops clear-block {state.run_id} --note '...')",
        *where,
        *report,
    ]
