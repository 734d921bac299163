"""Writers to one SQLite file take turns through a lock file beside it (`<database>-lock`).

SQLite admits one writer at a time, and a connection that finds the write lock
taken waits in its busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ms and
more between looks: the lock sits free while every waiter sleeps, and under
load a writer can lose every look until its busy timeout ("database is locked").
Measured with eight processes of fifty runs each on one file on a loaded
two-core machine (decision 0106): 27 to 136 busy errors reached the callers and
the processes together made 1.11x one process's steps; taking turns here, none
and 1.46x.

A writer of this process takes its turn (an exclusive `flock` of the lock file)
just before `BEGIN IMMEDIATE` and gives it back just after `COMMIT` or
`ROLLBACK`. A turn taken when it is asked for costs one system call. A taken
one is waited for in the kernel (decision 0117): a thread of the writer's blocks
in `flock` on its behalf, so the kernel wakes it the moment the turn is given
back, while the writer waits for that thread no longer than the busy timeout.
Looking again and again instead (every 50 µs, then up to every 1 ms, as before)
cost the writer holding the turn its CPU: on two cores each look of seven
waiters woke a thread that preempted it, and the turn was handed over up to a
millisecond late.

Invariants:
- Advisory only: SQLite's own locks still decide who writes. A writer that takes
  no turn (the `sqlite3` shell, a program of the consumer's) is waited out by
  SQLite's busy timeout, as before; the turn only orders agentrt's writers.
- A turn is held only while a transaction is being begun, run or ended, never
  across two transactions; a process that dies holding one gives it back (the
  kernel drops a `flock` with the last descriptor of its open file).
- Waiting for a turn is bounded by the busy timeout: `StoreBusyError`, nothing
  written, as when `BEGIN IMMEDIATE` itself times out. A wait given up leaves
  its thread in `flock`; once through, it gives the turn straight back unless a
  writer of its `WriterTurns` waits for it again, and while it is in `flock`
  only it may lock the file for that `WriterTurns` (a lock taken beside it on
  the same open file would be given back by it). And one write waits at
  most one busy timeout in all (decision 0109): given the connection about to
  begin, a turn that was waited for leaves SQLite's own busy timeout only what
  the wait did not use, until the turn is given back. SQLite's wait is still
  needed after a turn (a writer that takes none, such as a store migrating at
  its open, may hold the write lock), but not a second whole timeout of it.
- Each `WriterTurns` has its own open file, so two connections of one process
  (the store's and the heartbeat's) take turns with each other too; a forked
  child opens its own rather than sharing its parent's (a shared open file
  would let both hold the turn at once, and give it back for both), and closes
  the descriptors it inherited at once (`os.register_at_fork`), the waiting
  thread's too: a child left holding one would keep a turn its parent held when
  it died (the kernel drops a `flock` only with the last descriptor of its open
  file).
- The lock file holds no data. It is created owner-only (0600) and checked with
  the database's other sidecars (and again when first opened for a write: one
  made since that is not a regular file of this user's, with one name, is
  passed over); where it cannot be created or locked (no
  `fcntl`, a directory it cannot be made in), writers wait in SQLite's busy
  handler as they did before.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable

try:
    import fcntl
except ImportError:  # not a POSIX system: SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

from ..._errors import StoreBusyError

SUFFIX = "-lock"
"""The lock file's name is the database's with this added."""

FIRST_PAUSE_S = 0.00005
"""With a `sleep` of the caller's (tests that drive time), the first wait between two looks
at a taken turn; it doubles up to `LONGEST_PAUSE_S`."""
LONGEST_PAUSE_S = 0.001


_EVERY: weakref.WeakSet[WriterTurns] = weakref.WeakSet()
"""Every `WriterTurns` of this process, for a forked child to close what it inherited."""


_WAITING: set[_KernelWait] = set()
"""Every `_KernelWait` of this process whose thread may still use its descriptor."""


def _close_inherited() -> None:
    """In a forked child: close the lock files inherited from the parent (its turns stay its),
    the waiting threads' descriptors too (those threads are not in the child)."""
    for turns in list(_EVERY):
        turns._forget_inherited()
    for waiter in list(_WAITING):
        with contextlib.suppress(OSError):
            os.close(waiter.fd)
    _WAITING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


