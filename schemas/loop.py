"""The workflow's own input and result."""

from __future__ import annotations

from pydantic import BaseModel

from schemas.run import RunRequest, RunState


class LoopInput(BaseModel):
    run_id: str
    alias: str
    request: RunRequest
    created_at: str


class LoopResult(BaseModel):
    state: RunState
    events: int
