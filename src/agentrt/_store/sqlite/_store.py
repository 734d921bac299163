"""The SQLite store: opening the file safely, transactions, events, bounded reads, row decoding.

One `Store` wraps one writer (or read-only) connection. Every use of that
connection is serialized by a re-entrant lock, because the async driver calls the
store from worker threads. Write transactions are `BEGIN IMMEDIATE` and are rolled
back whole on any exception; commits are fsynced (`synchronous=FULL`).

Reads never crash on a bad row: a value that will not decode leaves its field
empty and sets the record's `decode_error`. That holds for any bytes in any
column: every connection decodes TEXT itself (`text_factory`), strictly, and a
value that is not valid UTF-8 reads as its raw `bytes` instead of raising, on
every read path (the store's reads, `query()`, the chain verifier, reads inside
transactions, the schema check at open). Page reads cap every text column at
`TEXT_CAP` characters in SQL, so an oversized value is never loaded whole.

The schema's safety (no trigger, no view, every entry readable) is checked at
open and again at the start of any write transaction that follows a change of
`PRAGMA schema_version`, so a trigger added by another connection while the
store is open never fires on one of its writes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..._canonical import from_text
from ..._capped import TEXT_CAP
from ..._chain import heads_digest, verify_chain
from ..._clock import parse_time
from ..._errors import (
    NotFoundError,
    StoreBusyError,
    StoreError,
    commit_unknown,
)
from ..._fork import keep, left_to_the_parent, refusal
from ..._records import (
    Approval,
    ApprovalStatus,
    Event,
    FileCheck,
    Lease,
    ModelCallRecord,
    Run,
    RunStatus,
    Step,
    ToolSpec,
    VerifyReport,
)
from ..._stored_text import shown_text, unreadable_text
from .._base import Renewer
from .._records import Grouped
from . import _connection
from . import _filesafety as filesafety
from . import _migrations as migrations
from ._chain_rows import SqliteChainReader
from ._codecs import (
    _APPROVAL_COLUMNS,
    _EVENT_COLUMNS,
    _MODEL_CALL_COLUMNS,
    _RUN_COLUMNS,
    _STEP_COLUMNS,
    approval_from_row,
    event_from_row,
    model_call_from_row,
    run_from_row,
    select_list,
    step_from_row,
)
from ._connection import (
    _absolute,
    _configure,
    _connect,
    _enable_wal,
    _open_reader,
    _refusal,
    _uri,
    check_schema,
    check_sqlite_version,
    is_busy,
    is_io_error,
    is_read_only_error,
    read_only_before_commit,
    sqlite_failure,
    store_error,
)
from ._proxy_rows import ProxyRows
from ._renewer import ConnectionRenewer, StoreRenewer
from ._tx import move_heads
from ._writer_turns import WriterTurns
from ._writes import SqliteTx

PENDING_APPROVALS_DEFAULT = 100
"""Pending approvals of all runs returned when no limit is given."""
PENDING_APPROVALS_MAX = 1000
"""The most pending approvals one read returns."""

_T = TypeVar("_T")


def open_store(
    path: str | os.PathLike[str], *, chain_partitions: int | None = None, asked: bool = False
) -> SqliteStore:
    """Open the database at `path` for writing, creating it (0600) or migrating it as needed.

    `chain_partitions` is N for a record created now (decision 0093; default 1);
    an existing record keeps its own, and another N given for it is refused.
    The store's `found_version` is the schema version the open found (0: created now).

    `asked`: the operator's explicit migration (`agentrt migrate`, decision 0201), which
    changes nothing but the record: a file or sidecar whose mode is loose is refused,
    not tightened, and a database holding tables but no agentrt record is refused
    (`migrations.FOREIGN`) before anything is written to it.

    `":memory:"` gives a private in-memory store. Refuses a symlink, a file with
    a second hard link, an insecure file, sidecar or directory, a trigger or
    view, an unreadable schema, a newer schema, and a file whose
    `min_writer_version` is above this runtime.
    """
    check_sqlite_version()
    if os.fspath(path) == ":memory:":
        conn = _connect(":memory:", uri=False)
        try:
            _configure(conn, writer=True)
            found, _ = migrations.upgrade(
                conn, check=check_schema, chain_partitions=chain_partitions
            )
            partitions = migrations.chain_partitions(conn)
        except BaseException:
            conn.close()
            raise
        store = SqliteStore(conn, path=":memory:", read_only=False, uri=None, partitions=partitions)
        store.found_version = found
        return store
    abspath = _absolute(path)
    filesafety.check_directory(abspath)  # before anything is created in it
    filesafety.create_owner_only(abspath)
    filesafety.check_all(abspath, tighten=not asked)
    if asked:
        filesafety.refuse_readable(abspath)
    filesafety.check_writable(abspath)
    uri = _uri(abspath, mode="rw")
    conn = _connect(uri, uri=True)
    try:
        _configure(conn, writer=True)
        check_schema(conn)
        # Refuse a newer file, or another program's, before the WAL switch, itself a write.
        version = migrations.check_not_newer(conn)
        if asked:
            migrations.refuse_foreign(conn, version)
        migrations.check_writer(conn)
        _enable_wal(conn)
        found, _ = migrations.upgrade(
            conn,
            check=check_schema,
            chain_partitions=chain_partitions,
            where=abspath,
            foreign=not asked,
        )
        partitions = migrations.chain_partitions(conn, where=abspath)
        # The -wal and -shm exist now; SQLite gave them the database's mode.
        filesafety.check_sidecars(abspath, tighten=not asked)
    except BaseException as e:
        conn.close()
        refusal = _refusal(abspath, e)
        if refusal is None:
            raise
        raise refusal from e
    store = SqliteStore(conn, path=abspath, read_only=False, uri=uri, partitions=partitions)
    store.found_version = found
    return store


def open_existing(path: str | os.PathLike[str], read_only: bool = False) -> SqliteStore:
    """Open an existing agentrt database: never creates, never migrates.

    Refuses a symlink (`SymlinkError`), a second hard link (`HardLinkError`), an
    insecure file or directory, a trigger or view, an unreadable schema, and
    any schema version but this code's own (`SchemaVersionError`, naming which
    side is newer). A read-only open works beside a live writer and in a
    directory this process cannot write.
    """
    check_sqlite_version()
    if os.fspath(path) == ":memory:":
        raise StoreError("open_existing needs a database file; ':memory:' is always new")
    abspath = _absolute(path)
    filesafety.check_all(abspath, tighten=not read_only)
    if read_only:
        conn, uri = _open_reader(abspath)
    else:
        filesafety.check_writable(abspath)
        uri = _uri(abspath, mode="rw")
        conn = _connect(uri, uri=True)
    try:
        _configure(conn, writer=not read_only)
        check_schema(conn)
        migrations.check_exact(conn)
        if not read_only:
            migrations.check_writer(conn)
            _enable_wal(conn)
        partitions = migrations.chain_partitions(conn, strict=not read_only, where=abspath)
        filesafety.check_sidecars(abspath, tighten=not read_only)
    except BaseException as e:
        conn.close()
        refusal = _refusal(abspath, e)
        if refusal is None:
            raise
        raise refusal from e
    return SqliteStore(conn, path=abspath, read_only=read_only, uri=uri, partitions=partitions)


# --- the store ----------------------------------------------------------------------------------


CLOSED = "the store is closed"
"""What every use of a store says once it was closed."""

_SAVEPOINT = "agentrt_work"
"""The savepoint each work of a group commit runs in (`SqliteStore.transactions`)."""


class SqliteStore(ProxyRows):
    """The runtime's one SQLite file. Use `open_store` or `open_existing` to get one."""

    found_version: int = migrations.SCHEMA_VERSION
    """The schema version the open found: 0 when `open_store` created the record, below
    `SCHEMA_VERSION` when it migrated it; `open_existing` opens this version only."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        path: str,
        read_only: bool,
        uri: str | None,
        partitions: int = 1,
    ) -> None:
        self.path = path
        self.partitions = partitions  # N, the chain's partitions: fixed for the record
        self.read_only = read_only
        self.in_memory = uri is None
        self._conn = conn
        self._uri = uri
        self._lock = threading.RLock()
        self._tx: SqliteTx | None = None
        self._closed = False
        self._closed_why = CLOSED
        self._parent: int | None = None  # set in a forked child: the store is its (`_leave`)
        # The schema version last found safe; None until the first write transaction.
        self._safe_schema: int | None = None
        # This connection's turns at writing, among agentrt's writers to the file (decision
        # 0106); an in-memory or read-only store has none to take.
        self._turns = (
            None
            if uri is None or read_only
            else WriterTurns(path, _connection.BUSY_TIMEOUT_MS / 1000)
        )
        # The database file and its -wal this connection writes, by device and inode: a
        # commit is acknowledged only while they are still the files at the path.
        self._files = None if uri is None or read_only else filesafety.FileIdentity(path)
        left_to_the_parent(self)  # a forked child leaves it to this process (decision 0127)

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"SqliteStore({self.path!r}, {mode})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(self._closed_why)

    def __reduce__(self) -> Any:
        """A store is not sent to another process (pickled for `multiprocessing`, a process
        pool): its connection is this process's. Said in one sentence, as at a fork."""
        raise TypeError(
            f"{type(self).__name__} cannot be sent to another process: open a store there "
            "(agentrt.open_store with the same path or URL)"
        )

    def __copy__(self) -> SqliteStore:
        """A store is a handle to one database: a copy of it is the same handle (a copy of a
        Driver or a config holding it shares it)."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SqliteStore:
        return self

    def _fork_lock(self) -> threading.RLock:
        """A fork waits for the store's lock (`_fork`): no transaction of another thread of
        this process is open on the connection while it forks (decision 0127)."""
        return self._lock

    def _leave(self, parent: int) -> None:
        """In a process forked from this store's (`_fork`, decision 0127): the store is the
        parent's. Every use is refused from here on (`_check_open`), and its connection is
        kept, never closed here: SQLite's locks on the file are the parent's."""
        self._lock = threading.RLock()  # another thread of the parent may have held it
        if not self._closed:
            self._closed = True
            self._parent = parent
            self._closed_why = refusal("store", parent)
            keep(*self._connections())
            if self._tx is not None:
                # A transaction open at the fork (the forking thread's own, or another's):
                # its statements are refused, and its block's end neither commits nor rolls
                # back on the parent's connection (`_rollback`, `_commit`).
                self._tx._close(self._closed_why)

    def _connections(self) -> tuple[object, ...]:
        """What of this store is its process's alone: kept, never closed, in a child."""
        return (self._conn,)

    def _rollback(self) -> None:
        """Roll back the store's open transaction, unless the store is the parent's (or
        stopped, `_stop`: its connection is closed, and nothing is open on it)."""
        if self._parent is None and not self._closed:
            migrations.rollback_quietly(self._conn)

    def _stop(self, why: str) -> None:
        """Close the store after a failure that leaves its file's state unknown to this
        connection (a sync the disk failed, the file deleted or replaced under it); every use
        says `why` from here on. Closing the connection checkpoints what it committed into
        the database file, where it can: nothing acknowledged stays only in a WAL nobody
        will read. Under the store's lock."""
        self._closed = True
        self._closed_why = why
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        if self._turns is not None:
            self._turns.close()

    def _moved_error(self, outcome: str, *, unknown: bool = False) -> StoreError:
        """Stop the store, its file deleted or replaced under it, and say so (`unknown`:
        after the COMMIT, whose outcome is then `commit_unknown`)."""
        why = (
            f"the database file {self.path} or its -wal was deleted or replaced while the "
            "store was open"
        )
        self._stop(f"the store stopped: {why}; reopen it")
        message = f"{why}: {outcome}; the store refuses further use (reopen it)"
        return commit_unknown(message) if unknown else StoreError(message)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SqliteTx]:
        """`BEGIN IMMEDIATE` ... `COMMIT`; any exception rolls the whole transaction back.

        Holds the store's lock throughout, so other threads' reads and writes wait.
        Transactions do not nest.
        """
        with self._lock:
            # `_turn`, written out (not a generator and its context manager made for each
            # transaction): taken before `BEGIN`, given back after the end.
            turns = self._turns if self._tx is None else None
            if turns is not None:
                self._check_open()  # a closed store says so, not that its lock file is gone
            try:
                if turns is not None:
                    turns.take(self._conn)  # its wait is taken from BEGIN's busy timeout
                self._may_begin()
                tx: SqliteTx | None = None
                # From `BEGIN` on, whatever is raised (a signal's `KeyboardInterrupt`
                # landing between two statements too) rolls back: never a transaction left
                # open on the connection, holding the file's write lock, with every later
                # one refused.
                try:
                    self._begin()
                    tx = SqliteTx(self._conn, self.partitions, path=self._file)
                    self._tx = tx
                    try:
                        yield tx
                        tx.write_events()
                        tx.check_open()  # SQLite may have rolled it back (a full disk)
                    except sqlite3.Error as e:
                        raise self._failed_before_commit(e, "the transaction failed") from e
                    self._commit()
                except BaseException:
                    self._rollback()
                    raise
                finally:
                    if tx is not None:
                        tx._close()
                    self._tx = None
            finally:
                if turns is not None:
                    turns.give()  # nothing when it was not taken

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """This connection's turn among agentrt's writers to the file, for one transaction
        (`_writer_turns`): taken before `BEGIN IMMEDIATE`, given back after its end."""
        turns = self._turns
        if turns is None or self._tx is not None:
            # None to take; or a transaction of this store is open on this thread (the
            # lock is held), whose turn this one shares: `_begin` refuses the nesting, and
            # giving the turn back on the way out would leave the open one without it.
            yield
            return
        self._check_open()  # a closed store says so, not that its lock file is gone
        try:
            turns.take(self._conn)  # what its wait used is taken from BEGIN's busy timeout
            yield
        finally:
            turns.give()  # nothing when it was not taken

    def _may_begin(self) -> None:
        """Refuse a write transaction on a closed or read-only store, or inside another
        (under the lock): nothing begun, so nothing to roll back."""
        self._check_open()
        if self.read_only:
            raise StoreError("the store was opened read-only")
        if self._tx is not None:
            raise StoreError("a transaction is already open on this store; they do not nest")

    @property
    def _file(self) -> str | None:
        """The database file's path, for a store with one (not in memory)."""
        return self.path if self._uri is not None else None

    def _failed_before_commit(self, error: sqlite3.Error, doing: str) -> StoreError:
        """A failure of SQLite's inside a transaction, before its COMMIT: nothing was written;
        on a filesystem turned read-only, said as one (decision 0214)."""
        read_only = read_only_before_commit(self._file, error)
        if read_only is not None:
            return StoreError(f"{doing}: {read_only}")
        return store_error(error, f"{doing}, nothing was written", retryable=False)

    def _begin(self) -> None:
        """`BEGIN IMMEDIATE` (after `_may_begin`, under the lock), the schema checked inside
        it: a trigger added since the last check must not fire on this transaction's writes
        (one pragma when nothing changed)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if is_busy(e):
                raise StoreBusyError(
                    "cannot begin a write transaction: another connection held the "
                    "database's write lock past the busy timeout "
                    f"({_connection.BUSY_TIMEOUT_MS} ms); nothing was written"
                ) from e
            read_only = read_only_before_commit(self._file, e)
            raise StoreError(f"cannot begin a write transaction: {read_only or e}") from e
        try:
            self._safe_schema = check_schema(self._conn, self._safe_schema)
        except sqlite3.Error as e:
            migrations.rollback_quietly(self._conn)
            raise self._failed_before_commit(e, "the transaction failed") from e
        except BaseException:
            migrations.rollback_quietly(self._conn)
            raise

    def _commit(self) -> None:
        """`COMMIT`, acknowledged only when durable in the file at the store's path.

        A file deleted or replaced under the store is found before (nothing written) and
        after (the outcome unknown) the commit. A commit the disk failed to write or sync
        (`SQLITE_IOERR`) may or may not be in the file, and a kernel that failed a sync
        may have dropped what it held: the store stops rather than go on as if its writes
        were durable. A full disk writes nothing (the WAL frame that commits was not
        written), and the store goes on. A filesystem turned read-only under the store
        (decision 0208) stops it the same way, its refusal naming the file and the cause."""
        # A block or a group forked in ends here in the child: the parent's, not committed.
        self._check_open()
        if self._files is not None and self._files.moved():
            migrations.rollback_quietly(self._conn)
            raise self._moved_error("the transaction was rolled back, nothing was written")
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error as e:
            migrations.rollback_quietly(self._conn)
            # Asked only where a read-only filesystem is what SQLite may have met.
            read_only = (
                filesafety.turned_read_only(self.path)
                if self._uri and (is_io_error(e) or is_read_only_error(e))
                else None
            )
            if read_only is not None:
                self._stop(
                    f"the store stopped after a commit failed: {read_only}: reopen it once "
                    f"the filesystem is read-write again ({filesafety.READ_MEANWHILE})"
                )
                raise commit_unknown(
                    f"commit failed: {read_only}, so the transaction could not be made "
                    "durable; whether it is in the file is unknown until the database is "
                    "reopened. The store refuses further use: reopen it once the filesystem "
                    f"is read-write again ({filesafety.READ_MEANWHILE})"
                ) from e
            if is_io_error(e):
                said = sqlite_failure(e) or str(e)
                self._stop(
                    f"the store stopped after a commit could not be made durable ({said}): "
                    "reopen it, and check the record (agentrt verify)"
                )
                raise commit_unknown(
                    f"commit failed: the disk reported an I/O error ({said}), so the "
                    "transaction could not be made durable; whether it is in the file is "
                    "unknown until the database is reopened. The store refuses further use: "
                    "reopen it"
                ) from e
            raise store_error(e, "commit failed, nothing was written", retryable=False) from e
        if self._files is not None and self._files.moved():
            raise self._moved_error(
                f"whether the transaction is in the record at {self.path} is unknown",
                unknown=True,
            )

    def transactions(self, works: Sequence[Callable[[SqliteTx], Any]]) -> list[Grouped]:
        """Group commit: one `BEGIN IMMEDIATE` ... `COMMIT` (one fsync), each work in a
        savepoint of its own, rolled back alone when it raises (`Store.transactions`); a
        group of one work is that work's own transaction, with no savepoint (`_alone`).

        Each work gets a transaction object of its own: its events are its own, and it
        chains them from the heads the works before it left (read once for the group,
        decision 0120).
        """
        if len(works) == 1:
            return [self._alone(works[0])]
        with self._lock, self._turn():
            self._may_begin()
            outcomes: list[Grouped] = []
            # The chain's heads as the works so far left them: the next work chains from
            # them rather than reading each head again (decision 0120); the `chain_head`
            # rows they moved are written once, before the COMMIT (decision 0129).
            heads: dict[int, tuple[str, int]] = {}
            moved: dict[int, tuple[int, str]] = {}
            try:  # from BEGIN to COMMIT, anything raised rolls the group back (`transaction`)
                try:
                    self._begin()
                    for work in works:
                        outcomes.append(self._in_savepoint(work, heads, moved))
                    move_heads(self._conn, moved)
                except sqlite3.Error as e:
                    raise self._failed_before_commit(e, "the group's transaction failed") from e
                self._commit()
            except BaseException:
                self._rollback()
                raise
            return outcomes

    def _alone(self, work: Callable[[SqliteTx], Any]) -> Grouped:
        """A group of one: the work's transaction is the group's, so no savepoint is needed
        to roll it back alone (two statements fewer); its outcome as `_in_savepoint` gives
        it, and a failure to begin or commit raised as the group's."""
        try:
            with self.transaction() as tx:
                try:
                    value = work(tx)
                    tx.write_events()
                except Exception as e:
                    raise _WorkFailed(e) from e  # rolled back by `transaction`
        except _WorkFailed as failed:
            return Grouped(error=_work_error(failed.error))
        return Grouped(value)

    def _in_savepoint(
        self,
        work: Callable[[SqliteTx], Any],
        heads: dict[int, tuple[str, int]],
        moved: dict[int, tuple[int, str]],
    ) -> Grouped:
        """`work` in a savepoint of its own, chained from `heads`, which it updates to what
        it leaves when it commits, and `moved` to the heads its events moved (a work rolled
        back leaves both as they were)."""
        conn = self._conn
        conn.execute(f"SAVEPOINT {_SAVEPOINT}")
        tx = SqliteTx(conn, self.partitions, path=self._file)
        tx.chain_from(heads)
        tx.keep_heads()
        try:
            self._tx = tx  # in the block whose end clears it, whatever ends it
            value = work(tx)
            tx.write_events()  # inside the savepoint: the next work chains to them
            tx.check_open()  # SQLite may have rolled the group back (a full disk)
        except Exception as e:
            self._check_open()  # forked in a work: the savepoint is the parent's
            if not conn.in_transaction:
                # SQLite rolled the whole group back (a full disk, an I/O error): no
                # savepoint is left to undo this work alone, and nothing of any is written.
                raise StoreError(
                    f"the group's transaction failed, nothing was written: a work's "
                    f"statement failed and SQLite rolled the whole transaction back: {e}"
                ) from e
            # Only this work's writes go; a failure to undo them fails the whole group.
            conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
            conn.execute(f"RELEASE {_SAVEPOINT}")
            return Grouped(error=_work_error(e))
        finally:
            tx._close()
            self._tx = None
        self._check_open()
        conn.execute(f"RELEASE {_SAVEPOINT}")
        heads.update(tx.known_heads())
        moved.update(tx.kept_heads())
        return Grouped(value)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[SqliteTx]:
        """`BEGIN` (deferred) ... `COMMIT` with `query_only` on: one read snapshot, no writes.

        On the store's own connection under its lock, like its other reads; a write
        attempted in it fails as a `StoreError` and changes nothing.
        """
        with self._lock:
            self._check_open()
            if self._tx is not None:
                raise StoreError("a transaction is already open on this store; they do not nest")
            try:
                self._conn.execute("BEGIN")
                if not self.read_only:
                    self._conn.execute("PRAGMA query_only = ON")
            except sqlite3.Error as e:
                migrations.rollback_quietly(self._conn)
                raise store_error(e, "cannot begin a read") from e
            view = SqliteTx(self._conn, self.partitions)
            view._reads_only = True
            self._tx = view
            try:
                yield view
            except sqlite3.Error as e:
                raise store_error(e, "a read of the store failed") from e
            finally:
                view._close()
                self._tx = None
                self._rollback()
                if not self.read_only and self._parent is None:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("PRAGMA query_only = OFF")

    def renewer(self, wall: Callable[[], datetime]) -> Renewer:
        """The heartbeat's way to renew: on a connection of its own (the store's in memory)."""
        self._check_open()
        if self._uri is None:
            return StoreRenewer(self.transaction, wall, self.lease_state)
        # It renews only while the files at the path are the ones this store opened: its
        # own connection, opened later, may otherwise open a file put there since.
        known = self._files.known if self._files is not None else None
        return ConnectionRenewer(
            self._open_connection,
            wall,
            WriterTurns(self.path, _connection.BUSY_TIMEOUT_MS / 1000),
            filesafety.FileIdentity(self.path, known),
        )

    def lease_now(self, wall: Callable[[], datetime]) -> datetime:
        """The time leases are judged by outside a transaction: the caller's wall clock."""
        self._check_open()
        return wall()

    def _open_connection(self) -> sqlite3.Connection:
        """A new connection to the same file with the same pragmas (the heartbeat's own).

        An in-memory store has no file another connection could reach: StoreError.
        """
        self._check_open()
        if self._uri is None:
            raise StoreError("an in-memory store has a single connection; use its transactions")
        conn = _connect(self._uri, uri=True)
        try:
            _configure(conn, writer=not self.read_only)
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                if self._turns is not None:
                    self._turns.close()

    # --- reads ----------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """A read of your own (a consumer's tables, a view's join) on the store's connection.

        SQLite only: an escape hatch of the SQLite store, not part of the store
        interface (`agentrt.Store`), so code that may run on another backend must
        not use it. The runtime itself never does.

        Runs under the store's lock like its own reads. Writes belong in
        `transaction()`; a read-only store refuses them in SQLite itself. A TEXT
        value that is not valid UTF-8 comes back as its raw `bytes`, never as
        an exception (`agentrt._stored_text`). A JSON column selected by its own
        name (`payload_json`, `decision_json`, ...) comes back as written, its
        large parts put back from `stored_values` (decision 0084); SQL's own
        functions on it (`json_extract`, `length`) see the packed text.
        """
        return self._read(sql, params, keys=False)

    def _own_view(self) -> None:
        """A read on the store's own connection inside its open transaction (this thread's)
        sees the events the transaction appended: they are written first (decision 0100)."""
        if self._tx is not None:
            self._tx.write_events()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of one of the store's own reads on its connection (`_read`)."""
        return self._read(sql, params, keys=True)

    def _read(self, sql: str, params: Sequence[Any], *, keys: bool) -> list[sqlite3.Row]:
        """Rows of a read on the store's connection. `keys`: the store's own reads, whose
        text parameters are all keys compared for equality, so that one UTF-8 cannot hold
        (a lone surrogate) matches no row: nothing stored is such text."""
        with self._lock:
            self._check_open()
            self._own_view()
            try:
                return list(self._conn.execute(sql, params).fetchall())
            except sqlite3.Error as e:
                raise store_error(e, "a read of the store failed") from e
            except UnicodeEncodeError as e:
                if keys:
                    return []
                raise StoreError(f"a read of the store failed: {e}") from e

    def get_run(self, run_id: str, *, cap: int | None = None) -> Run:
        rows = self._query(
            f"SELECT {select_list(_RUN_COLUMNS, cap)} FROM runs WHERE id = ?", (run_id,)
        )
        if not rows:
            raise NotFoundError(f"no run {run_id!r}")
        return run_from_row(rows[0])

    def list_runs(
        self,
        limit: int = 100,
        offset: int = 0,
        status: str | None = None,
        *,
        cap: int | None = TEXT_CAP,
    ) -> list[Run]:
        """Newest first (insertion order, reversed)."""
        _check_page(limit, offset)
        where, params = ("WHERE status = ?", [str(status)]) if status is not None else ("", [])
        rows = self._query(
            f"SELECT {select_list(_RUN_COLUMNS, cap)} FROM runs {where} "
            "ORDER BY rowid DESC LIMIT ? OFFSET ?",
            [*params, _bound(limit), _bound(offset)],
        )
        return [run_from_row(r) for r in rows]

    def count_runs(self, status: str | None = None) -> int:
        if status is None:
            rows = self._query("SELECT count(*) FROM runs")
        else:
            rows = self._query("SELECT count(*) FROM runs WHERE status = ?", (str(status),))
        return int(rows[0][0])

    def list_steps(
        self, run_id: str, limit: int | None = None, offset: int = 0, *, cap: int | None = TEXT_CAP
    ) -> list[Step]:
        """The run's steps in index order. Pass `cap=None` for complete values."""
        _check_page(limit, offset)
        rows = self._query(
            f"SELECT {select_list(_STEP_COLUMNS, cap)} FROM steps WHERE run_id = ? "
            "ORDER BY idx LIMIT ? OFFSET ?",
            (run_id, -1 if limit is None else _bound(limit), _bound(offset)),
        )
        return [step_from_row(r) for r in rows]

    def list_approvals(self, run_id: str, *, cap: int | None = TEXT_CAP) -> list[Approval]:
        """The run's approvals in insertion order. Pass `cap=None` for complete values."""
        rows = self._query(
            f"SELECT {select_list(_APPROVAL_COLUMNS, cap)} FROM approvals WHERE run_id = ? "
            "ORDER BY rowid",
            (run_id,),
        )
        return [approval_from_row(r) for r in rows]

    def get_approval(self, run_id: str, approval_id: str, *, cap: int | None = None) -> Approval:
        rows = self._query(
            f"SELECT {select_list(_APPROVAL_COLUMNS, cap)} FROM approvals "
            "WHERE run_id = ? AND id = ?",
            (run_id, approval_id),
        )
        if not rows:
            raise NotFoundError(f"no approval {approval_id!r} in run {run_id!r}")
        return approval_from_row(rows[0])

    def pending_approvals(
        self,
        run_id: str | None = None,
        *,
        limit: int | None = None,
        cap: int | None = TEXT_CAP,
    ) -> list[Approval]:
        """Approvals waiting for a person.

        With a `run_id`: that run's, in the order they were requested (a run
        waits on one at a time, so this is rarely more than one). Without: those
        of every waiting run, **newest first**, at most `limit` (default
        `PENDING_APPROVALS_DEFAULT`, at most `PENDING_APPROVALS_MAX`), read in
        one indexed query.
        """
        if limit is not None and (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= PENDING_APPROVALS_MAX
        ):
            raise ValueError(f"limit must be from 1 to {PENDING_APPROVALS_MAX}, got {limit!r}")
        cols = select_list(_APPROVAL_COLUMNS, cap)
        pending = str(ApprovalStatus.PENDING)
        if run_id is not None:
            rows = self._query(
                f"SELECT {cols} FROM approvals WHERE run_id = ? AND status = ? "
                "ORDER BY rowid LIMIT ?",
                (run_id, pending, -1 if limit is None else limit),
            )
        else:
            # Through the waiting runs (indexed by status), then each run's approvals
            # (indexed by run): a pending approval exists only while its run waits
            # (a cancel expires it, a rejection ends the run). Scanning the approvals
            # table itself would read every decided request ever made.
            rows = self._query(
                f"SELECT {cols} FROM approvals WHERE rowid IN ("
                "SELECT a.rowid FROM runs AS r CROSS JOIN approvals AS a ON a.run_id = r.id "
                "WHERE r.status = ? AND a.status = ? ORDER BY a.rowid DESC LIMIT ?"
                ") ORDER BY rowid DESC",
                (
                    str(RunStatus.WAITING_FOR_APPROVAL),
                    pending,
                    PENDING_APPROVALS_DEFAULT if limit is None else limit,
                ),
            )
        return [approval_from_row(r) for r in rows]

    def list_events(
        self,
        run_id: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
        *,
        cap: int | None = TEXT_CAP,
        partition: int | None = None,
    ) -> list[Event]:
        """Events with `seq > after_seq` in seq order, of one run or of all (or, `partition`
        given, of the runs of that chain partition). Seq order is commit order within a
        partition, so for a run; across partitions (N > 1) it is not (decision 0093)."""
        _check_page(limit, 0)
        cols = select_list(_EVENT_COLUMNS, cap)
        if run_id is None and partition is not None and self.partitions > 1:
            rows = self._query(
                f"SELECT {cols} FROM events WHERE seq > ? AND seq % ? = ? ORDER BY seq LIMIT ?",
                (_bound(after_seq), self.partitions, partition, _bound(limit)),
            )
        elif run_id is None:
            rows = self._query(
                f"SELECT {cols} FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                (_bound(after_seq), _bound(limit)),
            )
        else:
            rows = self._query(
                f"SELECT {cols} FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, _bound(after_seq), _bound(limit)),
            )
        return [event_from_row(r) for r in rows]

    def list_model_calls(self, run_id: str) -> list[ModelCallRecord]:
        rows = self._query(
            f"SELECT {_MODEL_CALL_COLUMNS} FROM model_calls WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        )
        return [model_call_from_row(r) for r in rows]

    def lease(self, run_id: str) -> Lease:
        """The run's lease: owner `''` and `expires_at` None when nobody holds it.

        An expiry that will not parse reads as held forever: a lease nobody can
        date must not look expired to a resumer.
        """
        rows = self._query(
            "SELECT lease_owner, lease_expires_at, lease_epoch, lease_holder FROM runs "
            "WHERE id = ?",
            (run_id,),
        )
        if not rows:
            raise NotFoundError(f"no run {run_id!r}")
        return _lease_of_row(tuple(rows[0]))

    def leases_of(self, run_ids: Sequence[str]) -> dict[str, Lease]:
        """The leases of the runs named, in one read, as `lease` reads each; a run that does
        not exist is left out."""
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        rows = self._query(
            "SELECT id, lease_owner, lease_expires_at, lease_epoch, lease_holder FROM runs "
            f"WHERE id IN ({marks})",
            list(run_ids),
        )
        return {str(row[0]): _lease_of_row(tuple(row)[1:]) for row in rows}

    def tool_spec(self, hash: str) -> ToolSpec | None:
        """The stored spec with this hash, None if none; StoreError if it will not decode."""
        rows = self._query("SELECT spec_json FROM tool_specs WHERE hash = ?", (hash,))
        if not rows:
            return None
        text = rows[0][0]
        if not isinstance(text, str):
            raise StoreError(f"tool spec {hash} does not decode: {unreadable_text(text)}")
        try:
            return ToolSpec.from_json(from_text(text))
        except Exception as e:  # stored data may be anything; say which spec is bad
            raise StoreError(f"tool spec {hash} does not decode: {type(e).__name__}: {e}") from e

    def chain_head(self) -> tuple[int, str]:
        """The chain's head as one value to keep out of reach: with one partition `(seq,
        hash)` of the last event, `(0, '')` when there is none; with N > 1, `(N, digest)`,
        the digest over `chain_heads()` (`agentrt._chain.heads_digest`, decision 0093)."""
        if self.partitions == 1:
            return self.chain_heads()[0]
        return self.partitions, heads_digest(self.chain_heads())

    def chain_heads(self) -> tuple[tuple[int, str], ...]:
        """Each partition's head, `(seq, hash)` of its last event (`(0, '')`: none), in
        partition order: what `verify_events(head=...)` takes. With one partition, the
        last event stored; with N, the head rows the appends move."""
        if self.partitions == 1:
            rows = self._query("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")
            if not rows:
                return ((0, ""),)
            return ((int(rows[0][0]), shown_text(rows[0][1])),)
        heads = [(0, "")] * self.partitions
        for part, seq, digest in self._query("SELECT part, seq, hash FROM chain_head"):
            if 0 <= int(part) < self.partitions:
                heads[int(part)] = (int(seq), shown_text(digest))
        return tuple(heads)

    def check_file(self, *, full: bool = False, max_problems: int = 100) -> FileCheck:
        """SQLite's own check of the file: `PRAGMA quick_check`, or `integrity_check` if `full`.

        Separate from the event chain: the chain proves the events were not
        edited, this that the pages SQLite reads are not damaged. Reads only
        (on a connection of its own for a file store, in one read snapshot) and
        never raises on a damaged file: what SQLite says is a problem.
        """
        check = "integrity_check" if full else "quick_check"
        # SQLite takes a count up to 2**31 - 1 and reads anything larger as a table's name.
        limit = min(max(1, int(max_problems)), _MAX_INT32)

        def pragma(conn: sqlite3.Connection, name: str) -> tuple[str, ...]:
            """The problems `PRAGMA name` reports (`()` for none); raises when it cannot finish."""
            rows = conn.execute(f"PRAGMA {name}({limit})").fetchall()
            # SQLite may put several problems in one row, under "*** in database main ***".
            lines = [line for r in rows for line in shown_text(r[0]).splitlines()]
            if lines == ["ok"]:
                return ()
            return tuple(x for x in lines if x and not x.startswith("*** in database ")) or tuple(
                lines
            )

        def run(conn: sqlite3.Connection) -> FileCheck:
            try:
                problems = pragma(conn, check)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                stopped = f"SQLite could not finish {check}: {sqlite_failure(e) or e}"
                # integrity_check stops on damage quick_check can still describe page by page.
                try:
                    problems = (stopped, *(pragma(conn, "quick_check") if full else ()))
                except (sqlite3.DatabaseError, UnicodeDecodeError):
                    problems = (stopped,)
            return FileCheck(ok=not problems, check=check, problems=problems)

        return self._read_snapshot(run)

    def _read_snapshot(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """`work` on a read connection of its own, in one snapshot (the store's own in memory)."""
        if self._uri is None:
            with self._lock:
                self._check_open()
                self._own_view()
                return work(self._conn)
        self._check_open()
        conn = _connect(self._uri, uri=True)
        try:
            _configure(conn, writer=False)
            conn.execute("BEGIN")
            try:
                return work(conn)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise store_error(e, "a read of the store failed") from e
        finally:
            conn.close()

    def verify_events(
        self,
        from_seq: int | None = None,
        to_seq: int | None = None,
        *,
        head: tuple[int, str] | Sequence[tuple[int, str]] | None = None,
    ) -> VerifyReport:
        """Check the event chain in bounded pages, writing nothing; see `agentrt._chain`.

        `head` is `chain_heads()` (with one partition, also `chain_head()`), kept where
        the database's writers cannot reach: it also catches a truncated or recomputed
        chain. ValueError when it does not fit the record's partitions.
        A file store verifies on a connection of its own, in one read snapshot,
        so writers are not held up.
        """
        return self._read_snapshot(
            lambda conn: verify_chain(
                SqliteChainReader(conn, self.partitions), from_seq, to_seq, head=head
            )
        )


_MAX_INT64 = 2**63 - 1
_MAX_INT32 = 2**31 - 1


def _bound(n: Any) -> Any:
    """A count, offset or seq as SQLite can bind it: past a 64-bit integer, the largest
    (no row is past it, so the answer is the same)."""
    return _MAX_INT64 if isinstance(n, int) and n > _MAX_INT64 else n


def _check_page(limit: int | None, offset: int) -> None:
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    if offset < 0:
        raise ValueError("offset must not be negative")


class _WorkFailed(Exception):
    """A lone work's own exception, carried out of its transaction (`SqliteStore._alone`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def _work_error(e: Exception) -> Exception:
    """What a grouped work's caller gets for the exception its work raised: a database's
    error as the store's, anything else as it was raised."""
    if not isinstance(e, sqlite3.Error):
        return e
    error = store_error(e, "the transaction failed, nothing was written", retryable=False)
    error.__cause__ = e
    return error


def _lease_of_row(row: tuple[Any, ...]) -> Lease:
    """A lease from its stored (owner, expiry, epoch, holder): an expiry that will not parse
    is held forever, an owner that will not read is still someone (never "nobody")."""
    owner, expires, epoch, holder_text = row
    held_forever = datetime.max.replace(tzinfo=UTC)
    if isinstance(expires, str):
        try:
            expires_at = parse_time(expires)
        except ValueError:
            expires_at = held_forever
    else:  # unreadable bytes (or worse): nobody can date it, so it is held
        expires_at = held_forever
    if not isinstance(owner, str):
        # An owner nobody can read is still someone: never "nobody holds it".
        owner = shown_text(owner) or "<unreadable owner>"
    holder: dict[str, Any] = {}
    if isinstance(holder_text, str) and holder_text:
        with contextlib.suppress(Exception):
            decoded = from_text(holder_text)
            if isinstance(decoded, dict):
                holder = decoded
    return Lease(
        owner=owner,
        expires_at=expires_at,
        epoch=epoch if isinstance(epoch, int) else 0,
        holder=holder,
    )
