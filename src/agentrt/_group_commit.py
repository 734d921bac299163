"""Group commit: transactions of different runs in one process share one fsync.

A `Committer` belongs to one store. The step machine hands it a transaction's
work (`submit`) and awaits a future; the committer runs whatever works are
queued when it gets the store, all of them in one durable commit
(`Store.transactions`: a savepoint each), on one of the I/O threads, so the event
loop never waits on a commit. While one group commits, the next one queues: 64
runs in flight share fsyncs instead of each waiting for its own.

Invariants:

- No work's future completes before the commit that holds its writes is
  durable; a work that raised completes with its exception, its writes rolled
  back alone, and the others' writes commit.
- A group that fails to begin or to commit fails every work in it, with
  nothing written (a busy database's `StoreBusyError` is safe to retry).
- Works run in the order they were submitted; one run's works are submitted one
  at a time (its loop awaits each), so a run's transactions commit in its order.
- A caller that stops waiting (its task cancelled) while its work is queued: the
  work never runs; once the group runs, its work commits or fails with the group
  whatever the caller does (as a commit under way in a lone transaction would).
- A `BaseException` that is not an `Exception` raised by a work, on a backend that
  shares one commit, rolls its whole group back and reaches every work's future
  (the test kit's simulated death: a scenario's store is its own).
"""

from __future__ import annotations

import concurrent.futures
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from ._errors import StoreError
from ._store import Store, Tx

T = TypeVar("T")

MAX_GROUP = 256
"""The most works one commit holds."""


class Committer:
    """Queues transactions' works and commits them in groups, on `executor`'s threads."""

    def __init__(self, store: Store, executor: concurrent.futures.Executor) -> None:
        self._store = weakref.ref(store)  # the committers' registry must not keep it alive
        self._executor = executor
        self._lock = threading.Lock()
        self._queue: list[tuple[Callable[[Tx], Any], concurrent.futures.Future[Any]]] = []
        self._draining = False
        self.groups = 0
        """Commits made (a measure for benchmarks and tests)."""
        self.works = 0
        """Works committed or rolled back in them."""

    def submit(self, work: Callable[[Tx], T]) -> concurrent.futures.Future[T]:
        """Queue `work` for the next group; its future completes after that group's commit."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        entry = (work, future)
        with self._lock:
            self._queue.append(entry)
            if self._draining:
                return future
            self._draining = True
        try:
            self._executor.submit(self._drain)
        except BaseException:
            with self._lock:
                self._draining = False
                self._queue.remove(entry)  # its caller is told it failed: it must not run
            raise
        return future

    def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    group, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
                    if not group:
                        self._draining = False
                        return
                self._commit(group)
        except BaseException:
            # Never left draining with nobody draining: the queue is taken up again.
            with self._lock:
                self._draining = bool(self._queue)
                again = self._draining
            if again:
                self._executor.submit(self._drain)
            raise

    def _commit(
        self, group: list[tuple[Callable[[Tx], Any], concurrent.futures.Future[Any]]]
    ) -> None:
        # A work whose caller gave up (its future cancelled) while it was queued never
        # runs; from here on no future can be cancelled, so each gets its outcome.
        group = [(work, future) for work, future in group if future.set_running_or_notify_cancel()]
        if not group:
            return
        try:
            store = self._store()
            if store is None:
                raise StoreError("the store is closed")
            outcomes = store.transactions([work for work, _ in group])
        except BaseException as e:  # nothing of the group was written
            for _, future in group:
                future.set_exception(e)
            return
        self.groups += 1
        self.works += len(group)
        for (_, future), outcome in zip(group, outcomes, strict=True):
            if outcome.error is not None:
                future.set_exception(outcome.error)
            else:
                future.set_result(outcome.value)


_COMMITTERS: weakref.WeakKeyDictionary[Any, Committer] = weakref.WeakKeyDictionary()
_COMMITTERS_LOCK = threading.Lock()


def committer_for(store: Store, executor: concurrent.futures.Executor) -> Committer:
    """The one committer of `store` in this process (made on first use)."""
    with _COMMITTERS_LOCK:
        committer = _COMMITTERS.get(store)
        if committer is None:
            committer = _COMMITTERS[store] = Committer(store, executor)
        return committer
