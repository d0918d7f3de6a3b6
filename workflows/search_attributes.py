"""The search attributes loopworks' workflows write, in one place.

A namespace must know each of them before a workflow upserts it, or every workflow task
that does fails with `BadSearchAttributes`, over and over. This list is what the dev
server is started with (`deploy/processes.py`), what a worker checks (and registers where
it may) before it polls and the API before it starts a run (`service/search_attributes.py`),
and what the compose job registers (docker-compose.yml; tests/deploy keeps it equal).
"""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeKey

# A run's progress: the Temporal UI's list as a dashboard of runs.
LOOP_STATUS = SearchAttributeKey.for_keyword("LoopStatus")
LOOP_PHASE = SearchAttributeKey.for_keyword("LoopPhase")
LOOP_ITERATION = SearchAttributeKey.for_int("LoopIteration")
LOOP_SCORE = SearchAttributeKey.for_float("LoopScore")
LOOP_BLOCKED = SearchAttributeKey.for_bool("LoopBlocked")
LOOP_ALIAS = SearchAttributeKey.for_keyword("LoopAlias")
# Who started a run or a graph (an API token's name): set once, when it starts.
LOOP_STARTED_BY = SearchAttributeKey.for_keyword("LoopStartedBy")
# A task graph's child loops carry their graph's id.
LOOP_GRAPH = SearchAttributeKey.for_keyword("LoopGraph")
# A task graph: its status and its tasks by state. The dev server's SQLite visibility
# allows 3 Int attributes in all: completed and failed are Ints (to query), every count
# is in GraphTasks (to read).
GRAPH_STATUS = SearchAttributeKey.for_keyword("GraphStatus")
GRAPH_TASKS = SearchAttributeKey.for_keyword("GraphTasks")
TASKS_COMPLETED = SearchAttributeKey.for_int("GraphTasksCompleted")
TASKS_FAILED = SearchAttributeKey.for_int("GraphTasksFailed")

REQUIRED: tuple[SearchAttributeKey[Any], ...] = (
    LOOP_STATUS,
    LOOP_PHASE,
    LOOP_ITERATION,
    LOOP_SCORE,
    LOOP_BLOCKED,
    LOOP_ALIAS,
    LOOP_STARTED_BY,
    LOOP_GRAPH,
    GRAPH_STATUS,
    GRAPH_TASKS,
    TASKS_COMPLETED,
    TASKS_FAILED,
)
