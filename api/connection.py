"""The API's one Temporal client, connected once and shared by every request."""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client

from loopworks.api.errors import TemporalUnavailable
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect

log = logging.getLogger("loopworks.api")


class TemporalConnection:
    """Holds the client; connects on first need if Temporal was down when the API started.

    Starting without Temporal keeps `/healthz` truthful (the process is up) while
    `/readyz` and the run routes answer 503 until Temporal can be reached.
    """

    def __init__(self, settings: Settings, client: Client | None = None) -> None:
        self._settings = settings
        self._client = client
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def client(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await connect(self._settings)
                except Exception as err:  # the SDK raises plain RuntimeErrors on connect
                    log.warning(
                        "cannot connect to Temporal at %s: %s", self._settings.temporal_address, err
                    )
                    raise TemporalUnavailable() from err
                log.info(
                    "connected to Temporal at %s (namespace %s)",
                    self._settings.temporal_address,
                    self._settings.temporal_namespace,
                )
        return self._client
