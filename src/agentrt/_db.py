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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from . import _filesafety as filesafety
from . import _migrations as migrations
from ._canonical import from_text, to_text
from ._chain import event_hash, verify_chain
from ._clock import as_stored, format_time, parse_time
from ._errors import (
    NotFoundError,
    StoreBusyError,
    StoreError,
    UnreadableSchemaError,
    UnsafeSchemaError,
)
from ._records import (
    JSON,
    Approval,
    ApprovalStatus,
    Decision,
    Event,
    FileCheck,
    Lease,
    Limits,
    ModelCallRecord,
    Observation,
    PolicyDecision,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
    ToolSpec,
    VerifyReport,
)
from ._stored_text import decode_text, shown_text, unreadable_text

MIN_SQLITE_VERSION = (3, 37, 0)  # STRICT tables
TEXT_CAP = 65_536
PENDING_APPROVALS_DEFAULT = 100
"""Pending approvals of all runs returned when no limit is given."""
PENDING_APPROVALS_MAX = 1000
"""The most pending approvals one read returns."""
MAX_INT64 = 2**63 - 1
BUSY_TIMEOUT_MS = 5_000
# Switching to WAL needs an exclusive lock that the busy handler does not wait for.
_WAL_RETRY_SECONDS = 2.0

_T = TypeVar("_T")


def _columns(names: str, *, integers: str = "") -> tuple[tuple[str, bool], ...]:
    """`(column, is_text)` pairs; every column not named in `integers` is text."""
    ints = set(integers.split())
    return tuple((name, name not in ints) for name in names.split())


_COUNTERS = "model_calls input_tokens output_tokens cached_input_tokens estimated_cost_micros"
_RUN_COLUMNS = _columns(
    "id goal status reason reason_detail limits_json step_count created_at started_at "
    f"finished_at result_json {_COUNTERS} active_ms origin",
    integers=f"step_count {_COUNTERS} active_ms",
)
_STEP_COLUMNS = _columns(
    "id run_id idx status decision_json policy_json observation_json started_at finished_at "
    "spec_hash policy_id",
    integers="idx",
)
_APPROVAL_COLUMNS = _columns(
    "id run_id step_id kind capability_json presentation_json request_json hash status "
    "created_at expires_at decided_at decided_by note"
)
_EVENT_COLUMNS = _columns("seq run_id step_id at type payload_json hash", integers="seq")
_MODEL_CALL_COLUMNS = (
    "id, run_id, step_id, attempt, status, model, input_tokens, output_tokens, "
    "cached_input_tokens, cost_micros, latency_ms, error, dispatched_at, completed_at"
)
_LENGTH_PREFIX = "_n_"


def select_list(columns: Sequence[tuple[str, bool]], cap: int | None) -> str:
    """The SELECT list for `columns`, each text column capped at `cap` characters in SQL.

    A capped column `c` reads as `substr(c, 1, cap)` plus its full length as `_n_c`,
    which is how the row decoders know a value was cut.
    """
    if cap is not None and cap < 1:
        raise ValueError("cap must be a positive number of characters or None")
    parts: list[str] = []
    for name, is_text in columns:
        if is_text and cap is not None:
            parts.append(f"substr({name}, 1, {int(cap)}) AS {name}")
            parts.append(f"length({name}) AS {_LENGTH_PREFIX}{name}")
        else:
            parts.append(name)
    return ", ".join(parts)


def saturating_add_sql(column: str, param: str) -> str:
    """SQL adding the named parameter to `column`, saturating at 2^63-1.

    SQLite turns an integer overflow into a float silently, so the sum is taken
    only when it fits. Bind a value clamped with `clamp_charge` (never negative).
    """
    if not column.isidentifier():
        raise ValueError(f"not a column name: {column!r}")
    if not (param.startswith(":") and param[1:].isidentifier()):
        raise ValueError(f"not a named parameter (':name'): {param!r}")
    return (
        f"CASE WHEN {param} <= {MAX_INT64} - {column} THEN {column} + {param} ELSE {MAX_INT64} END"
    )


def clamp_charge(value: int) -> int:
    """A usage charge ready to bind for `saturating_add_sql`: negatives are zero, at most 2^63-1."""
    return min(max(int(value), 0), MAX_INT64)


def check_sqlite_version(version: tuple[int, int, int] = sqlite3.sqlite_version_info) -> None:
    if version < MIN_SQLITE_VERSION:
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        have = ".".join(map(str, version))
        raise StoreError(
            f"agentrt needs SQLite {need} or newer (STRICT tables); this Python links SQLite {have}"
        )


