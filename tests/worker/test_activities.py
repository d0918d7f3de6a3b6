"""The worker's explicit activity list holds every `@activity.defn` method of every
activity class in `loopworks.activities`, once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from temporalio import activity

import loopworks.activities
from loopworks.activities.production import ProductionActivities
from loopworks.schemas.settings import Settings
from loopworks.worker.build import activities_of, build_deps

pytestmark = pytest.mark.unit


def _is_activity(function: object) -> bool:
    # The SDK has no public way to ask whether a function is an activity; its worker asks
    # `_Definition.from_callable`. A test may use it: an SDK change breaks this test, not
    # the worker.
    return callable(function) and activity._Definition.from_callable(function) is not None


def declared_activities() -> set[tuple[type, str]]:
    """(class, method name) of every activity method of the package's classes."""
    found: set[tuple[type, str]] = set()
    for module_info in pkgutil.iter_modules(loopworks.activities.__path__):
        module = importlib.import_module(f"loopworks.activities.{module_info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for name, function in inspect.getmembers(cls, inspect.isfunction):
                if _is_activity(function):
                    found.add((cls, name))
    return found


def test_every_activity_method_is_listed_once(tmp_path: Path) -> None:
    deps = build_deps(Settings(LOOPS_DATA_DIR=tmp_path))
    listed = activities_of(deps)
    assert all(inspect.ismethod(method) for method in listed)
    keys = [(type(method.__self__), method.__name__) for method in listed]
    declared = declared_activities()
    assert (ProductionActivities, "produce_artifact") in declared  # the scan finds them
    missing = sorted(f"{cls.__name__}.{name}" for cls, name in declared - set(keys))
    assert not missing, f"add to worker/build.py activities_of: {missing}"
    assert len(keys) == len(set(keys)), "an activity is listed twice"
    assert all(_is_activity(method) for method in listed)
    # Every instance is built on the worker's deps.
    assert all(method.__self__.deps is deps for method in listed)
