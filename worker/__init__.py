"""The worker process: polls the task queue, runs the workflow and its activities."""
