"""Group commit: transactions of different runs in one process share one fsync.

A `Committer` belongs to one store. The step machine hands it a transaction's
work (`submit`) and awaits a future; the committer runs whatever works are
queued when it gets the store, all of them in one durable commit
(`Store.transactions`: a savepoint each), on a thread of its own (`_OwnThread`,
decision 0126), so the event loop never waits on a commit. While one group
commits, the next one queues: 64 runs in flight share fsyncs instead of each
waiting for its own.

An event loop's works are handed over once the callbacks ready with them have run
(`submit_soon`, decision 0116): runs woken together by one commit make their next
transactions in one loop iteration, and they go as one group. Handed over one by
one, the first would begin a group of its own while the loop still made the
others, and that group would hold the database's write turn while its thread
waited for the interpreter's lock, taken by the loop (other processes then wait
for the turn with it). A work whose caller awaits it at once, on a loop with nothing
else ready, would be that batch alone: it is handed over at once (decision 0173).
Their outcomes are set on asyncio futures of that loop (decision 0121), a group's by
one `call_soon_threadsafe` for each loop (one wake-up of it, decision 0173), with no
`concurrent.futures.Future`, its locks and its chain of callbacks between the
committer and the caller.

Invariants:

- No work's future completes before the commit that holds its writes is
  durable; a work that raised completes with its exception, its writes rolled
  back alone, and the others' writes commit.
- A group that fails to begin or to commit fails every work in it, with
  nothing written (a busy database's `StoreBusyError` is safe to retry).
- Works run in the order they were submitted; one run's works are submitted one
  at a time (its loop awaits each), so a run's transactions commit in its order.
- A caller that stops waiting (its task cancelled) while its work is queued, or
  still waits in its loop's batch: the work never runs; once the group runs, its
  work commits or fails with the group whatever the caller does (as a commit
  under way in a lone transaction would). A loop's future is looked at once, when
  its group begins: cancelled then, its work is left out; cancelled later, its
  caller is told `CancelledError` and the work commits or fails with the group.
- A `BaseException` that is not an `Exception` raised by a work, on a backend that
  shares one commit, rolls its whole group back and reaches every work's future
  (the test kit's simulated death: a scenario's store is its own).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ._errors import StoreError
from ._fork import renewed_in_children
from ._store import Store, Tx

T = TypeVar("T")

MAX_GROUP = 256
"""The most works one commit holds."""


class _Answer:
    """Where a work's outcome goes: a `concurrent.futures.Future` (`submit`)."""

    __slots__ = ("future",)

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self.future = future

    def claim(self) -> bool:
        """False if its caller gave up (the work must not run); from here on it is owed
        an outcome."""
        return self.future.set_running_or_notify_cancel()

    def give(self, value: Any) -> None:
        self.future.set_result(value)

    def fail(self, error: BaseException) -> None:
        self.future.set_exception(error)


