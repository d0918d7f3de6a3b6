"""Temporal workflows: deterministic orchestration only, no I/O."""
