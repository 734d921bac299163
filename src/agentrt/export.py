"""Following the audit log from another process: a read-only follower by `seq` cursor, and sinks.

A `Follower` opens the database read-only and reads events above its position,
one bounded page at a time, in commit order. The record's events are chained in
N partitions (decision 0093; N = 1 for SQLite by default and for every record
made before them), and within a partition `seq` order is commit order: its seqs
are handed out under its head's lock, so an event committed later never has a
lower seq than one already read. Across partitions it is not, so the position is
one `(seq, hash)` per partition: a page is the next events of each partition
whose head moved (read first, `Store.chain_heads()`), delivered in seq order. A
run's events are all in one partition, so following a run is following seqs.

So with N > 1 no single seq says where a reader stopped: a partition's next event
can take a seq below the highest delivered for ever (a quiet partition's seqs
trail a busy one's), or commit after a higher seq of another partition was read.
A place to start from is one seq per partition: a cursor file keeps them, and
`Follower.after` gives them as an `after_seq` (what `agentrt events` prints as
the next page's `--after`), so a page read later starts each partition after the
last event delivered of it: nothing missed, nothing repeated (decision 0095).

Delivery guarantees, with a persisted cursor file:

- the cursor is saved only after the sink has taken a page and been flushed, so
  a clean stop (between pages, or after `max_events`) resumes exactly after the
  last event delivered: exactly once across clean stops;
- a hard kill can lose at most the acknowledgement of the page being delivered,
  so that one page, and no more, is delivered again.

Without a cursor file, the same holds across followers by hand: a follower
started with `after_seq=` another's `after` delivers exactly the events that one
did not, whenever they commit.

Events go to a sink (`Sink`: any callable taking an `Event`, with an optional
`flush()` called after each page).

The cursor file is written atomically (a 0600 temporary file in the same
directory, fsynced, renamed over the old one, the directory fsynced). It
records, per partition, the last event's hash as well as its seq, so a cursor is
never applied to a different or rewritten database (a partition with nothing
delivered yet holds its starting seq and no hash). A cursor file of version 1
(one `seq` and `hash`, written before partitions) reads as partition 0 of 1.

A cursor file is refused when it is a symlink, not a regular file, writable by
group or others or owned by another user (whoever can write it can make the
follower skip events), or larger than any cursor (`MAX_CURSOR_BYTES`). One
follower at a time uses a cursor file: it holds an exclusive `flock` on
`<cursor>.lock` (a file left beside the cursor, holding nothing) until it is
closed, and a second follower of the same file is refused ("in use by another
follower"), since each would deliver every event.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ._chain import partition_of
from ._durable import fsync_directory
from ._errors import AgentrtError
from ._records import Event
from ._store import Store, open_existing
from .trace import event_json, json_line

if TYPE_CHECKING:
    from .otel import OtelSink

CURSOR_VERSION = 2
DEFAULT_INTERVAL = 0.5
DEFAULT_PAGE_SIZE = 500
MAX_PAGE_SIZE = 10_000
MAX_WAIT = threading.TIMEOUT_MAX
"""The longest wait, in seconds, a thread can be asked for (about 292 years): the
most an `interval` (or the command line's `--retry`) may be."""

Sink = Callable[[Event], Any]
"""Where a `Follower` delivers events: any callable taking one `Event`.

The follower calls it once per event, in commit (`seq`) order, on the thread
that called `Follower.run`; its return value is ignored. If it also has a
`flush()` method, that is called after each page, before the page is
acknowledged (and the cursor saved): a sink that buffers writes them out
there. An exception from the sink (or its `flush`) stops `run` and leaves the
page unacknowledged, so it is delivered again next time. Sinks that ship
with agentrt: `JsonLinesSink` (a durable file or a stream) and the observers
of `agentrt.trace` (`TextObserver`, `JsonLinesObserver`), which are also
`Driver(observer=...)` callables; `list.append` is a sink too. With the
`otel` extra, `otel_sink(path)` (`agentrt.otel.OtelSink`) exports spans.
"""


class CursorError(AgentrtError):
    """A cursor file that cannot be read, or that does not belong to this database or run."""


@dataclass(frozen=True)
class Cursor:
    """What was delivered: per chain partition, the last event's `(seq, hash)` (a hash of
    `''`: nothing delivered in it yet, `seq` the start), and the run followed (None: all)."""

    heads: tuple[tuple[int, str], ...]
    run_id: str | None

    @property
    def seq(self) -> int:
        """The highest seq delivered (with one partition, the last event's)."""
        return max(seq for seq, _ in self.heads)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CURSOR_VERSION,
            "heads": [[seq, digest] for seq, digest in self.heads],
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, data: Any) -> Cursor:
        if not isinstance(data, dict) or data.get("version") not in (1, CURSOR_VERSION):
            raise CursorError(f"not an agentrt cursor of version 1 or {CURSOR_VERSION}")
        run_id = data.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise CursorError("the cursor's run_id is neither text nor null")
        if data["version"] == 1:  # before partitions: partition 0 of 1
            pairs: Any = [[data.get("seq"), data.get("hash")]]
        else:
            pairs = data.get("heads")
            if not isinstance(pairs, list) or not pairs:
                raise CursorError("the cursor's heads are not a list of [seq, hash] pairs")
        heads: list[tuple[int, str]] = []
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise CursorError(f"the cursor holds {pair!r}, not a [seq, hash] pair")
            seq, digest = pair
            if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= _MAX_SEQ:
                raise CursorError(
                    f"the cursor's seq is not an integer from 0 to {_MAX_SEQ}: {seq!r}"
                )
            if not isinstance(digest, str):
                raise CursorError("the cursor's hash is not text")
            heads.append((seq, digest))
        return cls(heads=tuple(heads), run_id=run_id)


