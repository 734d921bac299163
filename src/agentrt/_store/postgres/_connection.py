"""The PostgreSQL backend's connections: the URL, the session settings, rows, SQL, failures.

A target is a `postgresql://` (or `postgres://`) URL. Its query may carry
`schema=NAME`, the schema the store owns (default `agentrt`); every other part
goes to libpq as it is. The password is never shown: any message that could
carry the URL or the password has it replaced (`redact`).

Every connection is in autocommit mode, and the store issues `BEGIN ...`,
`COMMIT` and `ROLLBACK` itself, so that one transaction is exactly one block of
the store's. Its session: `search_path` set to the store's schema only, UTC,
and `lock_timeout` (`LOCK_TIMEOUT_MS`): a lock held past it is "busy".

The named reads and writes are written with `?` and `:name` placeholders (as
the SQLite backend's are): `translate` turns them into psycopg's, once per text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql
from psycopg.adapt import AdaptersMap
from psycopg.types.string import StrDumperUnknown

from ..._db_url import ambiguous_user, redact_db, shown_db
from ..._errors import (
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    deadlock_error,
    repeated_id,
)
from ..sqlite._values import MARK, Fetch, stored_columns, unpacked_row

LOCK_TIMEOUT_MS = 5_000
"""How long a statement waits for a row or the chain's head before it is busy."""

DEFAULT_SCHEMA = "agentrt"

_SCHEMES = ("postgresql://", "postgres://")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def is_postgres_url(target: object) -> bool:
    """Whether `target` names a PostgreSQL database (a URL), not a SQLite file."""
    return isinstance(target, str) and target.startswith(_SCHEMES)


@dataclass(frozen=True)
class Target:
    """Where a store lives: the libpq URL (without `schema=`), the schema, the password."""

    conninfo: str
    schema: str
    password: str

    def redact(self, text: str) -> str:
        """`text` with the password (if any) replaced by `***`: the user's, and a
        `password=` parameter's (`agentrt._db_url`)."""
        if self.password:
            text = text.replace(self.password, "***")
        return redact_db(text, self.conninfo)

    @property
    def shown(self) -> str:
        """The URL as it may be printed: without its password (either kind), with its
        `schema=` unless it is the default (stores in two schemas of one database are
        told apart)."""
        if self.schema == DEFAULT_SCHEMA:
            return shown_db(self.conninfo)
        parts = urlsplit(self.conninfo)
        query = "&".join(filter(None, [parts.query, urlencode([("schema", self.schema)])]))
        return shown_db(urlunsplit(parts._replace(query=query)))


def parse_target(url: str) -> Target:
    """Split `url` into libpq's URL and the store's schema; StoreError for a bad schema name,
    or for a password holding an unencoded `?` or `#` (decision 0141)."""
    if ambiguous_user(url):
        raise StoreError(
            "the user part of this PostgreSQL URL holds a `?` or `#` before its `@`, which "
            "drivers and URL parsers split differently: percent-encode them in the password "
            "(%3F, %23); nothing was opened"
        )
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = DEFAULT_SCHEMA
    rest: list[tuple[str, str]] = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            rest.append((key, value))
    if not _SCHEMA_NAME.fullmatch(schema):
        raise StoreError(
            f"schema {schema!r} is not a plain lower-case name (letters, digits, underscores)"
        )
    # Percent-encoded as libpq decodes it: a space is `%20`, never `+` (which libpq keeps
    # as a `+`: `options=-c%20work_mem%3D8MB` would reach the server as `-c+work_mem=8MB`).
    query_text = urlencode(rest, quote_via=quote)
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, query_text, ""))
    return Target(conninfo=conninfo, schema=schema, password=parts.password or "")


# --- text a PostgreSQL text cannot hold -----------------------------------------------------

ESCAPED = "\x02"
"""The first character of a text stored escaped: one holding a NUL (which a PostgreSQL text
cannot hold) or itself starting with this character. Its NULs are `ESCAPED + "0"`, its
`ESCAPED`s doubled, and it ends with `ESCAPED + "."`; every other text is stored as it is
(decision 0157)."""

_END = ESCAPED + "."
# Each `ESCAPED` of an escaped text's body and the character after it; a lone one (at the
# body's end, or before another character) is no escape of `stored_text`'s.
_ESCAPE_PAIR = re.compile("\x02([\x020]?)")


def stored_text(text: str) -> str:
    """`text` as a PostgreSQL text holds it: escaped when it holds a NUL or starts with
    `ESCAPED`, else itself."""
    if "\x00" in text or text.startswith(ESCAPED):
        body = text.replace(ESCAPED, ESCAPED + ESCAPED).replace("\x00", ESCAPED + "0")
        return ESCAPED + body + _END
    return text


