"""The processes loopworks runs as, in one place.

The local launcher, the integration tests and the container definitions all start the
API and the worker with exactly these commands and variables, and a test checks that
docker-compose.yml agrees.
"""

from __future__ import annotations

from loopworks.service.search_attributes import required_types
from loopworks.workflows.search_attributes import REQUIRED

API_MODULE = "loopworks.api"
WORKER_MODULE = "loopworks.worker"

# `python -m <module>`: the container images run the same.
API_COMMAND: tuple[str, ...] = ("python", "-m", API_MODULE)
WORKER_COMMAND: tuple[str, ...] = ("python", "-m", WORKER_MODULE)
# The git server they share when scaled out: deploy/git-server.sh, installed in the image
# under this name (deploy/Dockerfile).
GIT_SERVER_SCRIPT = "deploy/git-server.sh"
GIT_SERVER_COMMAND: tuple[str, ...] = ("loopworks-git-server",)

# Variables both processes read (docs/configuration.md).
SHARED_ENV: tuple[str, ...] = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "LOOPS_TASK_QUEUE",
    "LOOPS_DATA_DIR",
    "LOOPS_DEFAULT_ORIGIN",
)
API_ENV: tuple[str, ...] = (*SHARED_ENV, "LOOPS_API_HOST", "LOOPS_API_PORT")
# The API never calls the model. A worker needs LOOPS_LLM or a key: given neither, it
# refuses to start rather than run the offline model unasked.
WORKER_ENV: tuple[str, ...] = (*SHARED_ENV, "LOOPS_LLM", "ANTHROPIC_API_KEY")

# Search attributes the workflows write (workflows/search_attributes.py): the dev server
# is started with exactly these, the compose namespace job registers them, and a worker
# checks for them before it polls.
SEARCH_ATTRIBUTES: dict[str, str] = required_types(REQUIRED)