class _LoopAnswer(_Answer):
    """A work's outcome set on an asyncio future of `loop` (`submit_soon`), from any thread."""

    __slots__ = ("loop", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: asyncio.Future[Any] = loop.create_future()

    def claim(self) -> bool:
        # Read off the loop's thread: a future cancelled just after still gets its
        # work committed or failed with the group (its caller is told it was cancelled).
        return not self.waiting.cancelled()

    def give(self, value: Any) -> None:
        self._on_loop(_settle, self.waiting, value, None)

    def fail(self, error: BaseException) -> None:
        self._on_loop(_settle, self.waiting, None, error)

    def refuse(self, error: BaseException) -> None:
        """Never queued (`_hand_over`, on the loop's own thread): its caller is told at
        once, and the work never runs."""
        _settle(self.waiting, None, error)

    def _on_loop(self, *callback: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            self.loop.call_soon_threadsafe(*callback)


def _settle(waiting: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """On the future's loop: its outcome, unless its caller stopped waiting."""
    if waiting.done():
        return
    if error is not None:
        if isinstance(error, StopIteration):
            # An asyncio future refuses it (`TypeError`, and its caller would wait
            # forever): told what a coroutine raising it is told.
            refused, error = error, RuntimeError("a transaction's work raised StopIteration")
            error.__cause__ = refused
        waiting.set_exception(error)
    else:
        waiting.set_result(value)


def _nothing_else_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """True if no callback is left to run on `loop` in this iteration nor queued for the
    next one, read on the loop's own thread: a callback running now is the iteration's last.

    The callbacks of an iteration wait in the loop's ready queue until each runs, and what
    they schedule joins it (`asyncio.BaseEventLoop._run_once`). A loop that keeps no such
    queue (another implementation) is never taken to be idle.
    """
    ready = getattr(loop, "_ready", None)
    return isinstance(ready, collections.deque) and not ready


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """On the futures' loop: each its outcome, in order (`_settle`)."""
    for waiting, value, error in settled:
        _settle(waiting, value, error)


def _tell(outcomes: Sequence[tuple[_Answer, Any, BaseException | None]]) -> None:
    """Each answer its outcome (an error, or else the value), in the group's order. A loop's
    answers are set by one callback on that loop: one wake-up of it for the group, not one
    a work (decision 0173)."""
    by_loop: dict[
        asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]
    ] = {}
    for answer, value, error in outcomes:
        if isinstance(answer, _LoopAnswer):
            by_loop.setdefault(answer.loop, []).append((answer.waiting, value, error))
        elif error is not None:
            answer.fail(error)
        else:
            answer.give(value)
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            loop.call_soon_threadsafe(_settle_all, settled)


_Entry = tuple[Callable[[Tx], Any], _Answer]
_LoopEntry = tuple[Callable[[Tx], Any], _LoopAnswer]


_IDLE_S = 30.0
"""Seconds a committer's thread waits for more work before it ends (started again when
there is)."""


class _OwnThread:
    """A committer's own thread: runs what it is given, in order, and ends after `_IDLE_S`
    with nothing to run. A daemon (as the tool threads): it never holds the process open.

    Handing it a drain costs a `SimpleQueue.put` (and the thread's wake-up), where an
    executor's `submit` made a future, a work item and a semaphore's round for it
    (decision 0126).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._running = False

    def submit(self, job: Callable[[], object]) -> None:
        with self._lock:
            self._jobs.put(job)
            if self._running:
                return
            self._running = True
        try:
            threading.Thread(target=self._serve, name="agentrt-commit", daemon=True).start()
        except BaseException:
            with self._lock:
                self._running = False
                while not self._jobs.empty():  # the caller takes back what it gave
                    self._jobs.get_nowait()
            raise

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._running = False
                        return
                continue
            # What a drain raises was handed to its works' callers (or it queued itself
            # again, `_drain`): nothing is left for this thread to do with it.
            with contextlib.suppress(BaseException):
                job()


class Committer:
    """Queues transactions' works and commits them in groups, on a thread of its own (or
    on `executor`'s threads, given one: the tests hold one to decide the grouping)."""

    def __init__(self, store: Store, executor: concurrent.futures.Executor | None = None) -> None:
        self._store = weakref.ref(store)  # the committers' registry must not keep it alive
        self._executor: concurrent.futures.Executor | _OwnThread = (
            _OwnThread() if executor is None else executor
        )
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._draining = False
        # Each event loop's works not yet handed over (`submit_soon`), by loop.
        self._soon: dict[asyncio.AbstractEventLoop, list[_LoopEntry]] = {}
        self.groups = 0
        """Commits made (a measure for benchmarks and tests)."""
        self.works = 0
        """Works committed or rolled back in them."""

    def submit(self, work: Callable[[Tx], T]) -> concurrent.futures.Future[T]:
        """Queue `work` for the next group; its future completes after that group's commit."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._enqueue([(work, _Answer(future))])
        return future

    def submit_soon(
        self,
        work: Callable[[Tx], T],
        loop: asyncio.AbstractEventLoop,
        *,
        awaited_at_once: bool = False,
    ) -> asyncio.Future[T]:
        """`submit`, from `loop`'s own thread, once the callbacks ready now have run: the
        works its loop makes in one iteration are queued together, for one group. The
        outcome is `loop`'s future's.

        `awaited_at_once`: the caller awaits the future before it makes anything else, so
        its callback adds no other work to the batch. If nothing else is ready on the loop
        either, the batch would hold this work alone: it is handed over now, not one loop
        iteration later (decision 0173).
        """
        answer = _LoopAnswer(loop)
        entry: _LoopEntry = (work, answer)
        batch = self._soon.get(loop)
        if batch is not None:
            batch.append(entry)
            return answer.waiting
        if awaited_at_once and _nothing_else_ready(loop):
            self._hand_over_batch([entry])
            return answer.waiting
        self._soon[loop] = [entry]
        try:
            loop.call_soon(self._hand_over, loop)
        except BaseException:
            del self._soon[loop]  # its caller is told it failed: it must not run
            raise
        return answer.waiting

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue what `loop` made since its last hand-over (a callback on that loop)."""
        self._hand_over_batch(self._soon.pop(loop))

    def _hand_over_batch(self, batch: list[_LoopEntry]) -> None:
        try:
            self._enqueue(batch)
        except BaseException as e:
            for _, answer in batch:  # never queued: each caller is told, none runs
                answer.refuse(e)

    def _enqueue(self, entries: Sequence[_Entry]) -> None:
        """Queue `entries` in order; start a drain unless one runs. Raises (and queues
        nothing) when the executor refuses the drain."""
        with self._lock:
            self._queue.extend(entries)
            if self._draining:
                return
            self._draining = True
        try:
            self._executor.submit(self._drain)
        except BaseException as e:
            with self._lock:
                self._draining = False
                for entry in entries:  # their callers are told it failed: none may run
                    self._queue.remove(entry)
                # Queued by other threads meanwhile, which saw a drain under way and
                # returned: no drain will take them, so they fail too (and never run).
                stranded, self._queue = self._queue, []
            for _, answer in stranded:
                if answer.claim():
                    answer.fail(e)
            raise

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

    def _commit(self, group: list[_Entry]) -> None:
        # A work whose caller gave up (its future cancelled) while it was queued never
        # runs; from here on each is owed its outcome.
        group = [(work, answer) for work, answer in group if answer.claim()]
        if not group:
            return
        try:
            store = self._store()
            if store is None:
                raise StoreError("the store is closed")
            outcomes = store.transactions([work for work, _ in group])
        except BaseException as e:
            # Nothing of the group was written, or (a COMMIT whose outcome is unknown,
            # `StoreError.commit_unknown`) it may have been: each caller gets that error.
            _tell([(answer, None, e) for _, answer in group])
            return
        self.groups += 1
        self.works += len(group)
        _tell(
            [
                (answer, outcome.value, outcome.error)
                for (_, answer), outcome in zip(group, outcomes, strict=True)
            ]
        )


_COMMITTERS: weakref.WeakKeyDictionary[Any, Committer] = weakref.WeakKeyDictionary()
_COMMITTERS_LOCK = threading.Lock()

# The parent's committers drain on threads a forked child does not have (and may be
# mid-drain), and its lock may be held: the child makes its own on first use (0125).
renewed_in_children(__name__, "_COMMITTERS", weakref.WeakKeyDictionary)
renewed_in_children(__name__, "_COMMITTERS_LOCK", threading.Lock)


def committer_for(store: Store) -> Committer:
    """The one committer of `store` in this process (made on first use)."""
    with _COMMITTERS_LOCK:
        committer = _COMMITTERS.get(store)
        if committer is None:
            committer = _COMMITTERS[store] = Committer(store)
        return committer