def read_text(stored: str) -> str:
    """The text `stored_text` stored as `stored`. A text that is no escape of its (one
    stored as it is before decision 0157 that starts with `ESCAPED`) is read as it is."""
    if not (stored.startswith(ESCAPED) and stored.endswith(_END) and len(stored) >= 3):
        return stored
    lone = False

    def unescape(pair: re.Match[str]) -> str:
        nonlocal lone
        if not pair[1]:
            lone = True
            return ""
        return "\x00" if pair[1] == "0" else ESCAPED

    text = _ESCAPE_PAIR.sub(unescape, stored[1:-2])
    return stored if lone else text


class _TextDumper(StrDumperUnknown):
    """psycopg's text parameter, escaped when it holds a NUL (`stored_text`): every value a
    store binds, written or compared, is as the column holds it."""

    def dump(self, obj: str) -> bytes:
        if "\x00" in obj or obj.startswith(ESCAPED):
            obj = stored_text(obj)
        try:
            return obj.encode(self._encoding)
        except UnicodeEncodeError as e:  # a lone surrogate: nothing is sent
            raise UnencodableText(str(e)) from e


class UnencodableText(psycopg.DataError):
    """A text parameter UTF-8 cannot hold (a lone surrogate), refused before it is sent: as
    on SQLite, no row holds such text, so the store's own reads (whose text parameters are
    keys) match nothing, and any other statement fails as a `StoreError`."""


ADAPTERS = AdaptersMap(psycopg.adapters)
"""psycopg's adapters with `_TextDumper` for every `str`: each store connection's."""
ADAPTERS.register_dumper(str, _TextDumper)


# --- rows -----------------------------------------------------------------------------------


class Row(tuple[Any, ...]):
    """A result row read by position or by column name (as `sqlite3.Row` is)."""

    _names: dict[str, int]

    def keys(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)


def row_factory(cursor: Any) -> Any:
    """psycopg's row factory for `Row`, each packed JSON column's parts put back (decision 0084).

    Called for every result, a statement's without rows too: the column names are read
    from the result's field names (not `cursor.description`, whose `Column`s cost more
    than the statement's own client work) and what they make is kept by those names."""
    result = cursor.pgresult
    fields = 0 if result is None else result.nfields
    if not fields:
        return _EMPTY_MAKER
    key = tuple([result.fname(i) for i in range(fields)])
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= _SHAPES_KEPT:
            _SHAPES.clear()
        names = {(name or b"").decode(): i for i, name in enumerate(key)}
        shape = _SHAPES[key] = (names, stored_columns(tuple(names)), _plain_maker(names))
    names, columns, plain = shape
    if not columns:
        return plain
    known: dict[str, object] = {}  # the parts this statement's rows fetched

    def make(values: Sequence[Any]) -> Row:
        values = _unescaped(values)
        for i, _ in columns:
            value = values[i]
            if type(value) is str and MARK in value:  # packed: put its parts back
                changed = unpacked_row(values, columns, _fetcher(cursor.connection, known))
                values = values if changed is None else changed
                break
        row = Row(values)
        row._names = names
        return row

    return make


def _plain_maker(names: dict[str, int]) -> Any:
    """The maker of a result none of whose columns can hold a packed value."""

    def make(values: Sequence[Any]) -> Row:
        row = Row(_unescaped(values))
        row._names = names
        return row

    return make


def _unescaped(values: Sequence[Any]) -> Sequence[Any]:
    """A row's values with each text stored escaped (`stored_text`) read back."""
    for value in values:
        if type(value) is str and value.startswith(ESCAPED):
            return [read_text(v) if type(v) is str else v for v in values]
    return values


_EMPTY_MAKER = _plain_maker({})
# A result's shape by its field names: (name -> index, its packable columns, a maker).
_SHAPES: dict[tuple[bytes | None, ...], tuple[dict[str, int], Any, Any]] = {}
_SHAPES_KEPT = 1024


def _fetcher(conn: psycopg.Connection[Any], known: dict[str, object]) -> Fetch:
    def fetch(hashes: list[str]) -> dict[str, object]:
        wanted = [h for h in hashes if h not in known]
        if wanted:
            rows = conn.execute(
                "SELECT hash, body FROM ONLY stored_values WHERE hash = ANY(%s)", (wanted,)
            ).fetchall()
            known.update((str(r[0]), r[1]) for r in rows)
        return {h: known[h] for h in hashes if h in known}

    return fetch


# --- SQL ----------------------------------------------------------------------------------------