# --- row decoding -------------------------------------------------------------------------------


def truncated_marker(length: int, head: str) -> dict[str, Any]:
    """What a JSON value over the read cap reads as."""
    return {"truncated": True, "length": length, "head": head}


class CappedText(str):
    """A text column a read cut at its cap: the characters read, and the full `length`.

    It is the `str` of the characters read, so it works wherever text does; whoever
    shows it checks for this type (or `capped_length`) and says that the rest was
    not read, rather than showing the head as if it were the whole value.
    """

    length: int

    def __new__(cls, head: str, length: int) -> CappedText:
        text = super().__new__(cls, head)
        text.length = length
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (CappedText, (str(self), self.length))


def capped_length(text: str) -> int | None:
    """The full length of `text` when a read cut it at its cap (a `CappedText`), else None."""
    return text.length if isinstance(text, CappedText) else None


class _Fields:
    """Reads typed fields out of one row, collecting what will not decode instead of raising."""

    def __init__(self, row: sqlite3.Row) -> None:
        self._row = row
        self._keys = set(row.keys())
        self.errors: list[str] = []

    def fail(self, name: str, why: str) -> None:
        self.errors.append(f"{name}: {why}")

    @property
    def error(self) -> str:
        return "; ".join(self.errors)

    def full_length(self, name: str) -> int | None:
        """The value's full length in characters when the read cut it, else None."""
        key = _LENGTH_PREFIX + name
        if key not in self._keys:
            return None
        length = self._row[key]
        value = self._row[name]
        if isinstance(length, int) and isinstance(value, str) and length > len(value):
            return length
        return None

    def text(self, name: str) -> str:
        """A text column; one the read cut at its cap is a `CappedText` with the full length."""
        value = self._plain_text(name)
        length = self.full_length(name)
        return value if length is None else CappedText(value, length)

    def _plain_text(self, name: str) -> str:
        value = self._row[name]
        if isinstance(value, str):
            return value
        self.fail(name, unreadable_text(value))
        return ""

    def integer(self, name: str) -> int:
        value = self._row[name]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        self.fail(name, f"expected an integer, found {type(value).__name__}")
        return 0

    def time(self, name: str) -> datetime | None:
        text = self.text(name)
        try:
            return parse_time(text)
        except ValueError as e:
            self.fail(name, f"not a stored timestamp: {e}")
            return None

    def json(self, name: str) -> JSON:
        """A JSON column: `''` is None; a capped value is the truncated marker."""
        text = self._plain_text(name)
        if text == "":
            return None
        length = self.full_length(name)
        if length is not None:
            return truncated_marker(length, text)
        try:
            return from_text(text)
        except Exception as e:  # a bad row must not crash a read, whatever the parser raises
            self.fail(name, f"invalid JSON: {e}")
            return None

    def record(self, name: str, decode: Callable[[Mapping[str, Any]], _T]) -> _T | None:
        """A JSON object column decoded into a record; None (and an error) when it will not."""
        text = self._plain_text(name)
        if text == "":
            return None
        length = self.full_length(name)
        if length is not None:
            self.fail(name, f"holds {length} characters, over this read's cap of {len(text)}")
            return None
        try:
            data = from_text(text)
        except Exception as e:  # a bad row must not crash a read, whatever the parser raises
            self.fail(name, f"invalid JSON: {e}")
            return None
        if not isinstance(data, Mapping):
            self.fail(name, f"expected a JSON object, found {type(data).__name__}")
            return None
        try:
            return decode(data)
        except Exception as e:  # from_json of arbitrary stored data may raise anything
            self.fail(name, f"does not decode: {type(e).__name__}: {e}")
            return None

    def enum(self, name: str, kind: type[StrEnum], *, allow_empty: bool = False) -> str:
        """A status-like column as its enum member; an unknown value is kept and reported."""
        text = self.text(name)
        if allow_empty and text == "":
            return text
        try:
            return kind(text)
        except ValueError:
            self.fail(name, f"{text!r} is not a {kind.__name__}")
            return text


# A run's limits never change, and the driver re-reads its run row at every
# write: decoding the same text once is enough (Limits is frozen, safe to share).
_LIMITS_BY_TEXT: dict[str, Limits] = {}


