"""What the worker gives every activity class (worker/build.py builds it once, at start):
the settings, the model source, the catalogs and the workspaces. Building it changes
nothing outside it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from opentelemetry import trace

from loopworks.llm.base import ModelSource
from loopworks.prompts.catalog import AgentDefinition, WorkflowTemplate
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ARTIFACT_PATH, GitLocation
from loopworks.workspace.git import GitWorkspaces


@dataclass(frozen=True)
class StepDeps:
    settings: Settings
    models: ModelSource
    agents: dict[str, AgentDefinition]
    templates: dict[str, WorkflowTemplate]
    workspaces: GitWorkspaces
    # Tests trace into a provider of their own; None is the process-wide one.
    tracer: trace.Tracer | None = None

    async def read_artifact(self, location: GitLocation) -> str:
        """The artifact at a commit, empty when the commit has none yet."""
        text = await asyncio.to_thread(
            self.workspaces.read_file, location.origin, location.commit, ARTIFACT_PATH
        )
        return text or ""


def now() -> float:
    return time.time()
