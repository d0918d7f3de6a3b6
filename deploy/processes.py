"""The processes loopworks runs as, in one place.

The local launcher, the integration tests and the container definitions all start the
API and the worker with exactly these commands and variables, and a test checks that
docker-compose.yml agrees.
"""

from __future__ import annotations

API_MODULE = "loopworks.api"
WORKER_MODULE = "loopworks.worker"

# `python -m <module>`: the container images run the same.
API_COMMAND: tuple[str, ...] = ("python", "-m", API_MODULE)
WORKER_COMMAND: tuple[str, ...] = ("python", "-m", WORKER_MODULE)
# The git server they share when scaled out: deploy/git-server.sh, installed in the image
# under this name (deploy/Dockerfile).
GIT_SERVER_SCRIPT = "deploy/git-server.sh"
GIT_SERVER_COMMAND: tuple[str, ...] = ("loopworks-git-server",)

# Variables both processes read (see README "Configuration").
SHARED_ENV: tuple[str, ...] = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "LOOPS_TASK_QUEUE",
    "LOOPS_DATA_DIR",
    "LOOPS_DEFAULT_ORIGIN",
    "LOOPS_LLM",
)
API_ENV: tuple[str, ...] = (*SHARED_ENV, "LOOPS_API_HOST", "LOOPS_API_PORT")
WORKER_ENV: tuple[str, ...] = (*SHARED_ENV, "ANTHROPIC_API_KEY")

# Search attributes the workflow keeps current; the dev server and the compose
# namespace job register exactly these.
SEARCH_ATTRIBUTES: dict[str, str] = {
    "LoopStatus": "Keyword",
    "LoopPhase": "Keyword",
    "LoopIteration": "Int",
    "LoopScore": "Double",
    "LoopBlocked": "Bool",
    "LoopAlias": "Keyword",
    # Who started a run or a graph (the API token's name), set when it starts.
    "LoopStartedBy": "Keyword",
    # A task graph's child loops carry their graph's id.
    "LoopGraph": "Keyword",
    # A task graph: its status and its tasks by state. The dev server's SQLite
    # visibility allows 3 Int attributes in all: completed and failed are Ints (to
    # query), every count is in GraphTasks (to read).
    "GraphStatus": "Keyword",
    "GraphTasks": "Keyword",
    "GraphTasksCompleted": "Int",
    "GraphTasksFailed": "Int",
}
