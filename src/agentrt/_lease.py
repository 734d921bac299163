"""The lease: which process may execute a RUNNING run, and for how long.

Invariants this module owns:

- An owner string is unique per driver: the configured name plus 12 random hex
  characters (or 32 when no name is given), so two replicas configured alike
  never share a lease.
- Lease times come from the store's lease clock (`lease_now`: the wall clock
  for SQLite, the server's for a shared database), never from the driver's
  injectable `now`, because expiry must agree between processes.
- The heartbeat renews on its own thread and its own connection every third of
  the lease length, so neither a long tool call nor a consumer holding the
  store's connection (its lock) can starve it. A consumer holding a *write
  transaction* open on the file can: SQLite has one writer at a time, and the
  renewal waits for it (up to the busy timeout, then retries at the next tick).
  An UPDATE that matches no row means another owner took the run: the
  heartbeat stops renewing and reports the loss (its look at the session's kept
  tool tasks, `on_beat`, goes on until the session stops it, or until nothing is
  left to look at, `keeps`: no kept task running, no tool call in flight). So
  does a renewal on a SQLite file deleted or replaced under the store: nothing
  is renewed in a file no other process reads (`_store/sqlite/_renewer.py`).
- A run whose event loop was closed with its task kept (it can never run again) is, for
  the lease, a dead process: while no tool of it still runs (`gone`), the heartbeat renews
  nothing, says so once, and the lease lapses for another process's takeover (decision
  0223). A live loop that is merely busy or blocked is never judged. While paused, each
  beat reads (`Renewer.holds`, nothing written) whether the lease still names this owner
  and the session's epoch; once it does not (taken over, given back, the run ended) the
  heartbeat stops as one whose lease was lost: its renewer's connection closed, its thread
  ended once nothing is left to look at (decision 0225).
- The holder record (host id, pid, process start time) lets a resumer on the
  same host prove a previous owner dead (`prove_dead`).
- `check_live_lease` is the one judgement of whether a lease someone else
  holds may be taken (none, expired, this owner's, or a provably dead
  holder's); the takeover, a waiting run's attach and `recover` all ask it
  through `_continuation.judge`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ._errors import RunLeasedError
from ._store._base import Renewer
from ._store._records import LeaseState
from .trace import sanitize

_log = logging.getLogger("agentrt")

WallClock = Callable[[], datetime]

FIRST_EPOCH = 1
"""The lease epoch a new run is created with (`Tx.create_run`); every later grant raises it."""


def make_owner(name: str) -> str:
    """A lease owner unique to one driver instance."""
    if name:
        return f"{name}/{secrets.token_hex(6)}"
    return secrets.token_hex(16)


def host_id() -> str:
    """A stable id of this host: the machine id where the OS has one, else the hostname."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            # Replaced, not refused: a corrupt machine id must not stop every lease.
            with open(path, encoding="ascii", errors="replace") as f:
                value = f.read().strip()
            if value:
                return value
        except OSError:
            continue
    return socket.gethostname()


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the pid and the command name ([] where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return []
    # The command name (field 2) is in parentheses and may itself contain spaces
    # or parentheses, so split after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def process_start_time(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot), '' where unknown.

    Together with the pid it names one process for the life of the host: a
    reused pid has another start time.
    """
    fields = _stat_fields(pid)
    # starttime is field 22 overall; after dropping pid and comm it is index 19.
    return fields[19] if len(fields) > 19 else ""


def _read_first_line(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readline().strip()
    except OSError:
        return ""


def boot_id() -> str:
    """This boot of the kernel: pids and start times mean nothing across boots."""
    return _read_first_line("/proc/sys/kernel/random/boot_id")


def pid_namespace() -> str:
    """This process's pid namespace: containers sharing a machine id do not share pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def holder_record() -> dict[str, Any]:
    pid = os.getpid()
    return {
        "host": host_id(),
        "boot": boot_id(),
        "pidns": pid_namespace(),
        "pid": pid,
        "start": process_start_time(pid),
    }


_HOLDER: tuple[int, str] = (0, "")
"""This process's pid and its `holder_json`: nothing in it changes while the process
lives (a forked child has another pid, so it makes its own)."""


def holder_json() -> str:
    global _HOLDER
    pid, text = _HOLDER
    if pid != os.getpid() or not text:
        text = json.dumps(holder_record(), sort_keys=True, separators=(",", ":"))
        _HOLDER = (os.getpid(), text)
    return text


STOP_WAIT_S = 5.0
"""How long `Heartbeat.stop()` waits for a renewal in flight before it returns anyway."""


class Heartbeat:
    """Renews one run's lease on a thread of its own until stopped or lost."""

    def __init__(
        self,
        renewer: Renewer,
        run_id: str,
        owner: str,
        ttl: timedelta,
        *,
        on_beat: Callable[[], None] | None = None,
        keeps: Callable[[], bool] | None = None,
        gone: Callable[[], bool] | None = None,
        epoch: Callable[[], int | None] | None = None,
    ) -> None:
        self._renewer = renewer
        # Called on this thread at each beat before the renewal (a look at what keeps the
        # lease: a kept tool task whose loop was closed); it may stop the heartbeat. Once
        # the lease is lost, the beats go on with the look alone, until stopped, or until
        # `keeps` (asked after each look) says nothing is left to look at (decision 0209).
        self._on_beat = on_beat
        self._keeps = keeps
        # Asked at each beat before the renewal: whether the event loop driving the run was
        # closed with its task kept (it can never run again) and no tool of it still runs.
        # While it says so, nothing is renewed: the lease lapses as a crashed process's does,
        # and another process may take the run over (decision 0223).
        self._gone = gone
        # The lease's epoch the session holds (None when unknown): while paused, each beat
        # reads whether the lease still names this owner at it, and ends the heartbeat as a
        # lost lease does once it does not (decision 0225).
        self._epoch = epoch
        self._run_id = run_id
        self._owner = owner
        self._ttl = ttl
        self._stop = threading.Event()
        self.lost = threading.Event()
        self.renewals = 0
        self.beats = 0  # beats made (a look, a renewal or none): what a test waits on
        self._thread = threading.Thread(
            target=self._beat, name=f"agentrt-heartbeat-{run_id[:8]}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop renewing. Never releases the lease: the loop's own transaction does that.

        `wait=False` returns at once: a renewal still in flight may finish, which
        is harmless (it only extends a lease this owner still holds).
        """
        self._stop.set()
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=STOP_WAIT_S)

    def _log_failed(self, exc: BaseException) -> None:
        said = sanitize(str(exc) or type(exc).__name__)
        prefix = f"renewing the lease on run {sanitize(self._run_id)} failed"
        if not said.startswith(prefix):  # the store's own words may name it already
            said = f"{prefix}: {said}"
        _log.warning("%s; tried again at each beat until it holds or lapses", said)

    def _loop_gone(self) -> bool:
        if self._gone is None:
            return False
        try:
            return self._gone()
        except Exception:  # a look that failed judges nothing: the lease is renewed
            _log.warning(
                "a heartbeat's look at whether run %s's event loop was closed failed",
                sanitize(self._run_id),
                exc_info=True,
            )
            return False

    def _still_named(self) -> bool:
        """While paused: whether the lease may still be this heartbeat's (a read, nothing
        written). False only when the lease names another owner or epoch (taken over, given
        back, the run ended) and the loop is still gone at the same epoch: a Gate session's
        call from a live loop may have moved the lease to a new epoch of its own meanwhile,
        which the next beat judges. A read that failed judges nothing (raised to the beat)."""
        look = self._epoch
        epoch = look() if look is not None else None
        if look is None or epoch is None:
            return True
        if self._renewer.holds(self._run_id, self._owner, epoch):
            return True
        return not self._loop_gone() or look() != epoch

    def _lose(self) -> bool:
        """The lease is no longer this owner's: say so (`lost`) and let go of the renewer's
        connection. Returns whether the thread ends now: with no look to go on making
        (`on_beat`), at once; else once `keeps` says nothing is left to look at."""
        self.lost.set()
        self._renewer.close()
        return self._on_beat is None

    def _beat(self) -> None:
        interval = self._ttl.total_seconds() / 3
        renewer_open = True
        failed = 0  # renewals failed in a row
        paused = False  # not renewing: the loop driving the run was closed (decision 0223)
        unread = 0  # reads of the lease failed in a row while paused
        try:
            while not self._stop.wait(interval):
                self.beats += 1
                if self._on_beat is not None:
                    try:
                        self._on_beat()
                    except Exception:  # a look that failed is made again at the next beat
                        logging.getLogger("agentrt").warning(
                            "a heartbeat's look at run %s's kept tools failed",
                            self._run_id,
                            exc_info=True,
                        )
                    if self._stop.is_set():  # the lease was given back: nothing to renew
                        return
                if self.lost.is_set():
                    if self._keeps is not None and not self._keeps():
                        # Nothing may run under the lost lease any more, and nothing can start
                        # under it: no look is left to make (decision 0209).
                        return
                    continue  # nothing to renew: only the look goes on, until stopped
                if self._loop_gone():
                    if not paused:
                        paused = True
                        _log.warning(
                            "the event loop driving run %s was closed with its task kept: its "
                            "lease is no longer renewed and lapses, as a crashed process's "
                            "does, so another process may take the run over (decision 0223)",
                            sanitize(self._run_id),
                        )
                    try:
                        named = self._still_named()
                    except Exception:  # read again at the next beat; said once a streak
                        if unread == 0:
                            _log.warning(
                                "reading the lease on run %s failed; read again at each beat",
                                sanitize(self._run_id),
                                exc_info=True,
                            )
                        unread += 1
                        continue
                    unread = 0
                    if not named:  # taken over, given back or ended: as a lost lease
                        renewer_open = False
                        if self._lose():
                            return
                    continue
                if paused:  # a Gate session's next call from a live loop (decision 0223)
                    paused = False
                    unread = 0  # a later pause's failed reads are said again
                    _log.info(
                        "the lease on run %s is renewed again: a live event loop drives it",
                        sanitize(self._run_id),
                    )
                try:
                    held = self._renewer.renew(self._run_id, self._owner, self._ttl)
                except Exception as exc:
                    # A busy or failed write is retried at the next tick; the lease
                    # still has two thirds of its length to run. The first of a streak is
                    # logged with its cause (why a lease may lapse), not the rest.
                    if failed == 0:
                        self._log_failed(exc)
                    failed += 1
                    continue
                if failed:
                    _log.info(
                        "the lease on run %s was renewed again after %d failed renewals",
                        sanitize(self._run_id),
                        failed,
                    )
                    failed = 0
                if not held:
                    # A kept tool's task whose loop is closed after the loss still frees
                    # the run for its gate once looked at (decision 0207): the look goes on
                    # until the session stops it; the renewer's connection goes now.
                    renewer_open = False
                    if self._lose():
                        return
                    continue
                self.renewals += 1
        finally:
            if renewer_open:
                self._renewer.close()


def _process_state(pid: int) -> str:
    """The one-letter state of `pid` from /proc ('' where unknown)."""
    fields = _stat_fields(pid)
    return fields[0] if fields else ""


def prove_dead(holder_text: str) -> dict[str, Any] | None:
    """Proof that a lease holder's process is gone, or None when it cannot be proved.

    Only a holder on this host can be judged, and only by facts: no process
    with that pid, a pid now used by a process with another start time, or a
    zombie (it can run no more code). A live process with the recorded start
    time, a holder from another host, or an unreadable record proves nothing:
    the caller waits out the lease.
    """
    try:
        holder = json.loads(holder_text) if holder_text else None
    except ValueError:
        return None
    if not isinstance(holder, dict):
        return None
    pid, host, start = holder.get("pid"), holder.get("host"), holder.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or host != host_id():
        return None
    if not isinstance(start, str) or not start:
        return None
    # The same machine id is not enough: containers may share it (a bind-mounted
    # /etc/machine-id) without sharing pids. Only the same boot and the same pid
    # namespace make "no such pid" a fact about the holder.
    boot, pidns = holder.get("boot"), holder.get("pidns")
    if not boot or boot != boot_id() or not pidns or pidns != pid_namespace():
        return None
    proof: dict[str, Any] = {"host": host, "pid": pid, "start": start}
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return {**proof, "proof": "no such process"}
    except PermissionError:
        pass  # it exists, owned by someone else: judge it by its start time below
    except OSError:
        return None
    current = process_start_time(pid)
    if current and current != start:
        return {**proof, "proof": "pid reused by a process with another start time"}
    if current == start and _process_state(pid) == "Z":
        return {**proof, "proof": "the process has exited (zombie)"}
    return None


def check_live_lease(lease: LeaseState, me: str, now: datetime) -> dict[str, Any]:
    """How the previous owner is known to be gone; refuse, changing nothing, if it is not.

    A lease that is live at `now` (the store's lease clock) and someone else's
    (not `me`'s) refuses (`RunLeasedError`) unless its holder is provably dead
    on this host. An expiry nobody can read is never judged expired.
    """
    if not lease.owner:
        return {"by": "no lease"}
    if lease.held_by(me):
        # This very driver held it: its loop stopped (an error), and it is not
        # running now (a driver refuses a second concurrent call on a run).
        return {"by": "this driver's own lease"}
    if lease.expired_at(now):
        return {"by": "lease expired"}
    proof = prove_dead(lease.holder)
    if proof is None:
        raise RunLeasedError(lease.run_id, lease.owner, lease.expires_at)
    return {"by": "owner process gone", **proof}
