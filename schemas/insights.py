"""The reflector's framework reflection, and the session-insights record a run leaves
(step 10 in docs/loop.md#steps)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class FrameworkReflection(BaseModel):
    request: str
    guidance_received: str
    followed: str
    outcome: str = Field(pattern="^(Success|Partial|Failure)$")
    accomplishment: str = ""
    root_cause: str | None = None
    proposed_change: str = "none needed"

    def to_markdown(self) -> str:
        lines = [
            "## Framework Reflection",
            "",
            f"**Request**: {self.request}",
            f"**Guidance received**: {self.guidance_received}",
            f"**Followed**: {self.followed}",
            f"**Outcome**: {self.outcome}",
            f"**Accomplishment**: {self.accomplishment or 'N/A'}",
        ]
        if self.root_cause:
            lines.append(f"**Root cause**: {self.root_cause}")
        lines.append(f"**Proposed change**: {self.proposed_change}")
        return "\n".join(lines) + "\n"


class SessionInsights(BaseModel):
    """The unified schema: the run plays the part of the session."""

    session_id: str
    date: str
    project: str
    summary: str
    outcome: str = Field(pattern="^(success|partial|failure)$")
    accomplishments: list[str] = Field(default_factory=list)
    friction_points: list[str] = Field(default_factory=list)
    proposed_changes: list[str] = Field(default_factory=list)
    workflows_used: list[str] = Field(default_factory=list)
    subagents_invoked: list[str] = Field(default_factory=list)
    subagent_count: int = 0
    custodiet_blocks: int = 0
    stop_reason: str
    critic_verdict: str | None = None
    acceptance_criteria_count: int = 0
    learning_observations: list[Any] = Field(default_factory=list)
    skill_compliance: dict[str, Any] = Field(default_factory=dict)
    context_gaps: list[Any] = Field(default_factory=list)
    user_mood: float | None = None
    conversation_flow: list[Any] = Field(default_factory=list)
    user_prompts: list[str] = Field(default_factory=list)
    token_usage: dict[str, int | float] = Field(default_factory=dict)