_MAX_SEQ = 2**63 - 1
"""The largest seq a record holds (a signed 64-bit integer on either backend)."""


MAX_CURSOR_BYTES = 1 << 20
"""The most a cursor file may hold: a cursor of the most partitions a chain may have (1,024,
each a seq and a hash: under 100 KB) fits many times over."""


def load_cursor(path: str | os.PathLike[str]) -> Cursor | None:
    """The cursor saved at `path`, None when there is no file; CursorError when unreadable.

    Refused: a symlink (the cursor is written by renaming a new file over the name, so
    the link would be read once and replaced), anything but a regular file, a file
    others may write (whoever can write it can make the follower skip events) or that
    another user owns, and a file larger than `MAX_CURSOR_BYTES`."""
    where = os.fspath(path)
    try:
        # Opened without blocking and read only if it is a regular file: a FIFO (or a
        # device) given as the cursor would otherwise wait for a writer for ever.
        fd = os.open(
            path,
            os.O_RDONLY
            | os.O_NONBLOCK
            | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_NOFOLLOW", 0),
        )
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(path):
            raise CursorError(_SYMLINK.format(where)) from e
        raise CursorError(f"cannot read the cursor file {where}: {e}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CursorError(f"the cursor file {where} is not a regular file")
        _check_cursor_mode(where, st)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_CURSOR_BYTES + 1)  # to the end, or one byte past any cursor
        if len(data) > MAX_CURSOR_BYTES:
            raise CursorError(
                f"the cursor file {where} is larger than {MAX_CURSOR_BYTES} bytes, which no "
                "cursor is"
            )
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CursorError(f"cannot read the cursor file {where}: {e}") from e
    finally:
        os.close(fd)
    try:
        loaded = json.loads(text)
    except (ValueError, RecursionError) as e:
        what = "nested too deep" if isinstance(e, RecursionError) else str(e)
        raise CursorError(f"the cursor file {where} is not JSON: {what}") from e
    try:
        return Cursor.from_json(loaded)
    except CursorError as e:
        raise CursorError(f"the cursor file {where} is unusable: {e}") from e


