"""A command that writes into its workspace after a while, and a step cancelled before it
does: what the cancellation tests of the steps that run commands share."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

# Writes `late.txt` two seconds after it starts.
LATE_COMMAND = "sleep 2; echo late > late.txt"


async def cancelled_before_it_writes(call: asyncio.Task[Any], workspace: Path) -> bool:
    """Cancel `call` while its LATE_COMMAND runs, and wait past the moment the command
    would have written: whether it wrote all the same."""
    await asyncio.sleep(0.5)  # the command is running
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(2.5)
    return (workspace / "late.txt").exists()
