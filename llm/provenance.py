"""Which model answers a worker's runs, in the words a run's state and events use.

A run that completed on canned answers must say so wherever it is read (`loops status`,
`GET /runs/{id}`, its `hydration_done` event): the offline model's answers look like a
model's. The worker that prepares a run's workspace names its model source
(`WorkspaceInfo.model_source`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from loopworks.llm.base import ModelSource
from loopworks.llm.offline.model import OfflineModels

ANTHROPIC = "anthropic"
OFFLINE = "offline"
# The offline model answering from LOOPS_OFFLINE_SCRIPT where the script has an entry.
OFFLINE_SCRIPTED = "offline (scripted)"


def model_source(models: ModelSource, base_url: str | None = None) -> str:
    """`offline`, `offline (scripted)`, `anthropic`, or `anthropic (<host>)` when the
    requests go to ANTHROPIC_BASE_URL's server rather than Anthropic's."""
    if isinstance(models, OfflineModels):
        return OFFLINE_SCRIPTED if models.script.root else OFFLINE
    host = urlsplit(base_url).hostname if base_url else None
    return f"{ANTHROPIC} ({host})" if host else ANTHROPIC