_SYMLINK = (
    "the cursor file {} is a symlink; agentrt reads and writes only the file itself "
    "(a new cursor is renamed over the name, which would replace the link)"
)


def _check_cursor_mode(where: str, st: os.stat_result) -> None:
    if os.name != "posix":
        return
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CursorError(
            f"the cursor file {where} is writable by group or others (mode {mode:04o}): "
            "whoever can write it can make the follower skip events. Make it 0600"
        )
    if st.st_uid != os.geteuid():
        raise CursorError(
            f"the cursor file {where} is owned by uid {st.st_uid}, not by this process "
            f"(uid {os.geteuid()}): its owner can make the follower skip events"
        )


class _CursorLock:
    """An exclusive lock on `<cursor>.lock`, held while one follower uses the cursor file:
    two followers of one cursor file would each deliver every event and each move the
    other's cursor. `flock` is let go when the process ends, however it ends."""

    def __init__(self, cursor_path: str) -> None:
        self.path = cursor_path + ".lock"
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, as before
            return
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise CursorError(
                    f"the cursor's lock file {self.path} is a symlink; remove it"
                ) from e
            raise CursorError(f"cannot open the cursor's lock file {self.path}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CursorError(
                    f"the cursor file {cursor_path} is in use by another follower (it holds "
                    f"{self.path}): one follower per cursor file, or each delivers every "
                    "event"
                ) from None
            raise CursorError(f"cannot lock {self.path}: {e}") from e
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor lets the flock go
            self._fd = None


