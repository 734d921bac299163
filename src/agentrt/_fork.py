"""What a process made by `fork` must make again, and what it must leave to its parent.

A forked child has only the thread that forked. A lock another thread held at that
moment stays held in the child, where nothing will release it, and an executor that
had idle threads believes they will take its next work. Each module holding such an
object names it here once (`renewed_in_children`), and the child gets a new one made by
the factory before any of its code runs (`os.register_at_fork`; decision 0125).

A database connection the parent opened is the parent's: the child shares its socket
or its file's locks, so a statement the child sent would interleave with the parent's,
and a PostgreSQL connection the child closed would end the parent's session. An object
holding one registers itself (`left_to_the_parent`); in a child, before any of the
child's code runs, it is told so (`_leave`), refuses every use from then on, and hands
its connections to `keep`, which holds them past the child's exit so that nothing in the
child closes them (decision 0127). A fork first waits, briefly (`FORK_WAIT_S`), for the
transactions other threads have open on those connections to end: SQLite's record of a
write lock held at the fork would otherwise keep the child from writing the file at all.
Objects that only need their locks made again in a child (a Gate, a Driver) register too.

Invariants: the module reads a renewed object through its global name at each use
(never a copy taken at import), so that the child's new one is the one used; a
registered object is told in every child forked while it is alive, and never closes
what it handed to `keep`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol


def renewed_in_children(module: str, name: str, make: Callable[[], object]) -> None:
    """After a fork, the child's `module.name` is `make()`, not the parent's object."""
    if not hasattr(os, "register_at_fork"):
        return
    owner = sys.modules[module]

    def renew() -> None:
        setattr(owner, name, make())

    os.register_at_fork(after_in_child=renew)


class _LeftToTheParent(Protocol):
    """A holder may also have `_fork_lock()`: the lock a fork waits for (taken in the
    parent just before it, given back just after, `FORK_WAIT_S` at most in all), while
    which none of its transactions is open on another thread."""

    def _leave(self, parent: int) -> None:
        """In a forked child, before any of its code: make again the locks another thread
        may have held at the fork; a holder of the parent's connections refuses every use
        from now on and hands them to `keep`, never closing them. Must not raise."""


_LEFT: weakref.WeakSet[_LeftToTheParent] = weakref.WeakSet()

_KEPT: list[object] = []
"""A parent's connections held in a child where they cannot be made immortal (`keep`)."""

# Set just before a fork: the forking process, and the locks the fork waits for, by the
# forking thread (two threads may fork at once: each gives back only the locks it took).
_forking = 0
_held: dict[int, list[threading.Lock | threading.RLock]] = {}


def left_to_the_parent(holder: _LeftToTheParent) -> None:
    """A fork waits for `holder._fork_lock()` if it has one; in its child
    `holder._leave(parent_pid)` runs before any of the child's code."""
    _LEFT.add(holder)


def keep(*connections: object) -> None:
    """Hold a parent's connections for the rest of this (child) process, past its exit.

    Each is made immortal (one reference more that nothing gives back), so that no close,
    finalizer or interpreter shutdown of the child runs the driver's close on them: SQLite's
    close rolls back a transaction the parent had open at the fork by writing to the
    write-ahead log's index, memory the child shares with the parent. The kernel closes
    their descriptors when the child exits, which gives back none of the parent's locks.
    """
    kept = [c for c in connections if c is not None]
    try:
        import ctypes
    except ImportError:  # pragma: no cover - CPython on POSIX has it
        _KEPT.extend(kept)  # held, at least, until the interpreter's shutdown
        return
    for connection in kept:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(connection))


FORK_WAIT_S = 2.0
"""How long a fork waits, in all, for the holders' transactions on other threads to end.

A transaction lasts milliseconds; one waiting for SQLite's write lock up to its busy
timeout, or a consumer's block that waits for the forking thread itself, would hold the
fork for that long or for ever: past this the fork goes on without that holder's lock,
and the child may find the file's write lock taken by the parent's transaction."""


def _before_a_fork() -> None:
    global _forking
    _forking = os.getpid()
    held = _held.setdefault(threading.get_ident(), [])
    waits = [getattr(holder, "_fork_lock", None) for holder in list(_LEFT)]
    locks: list[threading.Lock | threading.RLock] = [w() for w in waits if w is not None]
    if any(_owned(lock) for lock in locks):
        # The forking thread is inside a transaction of its own: the parent keeps that
        # write lock through the fork whatever the others do, so waiting helps no child,
        # and a renewal waiting for that very lock would hold the fork its whole budget.
        return
    deadline = time.monotonic() + FORK_WAIT_S
    for lock in locks:
        if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            held.append(lock)


def _owned(lock: threading.Lock | threading.RLock) -> bool:
    """Whether this thread holds `lock` (an `RLock`'s own record; a plain lock: unknown)."""
    is_owned = getattr(lock, "_is_owned", None)
    return bool(is_owned()) if callable(is_owned) else False


def _after_a_fork_in_the_parent() -> None:
    held = _held.pop(threading.get_ident(), [])
    while held:
        held.pop().release()


def _leave_in_a_child() -> None:
    _held.clear()  # the parent's locks: each holder makes its own again
    parent = _forking or os.getppid()
    for holder in list(_LEFT):
        with contextlib.suppress(Exception):  # one that fails must not leave the others usable
            holder._leave(parent)
    _LEFT.clear()  # the child's own opens register afresh


def refusal(what: str, parent: int) -> str:
    """The one sentence a holder left to its parent says at each use in the child."""
    return (
        f"this {what} was opened by process {parent} before it forked this one; a forked "
        "process must open a store of its own (agentrt.open_store) and leave its parent's alone"
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_a_fork,
        after_in_parent=_after_a_fork_in_the_parent,
        after_in_child=_leave_in_a_child,
    )
