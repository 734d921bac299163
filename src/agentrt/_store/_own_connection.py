"""A heartbeat renewer's connection of its own: this process's alone.

Both backends renew a lease on a connection of the renewer's, opened lazily on the
heartbeat's thread (`_conn`). It belongs to the process that opened it (decision 0127):
a fork waits for a renewal under way (`_fork_lock`), and in a forked child the renewer
refuses every renewal in one sentence and keeps the connection, never closing it there
(`_fork.keep`).

Invariant: a backend renews only through `renew` (and reads the lease only through
`holds`), which holds `_lock` and refuses a renewer left to its parent before its own
`_renew` (`_holds`) runs.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Generic, TypeVar

from .._errors import StoreError
from .._fork import keep, left_to_the_parent, refusal

C = TypeVar("C")


class OwnConnection(Generic[C]):
    """The fork rules of a renewer holding one connection `_conn` (None until opened)."""

    def __init__(self) -> None:
        self._conn: C | None = None
        self._left: str | None = None  # the refusal, once left to its parent at a fork
        self._lock = threading.RLock()  # held while renewing: a fork waits for it
        left_to_the_parent(self)

    def _fork_lock(self) -> threading.RLock:
        return self._lock

    def _leave(self, parent: int) -> None:
        """In a forked child: the parent's renewer; its connection kept, never closed."""
        self._lock = threading.RLock()
        keep(self._conn)
        self._conn = None
        self._left = refusal("heartbeat's connection", parent)

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        with self._lock:
            if self._left is not None:
                raise StoreError(self._left)
            return self._renew(run_id, owner, ttl)

    def _renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        """The backend's renewal, on `_conn` (opened here when None)."""
        raise NotImplementedError

    def holds(self, run_id: str, owner: str, epoch: int) -> bool:
        with self._lock:
            if self._left is not None:
                raise StoreError(self._left)
            return self._holds(run_id, owner, epoch)

    def _holds(self, run_id: str, owner: str, epoch: int) -> bool:
        """The backend's read of the lease, on `_conn` (opened here when None)."""
        raise NotImplementedError
