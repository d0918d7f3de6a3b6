"""`python -m loopworks.api`: serve the HTTP API with uvicorn."""

from __future__ import annotations

import logging
import sys

import uvicorn

from loopworks.api.main import create_app
from loopworks.api.security import exposed_without_tokens
from loopworks.checks.redaction import install_log_redaction
from loopworks.schemas.settings import Settings
from loopworks.worker.telemetry import configure_tracing

log = logging.getLogger("loopworks.api")


def main() -> int:
    try:
        settings = Settings()
        configure_tracing(settings, "loopworks-api")  # FastAPI traces requests with it
    except ValueError as err:  # bad settings, TracingConfigError
        log.error("cannot start: %s", err)
        return 2
    if exposed_without_tokens(settings):
        log.warning(
            "the API listens on %s without LOOPS_API_TOKENS: anyone who can reach port %d can"
            " start, stop and steer runs; set LOOPS_API_TOKENS or bind to 127.0.0.1",
            settings.api_host,
            settings.api_port,
        )
    app = create_app(settings)
    log.info("API docs at http://%s:%d/docs", settings.api_host, settings.api_port)
    uvicorn.run(app, host=settings.api_host, port=settings.api_port, log_level="info")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    install_log_redaction()
    sys.exit(main())
