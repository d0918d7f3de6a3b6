"""Group commit: threads that each need the same slow operation for their own item (a push
to one origin) share it. While the operation runs for one group, the items that arrive
wait together, and the first of their threads to find it done runs it next, for all of
them. Alone, a thread runs it at once, as it would without grouping; under load one run
serves many (a hundred runs' call records: docs/benchmarks.md#the-users-own-repository).

Every caller returns only once the operation that carried its item is done, with that
item's result, or raises its failure: grouping changes how often it runs, never what a
caller may rely on when it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupFailed(RuntimeError):
    """The operation that carried this caller's item failed (in another caller's thread)."""


class _Group(Generic[Item, Result]):
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.results: Sequence[Result] = ()
        self.failure: BaseException | None = None
        self.done = False


class GroupCommit(Generic[Item, Result]):
    """`run(key, items)` for groups of items with the same key, one group of a key at a
    time. `run` answers one result per item, in order."""

    def __init__(self, run: Callable[[Hashable, list[Item]], Sequence[Result]]) -> None:
        self._run = run
        self._changed = threading.Condition()
        self._waiting: dict[Hashable, _Group[Item, Result]] = {}
        self._running: set[Hashable] = set()

    def put(self, key: Hashable, item: Item) -> Result:
        """`item`'s result, once the run that carried it is done. The thread that runs
        a group raises the run's own exception; the others a GroupFailed saying it."""
        with self._changed:
            group = self._waiting.setdefault(key, _Group())
            index = len(group.items)
            group.items.append(item)
            while key in self._running and not group.done:
                self._changed.wait()
            runs_it = not group.done
            if runs_it:
                self._running.add(key)
                del self._waiting[key]
        if runs_it:
            results: Sequence[Result] = ()
            failure: BaseException | None = None
            try:
                results = self._run(key, group.items)
            except BaseException as exc:  # whatever ends the run, the group must hear of it
                failure = exc
            with self._changed:
                group.results, group.failure, group.done = results, failure, True
                self._running.discard(key)
                self._changed.notify_all()
            if failure is not None:
                raise failure
        elif group.failure is not None:
            raise GroupFailed(str(group.failure)) from None
        return group.results[index]
