"""The API's one Temporal client, connected once and shared by every request, on a
namespace checked to have the workflows' search attributes."""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.service import RPCError

from loopworks.api.errors import TemporalUnavailable
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect
from loopworks.service.search_attributes import ensure_search_attributes, required_types
from loopworks.workflows.search_attributes import REQUIRED

log = logging.getLogger("loopworks.api")


class TemporalConnection:
    """Holds the client; connects on first need if Temporal was down when the API started.

    Starting without Temporal keeps `/healthz` truthful (the process is up) while
    `/readyz` and the run routes answer 503 until Temporal can be reached.

    Once connected, and before the client serves a request, the namespace's search
    attributes are checked as a worker checks them: the missing ones are added where the
    server lets the API, so the first run of a fresh deployment, started before any worker
    ran, is not refused for `LoopStartedBy`. Where they cannot be added, every request
    that needs Temporal, `/readyz` included, answers 503 naming them and the commands that
    add them, and asks again next time: the API is ready once someone adds them
    (docs/operations.md#search-attributes). A client given to the constructor (tests) is
    taken as it is.
    """

    def __init__(self, settings: Settings, client: Client | None = None) -> None:
        self._settings = settings
        self._client = client
        self._lock = asyncio.Lock()
        self._namespace_checked = client is not None

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def client(self) -> Client:
        if self._client is not None and self._namespace_checked:
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
            if not self._namespace_checked:
                await self._check_namespace(self._client)
        return self._client

    async def _check_namespace(self, client: Client) -> None:
        settings = self._settings
        try:
            refused = await ensure_search_attributes(
                client,
                settings.temporal_namespace,
                settings.temporal_address,
                required_types(REQUIRED),
                who="the API",
            )
        except RPCError as err:
            raise TemporalUnavailable(f"Temporal did not answer: {err.message}") from err
        if refused is not None:
            log.error("not ready: %s", refused)
            raise TemporalUnavailable(refused)
        self._namespace_checked = True
