"""Writers to one SQLite file take turns through a lock file beside it (`<database>-lock`).

SQLite admits one writer at a time, and a connection that finds the write lock
taken waits in its busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ms and
more between looks: the lock sits free while every waiter sleeps, and under
load a writer can lose every look until its busy timeout ("database is locked").
Measured with eight processes of fifty runs each on one file on a loaded
two-core machine (decision 0106): 27 to 136 busy errors reached the callers and
the processes together made 1.11x one process's steps; taking turns here, none
and 1.46x.

A writer of this process takes its turn (an exclusive `flock` of the lock file,
tried without blocking and looked at again after 50 µs, doubling to at most
1 ms) just before `BEGIN IMMEDIATE` and gives it back just after `COMMIT` or
`ROLLBACK`.

Invariants:
- Advisory only: SQLite's own locks still decide who writes. A writer that takes
  no turn (the `sqlite3` shell, a program of the consumer's) is waited out by
  SQLite's busy timeout, as before; the turn only orders agentrt's writers.
- A turn is held only while a transaction is being begun, run or ended, never
  across two transactions; a process that dies holding one gives it back (the
  kernel drops a `flock` with the last descriptor of its open file).
- Waiting for a turn is bounded by the busy timeout: `StoreBusyError`, nothing
  written, as when `BEGIN IMMEDIATE` itself times out. And one write waits at
  most one busy timeout in all (decision 0109): given the connection about to
  begin, a turn that was waited for leaves SQLite's own busy timeout only what
  the wait did not use, until the turn is given back. SQLite's wait is still
  needed after a turn (a writer that takes none, such as a store migrating at
  its open, may hold the write lock), but not a second whole timeout of it.
- Each `WriterTurns` has its own open file, so two connections of one process
  (the store's and the heartbeat's) take turns with each other too; a forked
  child opens its own rather than sharing its parent's (a shared open file
  would let both hold the turn at once, and give it back for both), and closes
  the descriptors it inherited at once (`os.register_at_fork`): a child left
  holding one would keep a turn its parent held when it died (the kernel drops
  a `flock` only with the last descriptor of its open file).
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
"""The first wait between two looks at a taken turn; it doubles up to `LONGEST_PAUSE_S`."""
LONGEST_PAUSE_S = 0.001


_EVERY: weakref.WeakSet[WriterTurns] = weakref.WeakSet()
"""Every `WriterTurns` of this process, for a forked child to close what it inherited."""


def _close_inherited() -> None:
    """In a forked child: close the lock files inherited from the parent (its turns stay its)."""
    for turns in list(_EVERY):
        turns._forget_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


class WriterTurns:
    """One connection's turns at writing the database at `path` (see the module)."""

    def __init__(
        self,
        database_path: str,
        timeout_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.path = database_path + SUFFIX
        self._timeout_s = timeout_s
        self._clock = clock
        self._sleep = sleep
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
        pause, deadline = FIRST_PAUSE_S, self._clock() + self._timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self._clock() >= deadline:
                    raise StoreBusyError(
                        "cannot begin a write transaction: another agentrt writer held its "
                        f"turn at {self.path} past the busy timeout ({self._timeout_s:g} s); "
                        "nothing was written"
                    ) from None
                self._sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE_S)
                waited = True
            except OSError:
                self._give_up()  # a file system without flock: SQLite's busy handler alone
                return
            else:
                self._held = True
                break
        if waited and conn is not None:
            self._shorten(conn, deadline - self._clock())

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
        self._held = False
        self._shortened = None
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            os.close(fd)

    def _descriptor(self) -> int | None:
        if self._unavailable:
            return None
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        # First use, or a forked child holding its parent's open file: open one of its own
        # (the parent's is left alone; unlocking it would give the parent's turn back).
        self._fd, self._held = None, False
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
