"""The SQLite backend's connections: connecting, pragmas, the schema's safety, SQLite's failures.

Every connection decodes TEXT itself (`text_factory`), strictly, and a value
that is not valid UTF-8 reads as its raw `bytes` instead of raising. Writers
run with `synchronous=FULL`; readers with `query_only`. The schema's safety (no
trigger, no view, every entry readable) is checked at open and again inside any
write transaction that follows a change of `PRAGMA schema_version`.
"""

from __future__ import annotations

import os
import sqlite3
import time
import weakref
from pathlib import Path
from typing import Any

from ..._errors import (
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    UnreadableSchemaError,
    UnsafeSchemaError,
)
from ..._stored_text import decode_text, unreadable_text
from . import _filesafety as filesafety
from ._values import MARK, Fetch, columns_of, unpacked_row

MIN_SQLITE_VERSION = (3, 37, 0)  # STRICT tables
BUSY_TIMEOUT_MS = 5_000
# Switching to WAL needs an exclusive lock that the busy handler does not wait for.
_WAL_RETRY_SECONDS = 2.0


def check_sqlite_version(version: tuple[int, int, int] = sqlite3.sqlite_version_info) -> None:
    if version < MIN_SQLITE_VERSION:
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        have = ".".join(map(str, version))
        raise StoreError(
            f"agentrt needs SQLite {need} or newer (STRICT tables); this Python links SQLite {have}"
        )


# --- connections --------------------------------------------------------------------------------


def _uri(path: str, **params: str) -> str:
    # A file: URI percent-encodes `?`, `#` and `%`, so such paths open the file they name.
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{Path(path).as_uri()}?{query}"


