"""`python -m loopworks.api`: serve the HTTP API with uvicorn."""

from __future__ import annotations

import logging
import sys

import uvicorn

from loopworks.api.main import create_app
from loopworks.api.security import refusal_to_start
from loopworks.checks.redaction import install_log_redaction
from loopworks.schemas.settings import Settings
from loopworks.service.telemetry import configure_tracing
from loopworks.workspace.git_version import git_refusal

log = logging.getLogger("loopworks.api")


def main() -> int:
    try:
        settings = Settings()
        # Closed unless opened: no tokens on an address other machines reach is no start.
        refused = refusal_to_start(settings) or git_refusal()
        if refused is not None:
            log.error("cannot start: %s", refused)
            return 2
        configure_tracing(settings, "loopworks-api")  # FastAPI traces requests with it
        app = create_app(settings)
    except ValueError as err:  # bad settings or tokens, TracingConfigError
        log.error("cannot start: %s", err)
        return 2
    log.info("API docs at http://%s:%d/docs", settings.api_host, settings.api_port)
    uvicorn.run(app, host=settings.api_host, port=settings.api_port, log_level="info")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    install_log_redaction()
    sys.exit(main())
