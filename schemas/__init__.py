"""Pydantic models for everything that crosses a boundary: API, workflow, activity."""