def _limits(fields: _Fields) -> Limits:
    known = len(fields.errors)
    text = fields.text("limits_json")
    if text == "":
        if len(fields.errors) == known:  # really empty, not unreadable (already said)
            fields.fail("limits_json", "empty: the run was recorded without its limits")
        return Limits()
    cached = _LIMITS_BY_TEXT.get(text)
    if cached is not None:
        return cached
    limits = fields.record("limits_json", Limits.from_json)
    if limits is None:
        return Limits()
    if len(_LIMITS_BY_TEXT) >= 1024:
        _LIMITS_BY_TEXT.clear()
    _LIMITS_BY_TEXT[str(text)] = limits
    return limits


def run_from_row(row: sqlite3.Row) -> Run:
    """A `runs` row (any SELECT naming the run columns) as a `Run`."""
    f = _Fields(row)
    return Run(
        id=f.text("id"),
        goal=f.text("goal"),
        status=f.enum("status", RunStatus),
        reason=f.enum("reason", TerminalReason, allow_empty=True),
        reason_detail=f.text("reason_detail"),
        limits=_limits(f),
        step_count=f.integer("step_count"),
        created_at=f.time("created_at"),
        started_at=f.time("started_at"),
        finished_at=f.time("finished_at"),
        result=f.json("result_json"),
        model_calls=f.integer("model_calls"),
        input_tokens=f.integer("input_tokens"),
        output_tokens=f.integer("output_tokens"),
        cached_input_tokens=f.integer("cached_input_tokens"),
        estimated_cost_micros=f.integer("estimated_cost_micros"),
        active_time=timedelta(milliseconds=f.integer("active_ms")),
        origin=f.text("origin"),
        decode_error=f.error,
    )


def step_from_row(row: sqlite3.Row) -> Step:
    """A `steps` row as a `Step` (`index` is the `idx` column)."""
    f = _Fields(row)
    return Step(
        id=f.text("id"),
        run_id=f.text("run_id"),
        index=f.integer("idx"),
        status=f.enum("status", StepStatus),
        decision=f.record("decision_json", Decision.from_json),
        policy=f.record("policy_json", PolicyDecision.from_json),
        observation=f.record("observation_json", Observation.from_json),
        started_at=f.time("started_at"),
        finished_at=f.time("finished_at"),
        spec_hash=f.text("spec_hash"),
        policy_id=f.text("policy_id"),
        decode_error=f.error,
    )


def approval_from_row(row: sqlite3.Row) -> Approval:
    """An `approvals` row as an `Approval`; `request` is the decoded request JSON."""
    f = _Fields(row)
    return Approval(
        id=f.text("id"),
        run_id=f.text("run_id"),
        step_id=f.text("step_id"),
        kind=f.text("kind"),
        capability=f.json("capability_json"),
        presentation=f.json("presentation_json"),
        request=f.json("request_json"),
        hash=f.text("hash"),
        status=f.enum("status", ApprovalStatus),
        created_at=f.time("created_at"),
        expires_at=f.time("expires_at"),
        decided_at=f.time("decided_at"),
        decided_by=f.text("decided_by"),
        note=f.text("note"),
        decode_error=f.error,
    )


def event_from_row(row: sqlite3.Row) -> Event:
    """An `events` row as an `Event`."""
    f = _Fields(row)
    return Event(
        seq=f.integer("seq"),
        run_id=f.text("run_id"),
        step_id=f.text("step_id"),
        at=f.time("at"),
        type=f.text("type"),
        payload=f.json("payload_json"),
        hash=f.text("hash"),
        decode_error=f.error,
    )