class _KernelWait:
    """A daemon thread that waits in `flock` for the lock file on one `WriterTurns`' behalf.

    It locks a descriptor of its own of the turns' open file (`os.dup`: the same
    lock), so closing the turns' descriptor never leaves it a number reused for
    another file. Everything it and a waiter share is read and written under
    `_cv`; the lock is given back under `_cv` too, before `_pending` says it is
    through, so no writer of the turns locks the file while it may still give the
    lock back.
    """

    def __init__(self, fd: int) -> None:
        self.fd = os.dup(fd)  # not inherited by a program a child executes (PEP 446)
        self._pid = os.getpid()  # the process its thread runs in
        try:
            self._cv = threading.Condition(threading.Lock())
            self._pending = False  # asked to wait, and not yet through `flock`
            self._wanted = False  # a writer waits for what it gets
            self._granted = False  # it got the lock for a writer that waits for it
            self._error: OSError | None = None
            self._closing = False
            self._thread = threading.Thread(
                target=self._run, name="agentrt-writer-turn", daemon=True
            )
            _WAITING.add(self)
            self._thread.start()
        except BaseException:
            _WAITING.discard(self)
            os.close(self.fd)
            raise

    @property
    def pending(self) -> bool:
        """Whether it is in (or on its way to) `flock`: only it may lock the file now."""
        with self._cv:
            return self._pending

    def acquire(self, timeout_s: float) -> bool:
        """Wait at most `timeout_s` for the lock: True once this caller holds it; False when
        the time ran out (it gives the lock back once through, unless asked again).
        Raises the `OSError` its `flock` failed with."""
        with self._cv:
            self._wanted = True
            if not self._pending:
                self._pending = True
                self._cv.notify_all()
            try:
                self._cv.wait_for(lambda: self._granted or self._error is not None, timeout_s)
                if self._granted:  # even if granted just as the time ran out
                    self._granted = False
                    return True
                error, self._error = self._error, None
                if error is not None:
                    raise error
                return False
            finally:
                self._wanted = False

    def close(self) -> None:
        """Stop once through any `flock` it is in (giving that lock back); its thread then
        closes its descriptor. Nothing in a forked child (from `weakref.finalize`, at exit
        too): its thread is not there, and its condition's lock, held there at the fork,
        would never be given back."""
        if os.getpid() != self._pid:
            return  # `_close_inherited` closed the child's copy of its descriptor
        with self._cv:
            self._closing = True
            self._cv.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._pending and not self._closing:
                        self._cv.wait()
                    if not self._pending:
                        return  # closing, and not in a wait
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX)
                except OSError as e:
                    with self._cv:
                        self._pending = False
                        if self._wanted:
                            self._error = e
                        self._cv.notify_all()
                    continue
                with self._cv:
                    if self._wanted and not self._closing:
                        self._granted = True
                    else:  # nobody waits for it any more: given straight back
                        with contextlib.suppress(OSError):
                            fcntl.flock(self.fd, fcntl.LOCK_UN)
                    self._pending = False
                    self._cv.notify_all()
        finally:
            # Ended, however (closed, or an error no `flock` should raise): a writer
            # waiting is told at once rather than at its timeout, and none waits again.
            with self._cv:
                self._closing = True
                self._pending = False
                if self._wanted and not self._granted and self._error is None:
                    self._error = OSError("the wait for the writers' turn ended")
                self._cv.notify_all()
            _WAITING.discard(self)  # first: a child forked from here on must not close it
            with contextlib.suppress(OSError):
                os.close(self.fd)

    @property
    def ended(self) -> bool:
        """Whether its thread ended (or was told to): a new wait needs a new one."""
        return not self._thread.is_alive() or self._closing


