"""What admission (api/admission.py, api/spend.py) shares with the workflows that hold its
slots and spend its budgets: the slot workflow's input, the memo keys the API reads back
from Temporal, and what a run or graph spent."""

from __future__ import annotations

from pydantic import BaseModel, Field

# On a slot workflow: the id of the run or graph holding it.
SLOT_HOLDER_MEMO = "loopworks_slot_holder"
# On a run and a graph: the budget it was given at its start (a `Budget`), what it may
# spend at most while it is open.
RESERVED_MEMO = "loopworks_reserved"
# On a run and a graph: what it spent (a `Spent`), written as it closes.
SPENT_MEMO = "loopworks_spent"


class SlotInput(BaseModel):
    """A slot of a cap (SECURITY.md#quotas), held for one run or graph until it closes."""

    holder: str = Field(description="the id of the run or graph the slot admitted")


class Spent(BaseModel):
    """What a run or graph spent, all its model calls together."""

    tokens: int = Field(default=0, ge=0, description="input + output tokens")
    cost_usd: float = Field(default=0.0, ge=0)
