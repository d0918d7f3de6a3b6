"""The worker's start-up heap leaves the garbage collector's sight before it polls
(worker/build.py): what was alive then is never walked again, what is made later is
collected as ever."""

from __future__ import annotations

import gc
import weakref

import pytest

from loopworks.worker.build import settle_heap

pytestmark = pytest.mark.unit


class Node:
    """A cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.itself = self


def test_the_start_up_heap_is_left_alone_and_later_garbage_collected() -> None:
    at_start = Node()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        started = weakref.ref(at_start)
        del at_start  # garbage now, but frozen
        later = weakref.ref(Node())  # garbage at once
        gc.collect()
        assert started() is not None
        assert later() is None
    finally:
        gc.unfreeze()  # the test process's own heap, as it was
        gc.collect()
