"""`python -m loopworks.worker`: run one worker until interrupted."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from temporalio.client import Client
from temporalio.service import RPCError

from loopworks.activities.deps import StepDeps
from loopworks.checks.redaction import install_log_redaction
from loopworks.llm.provenance import model_source
from loopworks.schemas.settings import Settings
from loopworks.service.connect import connect
from loopworks.service.search_attributes import ensure_search_attributes, required_types
from loopworks.service.telemetry import configure_tracing
from loopworks.worker.build import build_deps, build_worker, settle_heap
from loopworks.worker.retention import keep_sweeping, retention_policy
from loopworks.worker.schedule import ensure_retention_schedule
from loopworks.workflows.search_attributes import REQUIRED
from loopworks.workspace.git_version import git_refusal

log = logging.getLogger("loopworks.worker")


async def main() -> int:
    try:
        settings = Settings()
        # Catalogs and the model provider first: a malformed agent definition or a
        # missing key stops the worker before it polls, not at a run's first step.
        deps = build_deps(settings)
        # Before connecting: the client (and so the worker) gets the tracing interceptor.
        configure_tracing(settings, "loopworks-worker")
    except ValueError as err:  # CatalogError, TracingConfigError, bad settings, no model
        log.error("cannot start: %s", err)
        return 2
    if (refused := git_refusal()) is not None:
        log.error("cannot start: %s", refused)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # The data directory's clones are swept from the start, Temporal reached or not.
    sweeping = asyncio.create_task(keep_sweeping(deps.workspaces.root, retention_policy(settings)))
    try:
        return await poll(settings, deps, stop)
    finally:
        sweeping.cancel()


async def poll(settings: Settings, deps: StepDeps, stop: asyncio.Event) -> int:
    client = await connected(settings, stop)
    if client is None:
        log.info("worker stopped before Temporal could be reached")
        return 0
    # Before polling: a namespace without the workflows' search attributes fails every
    # workflow task that writes one, forever, behind a worker that looks healthy.
    try:
        refused = await ensure_search_attributes(
            client, settings.temporal_namespace, settings.temporal_address, required_types(REQUIRED)
        )
    except RPCError as err:  # Temporal went away since it answered: let the supervisor retry
        refused = f"Temporal did not answer the search attribute check: {err.message}"
    if refused is not None:
        log.error("cannot start: %s", refused)
        return 2
    try:
        await ensure_retention_schedule(client, settings)
    except RPCError as err:
        # The gc's schedule serves no run: a namespace that refuses it costs no run, and
        # `loops gc` still runs the gc on demand (docs/operations.md#retention).
        log.warning("could not create the retention schedule: %s", err.message)
    worker = build_worker(client, settings, deps=deps)
    log.info(
        "worker polling %s on %s (namespace %s, model %s)",
        settings.task_queue,
        settings.temporal_address,
        settings.temporal_namespace,
        model_source(deps.models, settings.anthropic_base_url),
    )
    settle_heap()
    async with worker:
        await stop.wait()
    log.info("worker stopped")
    return 0


# Between attempts to reach Temporal: doubling from the first, up to the last.
CONNECT_RETRY_SECONDS = (1.0, 10.0)


async def connected(settings: Settings, stop: asyncio.Event) -> Client | None:
    """A client once Temporal answers; None if stopped first. A worker started before its
    server (compose, Kubernetes, a restart of both) waits for it, saying so, instead of
    ending in a traceback."""
    delay, longest = CONNECT_RETRY_SECONDS
    while True:
        try:
            return await connect(settings)
        except RuntimeError as err:  # the SDK raises plain RuntimeErrors on connect
            log.warning(
                "cannot reach Temporal at %s (%s); trying again in %.0f s",
                settings.temporal_address,
                err,
                delay,
            )
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
            return None
        except TimeoutError:
            delay = min(delay * 2, longest)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    install_log_redaction()
    sys.exit(asyncio.run(main()))