# The store's tables, in the one order every write transaction locks them (the order their
# migrations made them in), and the proxy's, locked by a store that has migrated them
# (decision 0172).
TABLES = (
    "schema_migrations",
    "agentrt_meta",
    "runs",
    "steps",
    "events",
    "chain_head",
    "approvals",
    "model_calls",
    "tool_specs",
    "stored_values",
)
PROXY_TABLES = ("proxy_migrations", "proxy_requests")

# A store table read or written by a statement: `ONLY` that table, so that a table made
# elsewhere to inherit from it (`CREATE TABLE ... INHERITS`, which no lock the store's
# transactions hold keeps out) takes no part in it: its rows are not read, updated or
# locked, and its triggers never fire (decision 0172).
_TABLE_NAMED = re.compile(
    r"\b(FROM|JOIN|UPDATE)\s+(?!ONLY\b)(" + "|".join(TABLES + PROXY_TABLES) + r")\b"
)

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_NUL_TEST = re.compile(r"instr\(CAST\((.+?) AS BLOB\), x'00'\) > 0")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """A statement written with `?` / `:name` placeholders, as psycopg takes it.

    `%` is doubled; `LIMIT ?` accepts -1 for "no limit"; `INSERT OR IGNORE` is
    `ON CONFLICT DO NOTHING`; `CROSS JOIN ... ON` (SQLite's way of fixing a join's
    order) is a plain join; a store table after `FROM`, `JOIN` or `UPDATE` is `ONLY` it.
    """
    text = sql.replace("%", "%%")
    text = text.replace("LIMIT ?", "LIMIT NULLIF(?, -1)")
    if "INSERT OR IGNORE INTO" in text:
        text = text.replace("INSERT OR IGNORE INTO", "INSERT INTO") + " ON CONFLICT DO NOTHING"
    text = text.replace(" CROSS JOIN ", " JOIN ")
    # Whether a text holds a NUL (`capped_sql`): on PostgreSQL, whether it is stored
    # escaped (`stored_text`), so that it is read whole and cut once read back.
    text = _NUL_TEST.sub(r"starts_with(\1, chr(2))", text)
    # Whether a column holds a stored value's reference (decision 0084).
    text = text.replace("instr(", "strpos(").replace("char(1)", "chr(1)")
    text = _TABLE_NAMED.sub(r"\1 ONLY \2", text)
    text = text.replace("?", "%s")
    return _NAMED.sub(r"%(\1)s", text)


# --- connections ----------------------------------------------------------------------------


def connect(target: Target) -> psycopg.Connection[Any]:
    """A new autocommit connection to the store's schema; StoreError without the password."""
    try:
        conn: psycopg.Connection[Any] = psycopg.connect(
            target.conninfo,
            autocommit=True,
            row_factory=row_factory,
            connect_timeout=10,
            context=ADAPTERS,
        )
    except psycopg.Error as e:
        raise StoreError(f"cannot open {target.shown}: {target.redact(one_line(str(e)))}") from None
    try:
        # The session's own settings, over the role's and the database's defaults (`ALTER
        # ROLE ... SET`), sent as one message: one round trip.
        settings = [
            # Text in UTF-8 whatever the role, the database or PGCLIENTENCODING say: in
            # another encoding a character it lacks fails in the driver, not as a StoreError.
            pg_sql.SQL("SET client_encoding TO 'UTF8'"),
            pg_sql.SQL("SET search_path TO {}").format(pg_sql.Identifier(target.schema)),
            pg_sql.SQL("SET TIME ZONE 'UTC'"),
            # The server's clock read as psycopg parses it (ISO only).
            pg_sql.SQL("SET DateStyle TO 'ISO'"),
            pg_sql.SQL("SET lock_timeout = {}").format(pg_sql.Literal(LOCK_TIMEOUT_MS)),
            # Every commit durable before it is acknowledged: `step.tool_started` must be
            # on disk before the tool runs.
            pg_sql.SQL("SET synchronous_commit = on"),
        ]
        conn.execute(pg_sql.SQL("; ").join(settings))
        shown = conn.execute(
            "SELECT current_setting('fsync'), current_setting('server_encoding')"
        ).fetchone()
    except psycopg.Error as e:
        conn.close()
        raise StoreError(f"cannot open {target.shown}: {target.redact(one_line(str(e)))}") from None
    encoding = "" if shown is None else str(shown[1])
    if encoding.upper() != "UTF8":
        conn.close()
        raise StoreError(
            f"refusing {target.shown}: its encoding is {encoding}, not UTF8, so it cannot hold "
            "every text a model or a person may write (a run would stop at the first it "
            "cannot); create the database with ENCODING 'UTF8'"
        )
    if shown is None or str(shown[0]).lower() != "on":
        conn.close()
        raise StoreError(
            f"refusing {target.shown}: the server runs with fsync off, so no commit is "
            "durable; agentrt needs fsync on"
        )
    return conn