def _connect(target: str, *, uri: bool) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(
            target,
            uri=uri,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the database: {e}") from e
    conn.row_factory = stored_row
    conn.text_factory = decode_text
    return conn


def stored_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> sqlite3.Row:
    """`sqlite3.Row`, with each packed JSON column's parts put back (`_values`)."""
    for i, _ in columns_of(cursor.description):
        value = values[i]
        if type(value) is str and MARK in value:  # packed: put its parts back
            changed = unpacked_row(values, columns_of(cursor.description), _fetcher(cursor))
            return sqlite3.Row(cursor, tuple(values if changed is None else changed))
    return sqlite3.Row(cursor, values)


_VALUES_PER_QUERY = 500


# The parts one statement's rows have fetched, kept while its cursor lives: the payloads
# of `step.decided` and `step.tool_started`, read one after the other, share theirs.
_FETCHED: weakref.WeakKeyDictionary[sqlite3.Cursor, dict[str, object]] = weakref.WeakKeyDictionary()


def _fetcher(cursor: sqlite3.Cursor) -> Fetch:
    conn = cursor.connection
    known = _FETCHED.setdefault(cursor, {})

    def fetch(hashes: list[str]) -> dict[str, object]:
        found = {h: known[h] for h in hashes if h in known}
        wanted = [h for h in hashes if h not in known]
        for at in range(0, len(wanted), _VALUES_PER_QUERY):
            batch = wanted[at : at + _VALUES_PER_QUERY]
            marks = ", ".join("?" for _ in batch)
            try:
                rows = conn.execute(
                    f"SELECT hash, body FROM stored_values WHERE hash IN ({marks})", batch
                ).fetchall()
            except sqlite3.OperationalError as e:
                if "no such table" in str(e):  # a file from before migration 4: nothing stored
                    return found
                raise
            for r in rows:
                found[str(r[0])] = known[str(r[0])] = r[1]
        return found

    return fetch


def _configure(conn: sqlite3.Connection, *, writer: bool) -> None:
    """The pragmas every connection gets; `synchronous=FULL` only matters to writers."""
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA foreign_keys = ON")
    defensive = getattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE", None)
    setconfig = getattr(conn, "setconfig", None)
    if defensive is not None and setconfig is not None:
        setconfig(defensive, True)
    if writer:
        conn.execute("PRAGMA synchronous = FULL")
    else:
        conn.execute("PRAGMA query_only = ON")


def is_busy(error: sqlite3.Error) -> bool:
    """True when SQLite refused because another connection holds a lock (BUSY or LOCKED)."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def store_error(error: sqlite3.Error, doing: str, *, retryable: bool = True) -> StoreError:
    """The `StoreError` a failure of SQLite's becomes at the store's boundary.

    Busy or locked (another connection held a lock past the busy timeout) is
    `StoreBusyError` ("nothing was written, retry") where retrying is safe:
    before a transaction's work ran, or a read. Inside a transaction's work or at
    its COMMIT (`retryable=False`) it is a plain `StoreError`: the work has run
    once, and a retry would run it again. A file SQLite finds damaged is
    `StoreDamagedError`. Anything else is a plain `StoreError` naming what was
    being done.
    """
    said = sqlite_failure(error) or str(error)
    if retryable and is_busy(error):
        return StoreBusyError(
            f"{doing}: another connection held the database past the busy timeout "
            f"({BUSY_TIMEOUT_MS} ms): {said}"
        )
    if isinstance(error, sqlite3.DatabaseError) and any(
        sign in said for sign in ("malformed", "not a database", "disk image", "corrupt")
    ):
        return StoreDamagedError(f"{doing}: SQLite finds the file damaged: {said}")
    return StoreError(f"{doing}: {said}")


def check_schema(conn: sqlite3.Connection, known_version: int | None = None) -> int:
    """Refuse an unsafe schema; returns the `PRAGMA schema_version` that was found safe.

    When `known_version` (a value this function returned before) is still the
    file's schema version, nothing changed and nothing more is read: one pragma.
    Otherwise every entry of `sqlite_master` is checked: no trigger or view
    (`UnsafeSchemaError`), and every entry readable text (`UnreadableSchemaError`;
    SQLite itself refuses to load an entry whose name, type or SQL disagree).
    Call it inside the transaction whose writes it protects, so that no schema
    change can come between.
    """
    try:
        version = _schema_version(conn)
        if known_version is not None and version == known_version:
            return version
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        said = sqlite_failure(e)
        if said is None or "malformed database schema" not in said:
            raise
        raise UnreadableSchemaError(
            f"SQLite cannot load the database schema ({said}): the database schema is "
            "damaged, and agentrt refuses a schema it cannot read"
        ) from e
    unsafe: list[str] = []
    for i, row in enumerate(rows, start=1):
        kind, name, table, sql = tuple(row)
        for column, value in (("type", kind), ("name", name), ("tbl_name", table)):
            if not isinstance(value, str):
                raise UnreadableSchemaError(
                    f"schema entry {i} has a {column} that is {unreadable_text(value)}: the "
                    "database schema is damaged, and agentrt refuses a schema it cannot read"
                )
        if sql is not None and not isinstance(sql, str):
            raise UnreadableSchemaError(
                f"schema entry {name!r} has SQL that is {unreadable_text(sql)}: the database "
                "schema is damaged, and agentrt refuses a schema it cannot read"
            )
        if kind in ("trigger", "view"):
            unsafe.append(f"{kind} {name!r}")
    if unsafe:
        raise UnsafeSchemaError(
            f"the database holds {', '.join(unsafe)}; agentrt refuses a schema with triggers "
            "or views"
        )
    return version


def _schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA schema_version").fetchone()
    return int(row[0])


def is_io_error(error: BaseException) -> bool:
    """True when SQLite reports that the disk failed a read, write or sync (`SQLITE_IOERR`)."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_IOERR


def is_read_only_error(error: BaseException) -> bool:
    """True when SQLite refuses a write to a database it holds read-only (`SQLITE_READONLY`):
    a connection that opened it on a filesystem that was read-only then."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_READONLY


def read_only_before_commit(path: str | None, error: BaseException) -> str | None:
    """What to say of a write failing before its transaction's COMMIT (a statement, `BEGIN`)
    on a filesystem turned read-only under the store at `path` (decision 0214), else None.

    Asked only after an I/O error or `SQLITE_READONLY`, and only for a store with a file
    (`path` None for one in memory): `filesafety.turned_read_only`'s probe, as after a failed
    `COMMIT` (decision 0208), never through a symlink. Before the COMMIT nothing of the
    transaction was written: the WAL frames a spilling cache wrote are no commit's, and
    SQLite rolls them back. So it says so, unlike the COMMIT's "unknown"; the store is not
    stopped (its connection is as sound as before, and it still reads)."""
    if path is None or not (is_io_error(error) or is_read_only_error(error)):
        return None
    read_only = filesafety.turned_read_only(path)
    if read_only is None:
        return None
    return (
        f"{read_only}, so nothing of the transaction was written. No write can be made until "
        f"the filesystem is read-write again: reopen the store then ({filesafety.READ_MEANWHILE})"
    )


def sqlite_failure(error: BaseException) -> str | None:
    """What SQLite said, when `error` is SQLite's (its message may not even be UTF-8), else None.

    SQLite puts names from the file into some messages (`malformed database
    schema (name)`), and Python fails to decode such a message with a
    `UnicodeDecodeError` carrying its bytes.
    """
    if isinstance(error, sqlite3.Error):
        return str(error)
    if isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes):
        return error.object.decode("utf-8", "backslashreplace")
    return None


def _refusal(path: str, error: BaseException) -> StoreError | None:
    """The StoreError to raise for an exception from SQLite while opening `path`, else None."""
    said = sqlite_failure(error)
    if said is None:
        return None
    if "malformed database schema" in said:
        return UnreadableSchemaError(
            f"SQLite cannot load the schema of {path} ({said}): the database schema is "
            "damaged, and agentrt refuses a schema it cannot read"
        )
    if isinstance(error, sqlite3.Error) and is_busy(error):
        return StoreBusyError(f"cannot open {path}: {said}")
    return StoreError(f"cannot open {path}: {said}")


def _enable_wal(conn: sqlite3.Connection) -> None:
    deadline = time.monotonic() + _WAL_RETRY_SECONDS
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise StoreError(f"cannot switch the database to WAL: {e}") from e
            if time.monotonic() >= deadline:
                raise StoreError(f"cannot switch the database to WAL: {e}") from e
            time.sleep(0.05)
    mode = str(row[0]).lower() if row is not None else ""
    if mode != "wal":
        raise StoreError(f"journal_mode is {mode!r}, not 'wal'; agentrt needs WAL to run safely")


def _open_reader(path: str) -> tuple[sqlite3.Connection, str]:
    """A read-only connection and the URI it used.

    A WAL database needs its `-shm`. Beside a live writer it exists and `mode=ro`
    works. In a directory this process cannot write, with no `-wal` left (so no
    writer is live and every commit is in the main file), SQLite cannot create
    the `-shm`, and the file is read as `immutable`. A `-wal` there that SQLite cannot
    read (no `-shm`, and none can be made) may hold commits the file does not: refused
    (`unreadable_wal`), never read past.
    """
    uri = _uri(path, mode="ro")
    conn = _connect(uri, uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn, uri
    except (sqlite3.Error, UnicodeDecodeError) as e:
        conn.close()
        refusal = _refusal(path, e)
        if refusal is None:
            raise
        if isinstance(refusal, UnreadableSchemaError):
            raise refusal from e
        if os.path.exists(path + "-wal") and not filesafety.directory_writable(path):
            raise filesafety.unreadable_wal(path, sqlite_failure(e) or "") from e
        if os.path.exists(path + "-wal") or filesafety.directory_writable(path):
            raise StoreError(f"cannot read the database: {sqlite_failure(e)}") from e
    uri = _uri(path, mode="ro", immutable="1")
    conn = _connect(uri, uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.Error, UnicodeDecodeError) as e:
        conn.close()
        refusal = _refusal(path, e)
        if refusal is None:
            raise
        if isinstance(refusal, UnreadableSchemaError):
            raise refusal from e
        raise StoreError(f"cannot read the database: {sqlite_failure(e)}") from e
    return conn, uri


def _absolute(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not isinstance(text, str):
        raise StoreError("the database path must be text")
    if text == "":
        raise StoreError("the database path is empty")
    if "\0" in text:
        raise StoreError(
            f"the database path {text!r} holds a NUL character, which no file name can"
        )
    return os.path.abspath(text)