def save_cursor(path: str | os.PathLike[str], cursor: Cursor) -> None:
    """Write `cursor` to `path` atomically, mode 0600: temp file, fsync, rename, fsync the dir."""
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    tmp = os.path.join(
        directory, f".{os.path.basename(target)}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    )
    data = (json.dumps(cursor.to_json(), sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            if os.name == "posix":
                os.fchmod(fd, 0o600)  # whatever the umask made of it
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)  # the rename durable only once the directory entry is


class Follower:
    """Follows events of one run (or all runs) from a separate process, read-only, by seq.

    `cursor` is the path of a cursor file (None: nothing persisted). When the
    file exists, following resumes after the events it names, and `after_seq` is
    ignored; otherwise it starts after `after_seq`: one seq (every partition
    starts after it) or one seq per chain partition (what `after` gives, to take
    up exactly where another follower stopped). Another count is a `ValueError`.
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str],
        run_id: str | None = None,
        cursor: str | os.PathLike[str] | None = None,
        interval: float = DEFAULT_INTERVAL,
        page_size: int = DEFAULT_PAGE_SIZE,
        *,
        after_seq: int | Sequence[int] = 0,
    ) -> None:
        if not 0 < interval <= MAX_WAIT:
            raise ValueError(
                f"interval must be a positive number of seconds, at most {MAX_WAIT:.0f}"
            )
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
        starts = (after_seq,) if isinstance(after_seq, int) else tuple(after_seq)
        if not starts or any(isinstance(s, bool) or not isinstance(s, int) for s in starts):
            raise ValueError("after_seq must be a seq, or one seq per chain partition")
        if min(starts) < 0:
            raise ValueError("after_seq must not be negative")
        self.run_id = run_id
        self.interval = interval
        self.page_size = page_size
        self.cursor_path = None if cursor is None else os.fspath(cursor)
        self._lock = None if self.cursor_path is None else _CursorLock(self.cursor_path)
        try:
            self._store: Store = open_existing(store_path, read_only=True)
        except BaseException:
            self._release()
            raise
        try:
            self._partitions = len(self._store.chain_heads())
            if len(starts) == 1:
                starts *= self._partitions
            elif len(starts) != self._partitions:
                raise ValueError(
                    f"after_seq names {len(starts)} positions and this database's chain "
                    f"has {self._partitions} partition(s): give one seq, or one per partition"
                )
            self._heads: list[tuple[int, str]] = [(seq, "") for seq in starts]
            saved = None if self.cursor_path is None else load_cursor(self.cursor_path)
            if saved is not None:
                self._check_cursor(saved)
                self._heads = list(saved.heads)
        except BaseException:
            self._store.close()
            self._release()
            raise

    def _check_cursor(self, saved: Cursor) -> None:
        if saved.run_id != self.run_id:
            raise CursorError(
                f"the cursor file {self.cursor_path} follows "
                f"{'run ' + saved.run_id if saved.run_id else 'all runs'}, not "
                f"{'run ' + self.run_id if self.run_id else 'all runs'}"
            )
        if len(saved.heads) != self._partitions:
            raise CursorError(
                f"the cursor file {self.cursor_path} holds {len(saved.heads)} partition "
                f"position(s) and this database's chain has {self._partitions}: it belongs "
                "to another database"
            )
        for seq, digest in saved.heads:
            if seq == 0 or digest == "":
                continue
            # Hashes are 64 characters; the payload need not be read whole.
            found = self._store.list_events(None, seq - 1, 1, cap=64)
            if not found or found[0].seq != seq or found[0].hash != digest:
                raise CursorError(
                    f"the cursor file {self.cursor_path} names event {seq} with hash "
                    f"{digest}, which this database does not hold: it belongs to another "
                    "database, or this one was rewritten"
                )

    @property
    def position(self) -> int:
        """The highest seq delivered (acknowledged); with one partition, the last event's.
        With more, not a place to start from: a later event can take a lower seq (`after`)."""
        return max(seq for seq, _ in self._heads)

    @property
    def positions(self) -> tuple[tuple[int, str], ...]:
        """Per chain partition, the last event delivered, `(seq, hash)` (`''`: none yet)."""
        return tuple(self._heads)

    @property
    def after(self) -> tuple[int, ...]:
        """The `after_seq` that starts another follower exactly after what this one
        delivered, missing and repeating nothing: one seq when it follows one run (its
        partition's) or the chain has one partition; otherwise one seq per partition, for
        no single seq can be a position in N chains that each number their own events
        (`agentrt events` prints it, comma-separated, as the next page's `--after`)."""
        if self.run_id is not None:
            return (self._heads[partition_of(self.run_id, self._partitions)][0],)
        return tuple(seq for seq, _ in self._heads)

    def __enter__(self) -> Follower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._store.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def poll(self, limit: int | None = None) -> list[Event]:
        """The next page of events after the position; reading it acknowledges nothing."""
        size = self.page_size if limit is None else max(0, min(limit, self.page_size))
        if size == 0:
            return []
        n = self._partitions
        if self.run_id is not None:  # one run: one partition, whose seqs are commit order
            after = self._heads[partition_of(self.run_id, n)][0]
            return self._store.list_events(self.run_id, after, size)
        if n == 1:
            return self._store.list_events(None, self._heads[0][0], size)
        page: list[Event] = []
        for p, (head_seq, _) in enumerate(self._store.chain_heads()):
            if head_seq > self._heads[p][0]:
                page += self._store.list_events(None, self._heads[p][0], size, partition=p)
        # Each partition's next events are in its commit order; a page of at most `size`,
        # in seq order, keeps that (it cuts each partition's run of events at a seq).
        return sorted(page, key=lambda e: e.seq)[:size]

    def ack(self, event: Event) -> None:
        """Record `event` and all before it in its partition as delivered; persists the
        cursor if there is one."""
        self.ack_page([event])

    def ack_page(self, page: list[Event]) -> None:
        """Record each event of `page` (and all before it in its partition) as delivered,
        then persist the cursor once, if there is one."""
        moved = False
        for event in page:
            p = event.seq % self._partitions
            if event.seq > self._heads[p][0]:
                self._heads[p] = (event.seq, event.hash)
                moved = True
        if moved and self.cursor_path is not None:
            save_cursor(self.cursor_path, Cursor(tuple(self._heads), self.run_id))

    def run(
        self,
        sink: Sink,
        *,
        follow: bool = True,
        stop: threading.Event | None = None,
        max_events: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """Deliver events to `sink` page by page; returns how many were delivered.

        After each page the sink's `flush()` (if it has one) is called, then the
        page is acknowledged. Without `follow` it returns once caught up;
        with it, it polls every `interval` until `stop` is set, `max_events`
        were delivered, or `timeout` seconds passed. An exception from the sink
        propagates, and the page it was in is not acknowledged.
        """
        stop = stop or threading.Event()
        deadline = None if timeout is None else time.monotonic() + timeout
        delivered = 0
        flush = getattr(sink, "flush", None)
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            room = None if max_events is None else max_events - delivered
            if room is not None and room <= 0:
                break
            page = self.poll(room)
            if page:
                for event in page:
                    sink(event)
                if callable(flush):
                    flush()
                self.ack_page(page)
                delivered += len(page)
                continue
            if not follow:
                break
            wait = self.interval
            if deadline is not None:
                wait = min(wait, max(deadline - time.monotonic(), 0.0))
            stop.wait(wait)
        return delivered


class JsonLinesSink:
    """Writes each event as one JSON line (`agentrt.trace.event_json`, ASCII only).

    Given a path, it appends to that file (created 0600) a page at a time: the
    lines of the events it is given are kept until `flush()`, which writes them
    with one `os.write` of whole lines and fsyncs, so a follower acknowledges only
    events that are on disk, and a kill leaves the page either whole or not at
    all. Only a kill inside that one write can leave a torn last line; opening
    the file cuts such a tail back to its last newline, so the page delivered
    again starts on a line of its own. (A page bigger than `MAX_PENDING_BYTES` is
    written in more than one write, each of whole lines.) One sink per file.

    Given a stream, each line is written to it at once and `flush()` flushes it.
    """

    MAX_PENDING_BYTES = 16 * 1024 * 1024

    def __init__(self, target: str | os.PathLike[str] | TextIO) -> None:
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._fd: int | None = None
        self.stream: TextIO | None = None
        if isinstance(target, str | os.PathLike):
            path = os.fspath(target)
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(path, flags, 0o600)
            try:
                _cut_torn_tail(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        else:
            self.stream = target

    def __call__(self, event: Event) -> None:
        line = json_line(event_json(event)) + "\n"
        if self.stream is not None:
            self.stream.write(line)
            return
        data = line.encode("ascii")  # json_line is ASCII only
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= self.MAX_PENDING_BYTES:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._fd is None or not self._pending:
            return
        data = memoryview(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0
        while data:  # a regular file takes it in one write; a short write is finished here
            written = os.write(self._fd, data)
            data = data[written:]

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()
            return
        if self._fd is None:
            return
        self._write_pending()
        os.fsync(self._fd)

    def close(self) -> None:
        if self.stream is not None or self._fd is None:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def otel_sink(store_path: str | os.PathLike[str], exporter: Any = "env") -> OtelSink:
    """A sink exporting the events as OpenTelemetry spans (`agentrt.otel.OtelSink`).

    `exporter` is an SDK span exporter, None, or "env" (the `OTEL_*` variables).
    Needs the `otel` extra; without it, `agentrt.otel.OtelMissingError`.
    """
    from .otel import OtelSink

    return OtelSink(store_path, exporter)


def _cut_torn_tail(fd: int, chunk: int = 65_536) -> None:
    """Truncate the file open at `fd` back to just after its last newline (or to empty).

    A tail with no newline is what a kill in the middle of a write leaves: a
    partial line, which a later append would turn into one unreadable line.
    """
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        at = block.rfind(b"\n")
        if at >= 0:
            keep = start + at + 1
            break
        end = start
    else:
        keep = 0
    if keep < size:
        os.ftruncate(fd, keep)
        os.fsync(fd)


__all__ = [
    "CURSOR_VERSION",
    "MAX_CURSOR_BYTES",
    "MAX_WAIT",
    "Cursor",
    "CursorError",
    "Follower",
    "JsonLinesSink",
    "Sink",
    "load_cursor",
    "otel_sink",
    "save_cursor",
]
