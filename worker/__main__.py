"""`python -m worker`: run one worker until interrupted."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from activities.catalog import CatalogError
from schemas.settings import Settings
from worker.build import build_deps, build_worker
from worker.connect import connect
from worker.telemetry import TracingConfigError, configure_tracing

log = logging.getLogger("loopworks.worker")


async def main() -> int:
    settings = Settings()
    try:
        # Catalogs first: a malformed agent definition stops the worker before it polls.
        deps = build_deps(settings)
        # Before connecting: the client (and so the worker) gets the tracing interceptor.
        configure_tracing(settings, "loopworks-worker")
    except (CatalogError, TracingConfigError) as err:
        log.error("cannot start: %s", err)
        return 2
    client = await connect(settings)
    worker = build_worker(client, settings, deps=deps)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker polling %s on %s (namespace %s, model %s)",
        settings.task_queue,
        settings.temporal_address,
        settings.temporal_namespace,
        settings.llm.value if settings.llm else "offline",
    )
    async with worker:
        await stop.wait()
    log.info("worker stopped")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(asyncio.run(main()))