class WriterTurns:
    """One connection's turns at writing the database at `path` (see the module)."""

    def __init__(
        self,
        database_path: str,
        timeout_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self.path = database_path + SUFFIX
        self._timeout_s = timeout_s
        self._clock = clock
        # A `sleep` given (a test driving time) looks again and again rather than
        # waiting in the kernel, whose wait runs on the real clock.
        self._sleep = sleep
        self._waiter: _KernelWait | None = None
        # Closes the waiter of now if this is dropped unclosed.
        self._finalizer: weakref.finalize[[], WriterTurns] | None = None
        self._fd: int | None = None
        self._pid = 0
        self._held = False
        self._unavailable = fcntl is None
        # The connection whose busy timeout the turn shortened, and the one to put back.
        self._shortened: tuple[sqlite3.Connection, int] | None = None
        _EVERY.add(self)

    def take(self, conn: sqlite3.Connection | None = None) -> None:
        """Wait for this connection's turn; `StoreBusyError` past the busy timeout.

        Given `conn`, the connection about to `BEGIN IMMEDIATE`: when the turn had to be
        waited for, `conn`'s busy timeout is cut to what is left of this one until `give`,
        so the turn and SQLite's busy handler together wait at most one busy timeout."""
        fd = self._descriptor()
        if fd is None:
            return
        deadline = self._clock() + self._timeout_s
        if self._sleep is None:
            waited = self._wait_in_kernel(fd, deadline)
        else:
            waited = self._look_again(fd, deadline, self._sleep)
        if waited is None:
            return
        self._held = True
        if waited and conn is not None:
            self._shorten(conn, deadline - self._clock())

    def _busy(self) -> StoreBusyError:
        return StoreBusyError(
            "cannot begin a write transaction: another agentrt writer held its "
            f"turn at {self.path} past the busy timeout ({self._timeout_s:g} s); "
            "nothing was written"
        )

    def _wait_in_kernel(self, fd: int, deadline: float) -> bool | None:
        """The turn, waited for by `_KernelWait`'s `flock` if taken: whether it was waited
        for; None when the file cannot be locked (turns given up)."""
        waiter = self._waiter
        if waiter is not None and waiter.ended and not waiter.pending:
            waiter = self._waiter = None  # its thread is gone: a new one waits
        if waiter is None or not waiter.pending:  # else only it may lock the file
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return False
            except BlockingIOError:
                pass
            except OSError:
                self._give_up()  # a file system without flock: SQLite's busy handler alone
                return None
        try:
            if waiter is None:
                waiter = self._waiter = _KernelWait(fd)
                # A `WriterTurns` dropped unclosed stops its waiter; one finalizer at a
                # time, for the waiter of now (an earlier one was closed with its file).
                if self._finalizer is not None:
                    self._finalizer.detach()
                self._finalizer = weakref.finalize(self, waiter.close)
            got = waiter.acquire(max(0.0, deadline - self._clock()))
        except OSError:
            self._give_up()
            return None
        if not got:
            raise self._busy()
        return True

    def _look_again(
        self, fd: int, deadline: float, sleep: Callable[[float], object]
    ) -> bool | None:
        """The turn, looked at again after each pause of `sleep` while taken: whether it was
        waited for; None when the file cannot be locked (turns given up)."""
        pause = FIRST_PAUSE_S
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self._clock() >= deadline:
                    raise self._busy() from None
                sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE_S)
                waited = True
            except OSError:
                self._give_up()  # a file system without flock: SQLite's busy handler alone
                return None
            else:
                return waited

    def _shorten(self, conn: sqlite3.Connection, left_s: float) -> None:
        """Leave `conn`'s busy timeout no more than `left_s` (rounded down to a millisecond;
        0: SQLite does not wait) until the turn is given back."""
        left_ms = max(0, int(left_s * 1000))
        # Best effort: a connection that cannot say or change its timeout keeps it.
        with contextlib.suppress(sqlite3.Error):
            prior = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
            if left_ms < prior:
                conn.execute(f"PRAGMA busy_timeout = {left_ms}")
                self._shortened = (conn, prior)

    def give(self) -> None:
        """Give the turn back (nothing when none is held), and the busy timeout it shortened."""
        shortened, self._shortened = self._shortened, None
        if shortened is not None:
            conn, prior = shortened
            with contextlib.suppress(sqlite3.Error):  # closed since: nothing to put back
                conn.execute(f"PRAGMA busy_timeout = {prior}")
        if self._held:
            self._held = False
            fd = self._fd
            if fd is not None and fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                except OSError:
                    self._give_up()  # closing the file gives the turn back

    def close(self) -> None:
        held, self._held = self._held, False
        self._shortened = None
        fd, self._fd = self._fd, None
        waiter, self._waiter = self._waiter, None
        if fd is not None and self._pid == os.getpid():
            if held and fcntl is not None:
                # The waiting thread's descriptor keeps the open file (and so a turn
                # held through it) until that thread is through: given back now.
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        if waiter is not None:
            waiter.close()

    def _descriptor(self) -> int | None:
        if self._unavailable:
            return None
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        # First use, or a forked child holding its parent's open file: open one of its own
        # (the parent's is left alone; unlocking it would give the parent's turn back).
        self._fd, self._held, self._waiter = None, False, None
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError:
            self._unavailable = True
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
                # Made since the open checked it (the open refuses these): another name of
                # another file, or another user's, which could hold every writer up. Not
                # ours to lock, nor to chmod: SQLite's busy handler alone.
                raise OSError("not this store's lock file")
            os.fchmod(fd, 0o600)  # the umask may have left it wider, or narrower
        except OSError:
            os.close(fd)
            self._unavailable = True
            return None
        self._fd, self._pid = fd, os.getpid()
        return fd

    def _give_up(self) -> None:
        """No turns on this file any more: SQLite's busy handler alone from here."""
        self._unavailable = True
        self.close()

    def _forget_inherited(self) -> None:
        """Close a descriptor the parent opened (closing a copy gives no turn back)."""
        self._shortened = None  # the parent's connection: its to put back, not the child's
        fd = self._fd
        if fd is not None and self._pid != os.getpid():
            self._fd, self._held = None, False
            with contextlib.suppress(OSError):
                os.close(fd)
            # The parent's waiting thread is not in the child (`_close_inherited` closes
            # its descriptor; its condition's lock may have been held at the fork).
            self._waiter = None