def rollback_quietly(conn: psycopg.Connection[Any]) -> None:
    """Roll back if a transaction is open, never letting a failed ROLLBACK hide the cause.

    psycopg's own rollback, which also forgets the statements it prepared on the session: a
    pipeline that failed part-way (the schema's guard refusing, decision 0167) can leave its
    cache naming a statement whose PREPARE the server skipped, and every later use of that
    name would fail ("prepared statement ... does not exist")."""
    if conn.closed:
        return
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
    except psycopg.Error:
        pass


def end_read(conn: psycopg.Connection[Any]) -> None:
    """End a `READ ONLY` snapshot on the store's connection, keeping what psycopg prepared.

    A snapshot whose reads all succeeded has no statement psycopg prepared in vain, so it
    ends with `COMMIT` (which, in a read-only transaction, keeps nothing a `ROLLBACK` would
    not): a rollback would make psycopg forget every statement the session prepared, the
    writes' too, and deallocate them on the server, one round trip more, after every run
    loaded. A snapshot a failure cut short is rolled back (`rollback_quietly`)."""
    if conn.closed:
        return
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        try:
            conn.execute("COMMIT")
            return
        except psycopg.Error:
            pass
    rollback_quietly(conn)


_BUSY = (pg_errors.LockNotAvailable, pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
_DAMAGED = (pg_errors.DataCorrupted, pg_errors.IndexCorrupted)


def is_busy(error: BaseException) -> bool:
    """True when the server refused because another transaction held what this one needed."""
    return isinstance(error, _BUSY)


# The server's echo of the statement and the caret under the place it failed: what a
# message says after them (`DETAIL:`, `HINT:`) is kept.
_ECHOED = re.compile(r"LINE [0-9]+: .*|\^")


def one_line(said: str) -> str:
    """The server's message as one line: its lines joined, the statement it echoes (which
    names the store's SQL, not the operator's problem) and the caret under it left out."""
    kept = [line.strip() for line in said.splitlines()]
    return " ".join(line for line in kept if line and not _ECHOED.fullmatch(line))


# The server's detail of a unique violation: `Key (id)=(...) already exists.`
_TAKEN_ID = re.compile(r"Key \(id\)=\((.*)\) already exists\.?", re.DOTALL)


def _repeated(error: psycopg.Error) -> StoreError | None:
    """`repeated_id`'s error for a new row whose id is already its table's (an id factory
    that repeats ids): the table's primary key named by the server, the id from its detail."""
    diag = error.diag
    table = diag.table_name or ""
    if diag.constraint_name != f"{table}_pkey":
        return None
    taken = _TAKEN_ID.fullmatch(diag.message_detail or "")
    if taken is None:
        return None
    return repeated_id(table, read_text(taken.group(1)))


def store_error(
    error: psycopg.Error, doing: str, *, retryable: bool = True, target: Target | None = None
) -> StoreError:
    """The `StoreError` a failure of the server's becomes at the store's boundary.

    A lock held past `lock_timeout`, a serialization failure or a deadlock is
    `StoreBusyError` where a retry cannot run work twice (`retryable`), else a
    plain `StoreError`; data the server finds corrupted is `StoreDamagedError`. A
    deadlock says so (not "past the lock timeout"): the server ended the transaction,
    and the store's caller rolled it back (`PostgresStore.transaction`).
    """
    if isinstance(error, pg_errors.UniqueViolation):
        repeated = _repeated(error)
        if repeated is not None:
            return repeated
    said = one_line(str(error))
    if target is not None:
        said = target.redact(said)
    if isinstance(error, pg_errors.DeadlockDetected):
        # Not a wait past the timeout: the server found this transaction and another each
        # waiting for a lock the other held, and ended this one (decision 0175).
        found = (
            f"{doing}: PostgreSQL found this transaction and another deadlocked (SQLSTATE "
            "40P01) and ended this one"
        )
        if retryable:
            return deadlock_error(
                f"{found} before any of its work was written, so it was rolled back whole "
                f"and retrying it is safe (the server said: {said})"
            )
        return StoreError(
            f"{found}, so it was rolled back whole and nothing of it was written; its work "
            f"had begun, so agentrt does not retry it on its own (the server said: {said})"
        )
    if retryable and is_busy(error):
        return StoreBusyError(
            f"{doing}: another transaction held what this one needed past the lock timeout "
            f"({LOCK_TIMEOUT_MS} ms): {said}"
        )
    if isinstance(error, _DAMAGED):
        return StoreDamagedError(f"{doing}: PostgreSQL finds the data damaged: {said}")
    return StoreError(f"{doing}: {said}")
