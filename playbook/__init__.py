"""The delta playbook: applying deltas, choosing items for a task, sending batches."""