def model_call_from_row(row: sqlite3.Row) -> ModelCallRecord:
    """A `model_calls` row; a bad field reads as empty or zero and is named in `decode_error`."""
    f = _Fields(row)
    return ModelCallRecord(
        id=f.text("id"),
        run_id=f.text("run_id"),
        step_id=f.text("step_id"),
        attempt=f.integer("attempt"),
        status=f.text("status"),
        model=f.text("model"),
        input_tokens=f.integer("input_tokens"),
        output_tokens=f.integer("output_tokens"),
        cached_input_tokens=f.integer("cached_input_tokens"),
        cost_micros=f.integer("cost_micros"),
        latency_ms=f.integer("latency_ms"),
        error=f.text("error"),
        dispatched_at=f.time("dispatched_at"),
        completed_at=f.time("completed_at"),
        decode_error=f.error,
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
    conn.row_factory = sqlite3.Row
    conn.text_factory = decode_text
    return conn


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
    the `-shm`, and the file is read as `immutable`.
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
    return os.path.abspath(text)


def open_store(path: str | os.PathLike[str]) -> Store:
    """Open the database at `path` for writing, creating it (0600) or migrating it as needed.

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
            migrations.migrate(conn, check=check_schema)
        except BaseException:
            conn.close()
            raise
        return Store(conn, path=":memory:", read_only=False, uri=None)
    abspath = _absolute(path)
    filesafety.check_directory(abspath)  # before anything is created in it
    filesafety.create_owner_only(abspath)
    filesafety.check_all(abspath, tighten=True)
    uri = _uri(abspath, mode="rw")
    conn = _connect(uri, uri=True)
    try:
        _configure(conn, writer=True)
        check_schema(conn)
        # Refuse a newer file before the WAL switch, which is itself a write.
        migrations.check_not_newer(conn)
        migrations.check_writer(conn)
        _enable_wal(conn)
        migrations.migrate(conn, check=check_schema)
        # The -wal and -shm exist now; SQLite gave them the database's mode.
        filesafety.check_sidecars(abspath, tighten=True)
    except BaseException as e:
        conn.close()
        refusal = _refusal(abspath, e)
        if refusal is None:
            raise
        raise refusal from e
    return Store(conn, path=abspath, read_only=False, uri=uri)


def open_existing(path: str | os.PathLike[str], read_only: bool = False) -> Store:
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
        uri = _uri(abspath, mode="rw")
        conn = _connect(uri, uri=True)
    try:
        _configure(conn, writer=not read_only)
        check_schema(conn)
        migrations.check_exact(conn)
        if not read_only:
            migrations.check_writer(conn)
            _enable_wal(conn)
        filesafety.check_sidecars(abspath, tighten=not read_only)
    except BaseException as e:
        conn.close()
        refusal = _refusal(abspath, e)
        if refusal is None:
            raise
        raise refusal from e
    return Store(conn, path=abspath, read_only=read_only, uri=uri)


# --- transactions -------------------------------------------------------------------------------


# The chain head (seq and hash of the last event) and the last seq AUTOINCREMENT
# issued, in one statement; each is NULL on an empty chain.
_CHAIN_HEAD = (
    "SELECT (SELECT seq FROM events ORDER BY seq DESC LIMIT 1), "
    "(SELECT hash FROM events ORDER BY seq DESC LIMIT 1), "
    "(SELECT seq FROM sqlite_sequence WHERE name = 'events')"
)


class Tx:
    """One write transaction, handed out by `Store.transaction()`; valid only inside its block."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # The appended events as stored, turned into `Event`s only when asked for
        # (`events`): most transactions have no observer to hand them to.
        self._appended: list[tuple[int, str, str, datetime, str, str, str]] = []
        self._open = True
        # (hash of the chain head, next seq to hand out), read once per transaction.
        self._head: tuple[str, int] | None = None

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the transaction is over; use a new store.transaction()")

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        self._check_open()
        return self.conn.execute(sql, params)

    @property
    def events(self) -> list[Event]:
        """The events this transaction appended, in order, as a read would give them."""
        return [
            Event(
                seq=seq,
                run_id=run_id,
                step_id=step_id,
                at=as_stored(at),  # what parse_time(at_text) gives, without parsing
                type=type,
                payload=from_text(payload_json),
                hash=digest,
            )
            for seq, run_id, step_id, at, type, payload_json, digest in self._appended
        ]

    def append_event(self, run_id: str, step_id: str, at: datetime, type: str, payload: Any) -> int:
        """Insert one event chained to the previous one across all runs; returns its seq.

        Events must be inserted only through this method: the chain head is read
        once per transaction and cached here. `events` lists what was appended.
        """
        self._check_open()
        payload_json = to_text(payload)
        at_text = format_time(at)
        prev_hash, seq = self._next()
        digest = event_hash(prev_hash, seq, run_id, step_id, at_text, type, payload_json)
        self.conn.execute(
            "INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, run_id, step_id, at_text, type, payload_json, digest),
        )
        self._head = (digest, seq + 1)
        self._appended.append((seq, run_id, step_id, at, type, payload_json, digest))
        return seq

    def _next(self) -> tuple[str, int]:
        """The hash to chain to and the seq AUTOINCREMENT would give the next row."""
        if self._head is None:
            head_seq, head_hash, issued = self.conn.execute(_CHAIN_HEAD).fetchone()
            head_seq = 0 if head_seq is None else int(head_seq)
            head_hash = "" if head_hash is None else str(head_hash)
            issued_seq = 0 if issued is None else int(issued)
            # AUTOINCREMENT never reuses a seq, even one whose row was deleted.
            self._head = (head_hash, max(head_seq, issued_seq) + 1)
        return self._head

    def _close(self) -> None:
        self._open = False


# --- the store ----------------------------------------------------------------------------------


class Store:
    """The runtime's one SQLite file. Use `open_store` or `open_existing` to get one."""

    def __init__(
        self, conn: sqlite3.Connection, *, path: str, read_only: bool, uri: str | None
    ) -> None:
        self.path = path
        self.read_only = read_only
        self.in_memory = uri is None
        self._conn = conn
        self._uri = uri
        self._lock = threading.RLock()
        self._tx: Tx | None = None
        self._closed = False
        # The schema version last found safe; None until the first write transaction.
        self._safe_schema: int | None = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"Store({self.path!r}, {mode})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """`BEGIN IMMEDIATE` ... `COMMIT`; any exception rolls the whole transaction back.

        Holds the store's lock throughout, so other threads' reads and writes wait.
        Transactions do not nest.
        """
        if self.read_only:
            raise StoreError("the store was opened read-only")
        with self._lock:
            self._check_open()
            if self._tx is not None:
                raise StoreError("a transaction is already open on this store; they do not nest")
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if is_busy(e):
                    raise StoreBusyError(
                        "cannot begin a write transaction: another connection held the "
                        f"database's write lock past the busy timeout ({BUSY_TIMEOUT_MS} ms); "
                        "nothing was written"
                    ) from e
                raise StoreError(f"cannot begin a write transaction: {e}") from e
            tx = Tx(self._conn)
            self._tx = tx
            try:
                try:
                    # A trigger added since the last check must not fire on this
                    # transaction's writes: one pragma when nothing changed.
                    self._safe_schema = check_schema(self._conn, self._safe_schema)
                    yield tx
                except BaseException:
                    migrations.rollback_quietly(self._conn)
                    raise
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as e:
                    migrations.rollback_quietly(self._conn)
                    raise StoreError(f"commit failed, nothing was written: {e}") from e
            finally:
                tx._close()
                self._tx = None

    def open_connection(self) -> sqlite3.Connection:
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

    # --- reads ----------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """A read of your own (a consumer's tables, a view's join) on the store's connection.

        Runs under the store's lock like its own reads. Writes belong in
        `transaction()`; a read-only store refuses them in SQLite itself. A TEXT
        value that is not valid UTF-8 comes back as its raw `bytes`, never as
        an exception (`agentrt._stored_text`).
        """
        return self._query(sql, params)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            self._check_open()
            return list(self._conn.execute(sql, params).fetchall())

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
            [*params, limit, offset],
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
            (run_id, -1 if limit is None else limit, offset),
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
    ) -> list[Event]:
        """Events with `seq > after_seq` in commit order, of one run or of all."""
        _check_page(limit, 0)
        cols = select_list(_EVENT_COLUMNS, cap)
        if run_id is None:
            rows = self._query(
                f"SELECT {cols} FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            )
        else:
            rows = self._query(
                f"SELECT {cols} FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after_seq, limit),
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
        owner, expires, epoch, holder_text = tuple(rows[0])
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
        """`(seq, hash)` of the last event, `(0, '')` when there is none; keep it out of reach."""
        rows = self._query("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")
        if not rows:
            return 0, ""
        return int(rows[0][0]), shown_text(rows[0][1])

    def check_file(self, *, full: bool = False, max_problems: int = 100) -> FileCheck:
        """SQLite's own check of the file: `PRAGMA quick_check`, or `integrity_check` if `full`.

        Separate from the event chain: the chain proves the events were not
        edited, this that the pages SQLite reads are not damaged. Reads only
        (on a connection of its own for a file store, in one read snapshot) and
        never raises on a damaged file: what SQLite says is a problem.
        """
        check = "integrity_check" if full else "quick_check"
        limit = max(1, int(max_problems))

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
        finally:
            conn.close()

    def verify_events(
        self,
        from_seq: int | None = None,
        to_seq: int | None = None,
        *,
        head: tuple[int, str] | None = None,
    ) -> VerifyReport:
        """Check the event chain in bounded pages, writing nothing; see `agentrt._chain`.

        `head` is a `(seq, hash)` from `chain_head()` kept where the database's
        writers cannot reach: it also catches a truncated or recomputed chain.
        A file store verifies on a connection of its own, in one read snapshot,
        so writers are not held up.
        """
        return self._read_snapshot(lambda conn: verify_chain(conn, from_seq, to_seq, head=head))


def _check_page(limit: int | None, offset: int) -> None:
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    if offset < 0:
        raise ValueError("offset must not be negative")
