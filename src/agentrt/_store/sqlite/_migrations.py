"""The database format: ordered migration scripts, schema version and writer-version lock.

Migrations are applied forward only, all pending ones in one IMMEDIATE
transaction, each recorded in `schema_migrations(version, applied_at)`. A
released migration is never edited (tests pin each text by SHA-256): a change
is a new migration appended to `MIGRATIONS`.

`agentrt_meta` holds `min_writer_version`, the lowest runtime version allowed to
write the file. A release that changes a contract older writers would break
(as leases did) raises it in its migration, and older writers then refuse to open
the file for writing instead of silently ignoring the new contract.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._clock import format_time, wall_clock
from ..._errors import SchemaVersionError, StoreError

RUNTIME_VERSION = "0.2.0"


@dataclass(frozen=True)
class Migration:
    version: int
    sql: str


_V1 = """\
CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY NOT NULL,
    applied_at TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE agentrt_meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL DEFAULT ''
) STRICT;

INSERT INTO agentrt_meta (key, value) VALUES ('min_writer_version', '0.1.0');

CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    goal TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    reason_detail TEXT NOT NULL DEFAULT '',
    limits_json TEXT NOT NULL DEFAULT '',
    step_count INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL DEFAULT '',
    finished_at TEXT NOT NULL DEFAULT '',
    result_json TEXT NOT NULL DEFAULT '',
    model_calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_micros INTEGER NOT NULL DEFAULT 0,
    active_ms INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_expires_at TEXT NOT NULL DEFAULT '',
    lease_epoch INTEGER NOT NULL DEFAULT 0,
    lease_holder TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX runs_status ON runs (status);

CREATE TABLE steps (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (id),
    idx INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT '',
    decision_json TEXT NOT NULL DEFAULT '',
    policy_json TEXT NOT NULL DEFAULT '',
    observation_json TEXT NOT NULL DEFAULT '',
    observation_hash TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL DEFAULT '',
    finished_at TEXT NOT NULL DEFAULT '',
    spec_hash TEXT NOT NULL DEFAULT '',
    policy_id TEXT NOT NULL DEFAULT '',
    UNIQUE (run_id, idx)
) STRICT;

CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (id),
    step_id TEXT NOT NULL DEFAULT '',
    at TEXT NOT NULL DEFAULT '',
    type TEXT NOT NULL DEFAULT '',
    payload_json TEXT NOT NULL DEFAULT '',
    hash TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX events_run_seq ON events (run_id, seq);

CREATE TABLE approvals (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (id),
    step_id TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT '',
    capability_json TEXT NOT NULL DEFAULT '',
    presentation_json TEXT NOT NULL DEFAULT '',
    request_json TEXT NOT NULL DEFAULT '',
    hash TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT '',
    expires_at TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL DEFAULT '',
    decided_by TEXT NOT NULL DEFAULT '',
    note TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX approvals_run_created ON approvals (run_id, created_at);

CREATE TABLE model_calls (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (id),
    step_id TEXT NOT NULL DEFAULT '',
    attempt INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros INTEGER NOT NULL DEFAULT 0,
    latency_ms INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    dispatched_at TEXT NOT NULL DEFAULT '',
    completed_at TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX model_calls_run ON model_calls (run_id);

CREATE TABLE tool_specs (
    hash TEXT PRIMARY KEY NOT NULL,
    spec_json TEXT NOT NULL DEFAULT ''
) STRICT;
"""

# Which kind of program began each run (docs/decisions/0049): 'driver', 'gate',
# or an integration's label ('adapter:langgraph', 'mcp-proxy', ...). A Driver
# recovers only runs of the first two. Rows written before it were a Driver's.
_V2 = """\
ALTER TABLE runs ADD COLUMN origin TEXT NOT NULL DEFAULT 'driver';
"""

# How a step is found by its decision's reason (docs/decisions/0060): an
# integration records a framework's tool call id in the reason and looks the
# call up by it before each call. `reason_key` is the reason's first 256
# characters, written with the decision (`record_decision`); the decision_json
# stays the record, and a lookup checks the decoded decision's whole reason. An
# index on a JSON expression cannot be used here: with `trusted_schema = OFF`
# SQLite refuses the JSON functions in the schema. Rows written before this
# migration get their key from their decision (nothing for a decision that is
# not valid JSON or names no text reason); '' is left out of the index.
_V3 = """\
ALTER TABLE steps ADD COLUMN reason_key TEXT NOT NULL DEFAULT '';

UPDATE steps SET reason_key = coalesce(CASE WHEN json_valid(decision_json) THEN
    CASE json_type(decision_json, '$.reason')
        WHEN 'text' THEN substr(json_extract(decision_json, '$.reason'), 1, 256) END END, '');

CREATE INDEX steps_run_reason ON steps (run_id, reason_key, idx) WHERE reason_key != '';
"""

# Each large value stored once (docs/decisions/0084): a JSON part of at least
# `_values.INLINE_LIMIT` characters is one row here, keyed by the SHA-256 of its
# text (`length` is that text's length in characters; `body` is the text, its own
# large parts referred to), and the rows that hold it refer to it. Rows written
# before this migration hold no reference and read as they did: nothing is rewritten.
_V4 = """\
CREATE TABLE stored_values (
    hash TEXT PRIMARY KEY NOT NULL,
    length INTEGER NOT NULL DEFAULT 0,
    body TEXT NOT NULL DEFAULT ''
) STRICT;
"""

# The chain in partitions (docs/decisions/0086, 0093): `chain_head` holds each
# partition's head, its last seq handed out and that event's hash (the highest seq ever
# issued, as `sqlite_sequence` kept it, deleted or not); `agentrt_meta.chain_partitions`
# is N, fixed when the record is created. A record made before is partition 0 of 1, its
# head what the appends read until now (the last event's hash, the highest seq issued):
# no event is rewritten. Writers older than 0.2.0 would chain past the head row, so
# they are locked out.
_V5 = """\
CREATE TABLE chain_head (
    part INTEGER PRIMARY KEY NOT NULL CHECK (part >= 0),
    seq INTEGER NOT NULL DEFAULT 0,
    hash TEXT NOT NULL DEFAULT ''
) STRICT;

INSERT INTO chain_head (part, seq, hash) SELECT 0,
    max(coalesce((SELECT max(seq) FROM events), 0),
        coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)),
    coalesce((SELECT hash FROM events ORDER BY seq DESC LIMIT 1), '');

INSERT INTO agentrt_meta (key, value) VALUES ('chain_partitions', '1');

UPDATE agentrt_meta SET value = '0.2.0' WHERE key = 'min_writer_version';
"""

# Released migrations: append only, never edit (tests/test_migrations.py pins each text).
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, _V1),
    Migration(2, _V2),
    Migration(3, _V3),
    Migration(4, _V4),
    Migration(5, _V5),
)

SCHEMA_VERSION = MIGRATIONS[-1].version

PARTITIONS_VERSION = 5
"""The migration that writes `agentrt_meta.chain_partitions` (both backends': `_V5`)."""

# The MCP proxy's own tables (`agentrt-proxy`, docs/mcp.md): applied by the proxy
# when it opens the database, never by `open_store`, so a file no proxy touched
# has none of them. Recorded in `proxy_migrations` as the store's are in
# `schema_migrations`; append only, never edit (tests pin each text by SHA-256).
# `proxy_requests` maps a request key (sha256 of tool, NUL, canonical arguments)
# to each run made for it; the latest row of a key is the one a re-call meets.
_PROXY_V1 = """\
CREATE TABLE proxy_migrations (
    version INTEGER PRIMARY KEY NOT NULL,
    applied_at TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE proxy_requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    request_key TEXT NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    tool TEXT NOT NULL DEFAULT '',
    side_effect TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX proxy_requests_key ON proxy_requests (request_key, seq);
"""

# The proxy's look-ups served by an index (decision 0115): `unsettled_requests` by tool,
# `claim_request`'s count of calls on their way to a person by the time of their claim,
# and its count of pending approvals by a partial index of the pending ones (an index
# the proxy adds to the store's `approvals`, which no store migration rebuilds).
_PROXY_V2 = """\
CREATE INDEX proxy_requests_tool ON proxy_requests (tool, seq);

CREATE INDEX proxy_requests_created ON proxy_requests (created_at);

CREATE INDEX proxy_approvals_pending ON approvals (run_id) WHERE status = 'pending';
"""

PROXY_MIGRATIONS: tuple[Migration, ...] = (Migration(1, _PROXY_V1), Migration(2, _PROXY_V2))

_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*$")


def parse_version(text: str) -> tuple[int, ...]:
    """`"0.1.0"` -> `(0, 1, 0)`; ValueError for anything but dot-separated integers."""
    if not _VERSION_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a dotted version number")
    parts = [int(p) for p in text.split(".")]
    # Trailing zeros do not change a version: "0.1" and "0.1.0" compare equal.
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def statements(script: str) -> list[str]:
    """Split a migration script into its complete SQL statements, in order."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip():
        raise StoreError(f"migration script ends with an incomplete statement: {pending!r}")
    return out


def schema_version(conn: sqlite3.Connection) -> int:
    """The highest migration applied to the database; 0 for a database agentrt never wrote.

    A migration record changed by hand is refused (`SchemaVersionError`, `recorded_version`):
    agentrt's tables without `schema_migrations`, or a `schema_migrations` that does not hold
    every version from 1 to its highest exactly once."""
    # `agentrt_meta` first: migration 1 commits it with `schema_migrations`, and each read
    # sees what is committed when it runs, so another opener's migration committed between
    # the two reads is found whole; read the other way round, the record it just made
    # looked like one whose `schema_migrations` was dropped.
    meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentrt_meta'"
    ).fetchone()
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists is None:
        return recorded_version(None if meta is None else (0, None, None), list)
    row = conn.execute(
        "SELECT count(*), min(version), max(version) FROM schema_migrations"
    ).fetchone()
    return recorded_version(
        (row[0], row[1], row[2]),
        lambda: [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")],
    )


_CHANGED_BY_HAND = "was changed by hand, so agentrt cannot tell the record's schema version"


def recorded_version(
    found: tuple[int, object, object] | None, listed: Callable[[], list[Any]]
) -> int:
    """The schema version a migration record says (both backends'): `found` is the count,
    lowest and highest version of `schema_migrations`, or None when the database holds
    neither it nor `agentrt_meta` (agentrt never wrote it: 0); `listed` reads every version.

    Every migration is recorded in the transaction that applies it, so a record agentrt
    wrote holds each version from 1 to its highest once; anything else was changed by hand
    (a version deleted, added or the table emptied or dropped), and reading it as a version
    would migrate a record that holds a later migration's tables again, or call a record of
    agentrt's "no agentrt schema" (decision 0169)."""
    if found is None:
        return 0
    count, low, high = found
    for value in (low, high):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SchemaVersionError(
                f"schema_migrations holds a version that is not an integer: {value!r}"
            )
    if count == 0:
        raise SchemaVersionError(
            "the database holds agentrt's tables but no record of its migrations "
            f"(schema_migrations is missing or empty): the record {_CHANGED_BY_HAND}, "
            "and refuses it"
        )
    assert isinstance(high, int)
    if low != 1 or count != high:
        versions = listed()
        shown = ", ".join(map(str, versions[:12])) + (", ..." if len(versions) > 12 else "")
        raise SchemaVersionError(
            f"schema_migrations records the versions {shown}, where agentrt records each "
            f"from 1 to the highest once: the record {_CHANGED_BY_HAND}, and refuses it"
        )
    return high


def min_writer_version(conn: sqlite3.Connection) -> str:
    """The `min_writer_version` recorded in the file, `''` when none is."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentrt_meta'"
    ).fetchone()
    if exists is None:
        return ""
    row = conn.execute("SELECT value FROM agentrt_meta WHERE key = 'min_writer_version'").fetchone()
    return "" if row is None else str(row[0])


def check_not_newer(conn: sqlite3.Connection) -> int:
    """Refuse a database whose schema is newer than this code; returns its version."""
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database was written by a newer agentrt (schema version {version}; this "
            f"agentrt {RUNTIME_VERSION} knows up to {SCHEMA_VERSION}): upgrade agentrt to use it"
        )
    return version


MIGRATE_IT = "open it once with open_store to migrate it"
"""How `open_existing` tells a programmer to migrate an older record; the command line
names `agentrt migrate` instead (`cli._opening`)."""
CREATE_ONE = "to create a record, give open_store the path of a new file"
CREATE_IN_SCHEMA = "to create a record, give open_store a URL whose schema= names a new schema"
"""How `open_existing` tells a programmer to create a record in a file (`CREATE_ONE`) or a
PostgreSQL schema, as `MIGRATE_IT`."""


def check_exact(conn: sqlite3.Connection) -> None:
    """Refuse any schema version but this code's own (for `open_existing`, which never migrates)."""
    version = check_not_newer(conn)
    if version == 0:
        raise SchemaVersionError(
            "this database holds no agentrt record (perhaps the path is not the one you "
            f"meant); {CREATE_ONE}"
        )
    if version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database was written by an older agentrt (schema version {version}; this "
            f"agentrt {RUNTIME_VERSION} needs {SCHEMA_VERSION}): {MIGRATE_IT}"
        )


def check_writer(conn: sqlite3.Connection, runtime_version: str = RUNTIME_VERSION) -> None:
    """Refuse to write a file whose `min_writer_version` is above `runtime_version`."""
    required = min_writer_version(conn)
    if required == "":
        return
    try:
        needed = parse_version(required)
    except ValueError:
        raise SchemaVersionError(
            f"the database requires writers of version {required!r}, which this agentrt "
            f"{runtime_version} cannot compare with: refusing to write it"
        ) from None
    if parse_version(runtime_version) < needed:
        raise SchemaVersionError(
            f"the database was written by a newer agentrt and may be written only by agentrt "
            f"{required} or later (this is {runtime_version}): upgrade to write it"
        )


FOREIGN = (
    "this database holds no agentrt record but other tables (perhaps the path is not the "
    "one you meant); agentrt creates a record only at a new path or in an empty database: "
    "nothing was changed"
)


def refuse_foreign(conn: sqlite3.Connection, version: int) -> None:
    """Refuse a database of schema `version` 0 that holds anything (another program's
    tables): the explicit migration (`agentrt migrate`) creates a record only in a new
    file or an empty database, never beside what another program keeps (decision 0201)."""
    if version == 0 and conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
        raise SchemaVersionError(FOREIGN)


def migrate(
    conn: sqlite3.Connection,
    check: Callable[[sqlite3.Connection], object] | None = None,
    *,
    chain_partitions: int | None = None,
    where: str = "",
) -> int:
    """Bring the schema up to `SCHEMA_VERSION` (`upgrade`); returns it."""
    return upgrade(conn, check, chain_partitions=chain_partitions, where=where)[1]


def upgrade(
    conn: sqlite3.Connection,
    check: Callable[[sqlite3.Connection], object] | None = None,
    *,
    chain_partitions: int | None = None,
    where: str = "",
    foreign: bool = True,
) -> tuple[int, int]:
    """Bring the schema up to `SCHEMA_VERSION` in one IMMEDIATE transaction; returns the
    version it found (0: the record was created now) and the one it left.

    The version is read again inside the transaction, so two processes opening
    a new file at once apply each migration once. A newer schema, or a
    `min_writer_version` above this runtime, is refused before anything changes.
    `check`, when given, runs first inside the transaction (the store's schema
    safety check), so nothing planted since the open's own check fires here.
    `chain_partitions` is N for a record created now (default 1); for one that
    exists it must be None or its own N (`StoreError` otherwise: N never changes).
    `where` names the record in a refusal of its N (`chain_partitions`). Not `foreign`, a
    database that holds tables but no record of agentrt's is refused (`refuse_foreign`).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        if check is not None:
            check(conn)
        current = check_not_newer(conn)
        if not foreign:
            refuse_foreign(conn, current)
        check_writer(conn)
        applied_at = format_time(wall_clock())
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            for sql in statements(migration.sql):
                try:
                    conn.execute(sql)
                except sqlite3.OperationalError as e:
                    refusal = already_made(migration.version, current, str(e))
                    if refusal is None:
                        raise
                    raise refusal from e
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (migration.version, applied_at),
            )
        settle_partitions(conn, chain_partitions, created=current == 0, where=where)
        # A migration may itself raise the bar for writers.
        check_writer(conn)
        conn.execute("COMMIT")
    except BaseException:
        rollback_quietly(conn)
        raise
    return current, SCHEMA_VERSION


def already_made(version: int, current: int, said: str) -> SchemaVersionError | None:
    """The refusal of a migration that finds what it makes already there, or what it changes
    gone (both backends'): the record's `schema_migrations` lost the version of what it
    holds; None for any other failure of the migration's statement."""
    found = "already exists" in said or "duplicate column" in said
    # PostgreSQL's migration 5 begins by dropping what migration 1 made: gone already there.
    if not found and not (current > 0 and "does not exist" in said):
        return None
    if current == 0:
        return SchemaVersionError(
            f"migration {version} cannot be applied ({said}): the database holds no record of "
            "agentrt's migrations but a table or index of a name agentrt makes (it is another "
            "program's database, or agentrt's with its record removed); refused, nothing was "
            "changed"
        )
    return SchemaVersionError(
        f"migration {version} cannot be applied ({said}): the database records schema "
        f"version {current} but holds what a later migration makes, so its record of "
        "migrations was changed by hand; refused, nothing was changed"
    )


MAX_PARTITIONS = 1024


def chain_partitions(conn: Any, *, strict: bool = True, where: str = "") -> int:
    """N, the record's chain partitions (`agentrt_meta`); StoreError when it is not a number
    of partitions. Not `strict` (a reader), an unreadable value is taken from the head
    rows instead (one per partition), so every read still works; a writer refuses it.

    Migration 5 (`PARTITIONS_VERSION`, both backends) writes the row, N = 1 for a record
    made before partitions, which has none (1). A record of that schema or later without
    it had it deleted by hand, and every open refuses it, a reader's too, rather than
    guess N (decision 0175): a writer that took 1 for a record of 16 would chain every
    run's events in partition 0, past heads it does not see. `where` names the record in
    that refusal (`cannot open <where>: ...`)."""
    row = conn.execute("SELECT value FROM agentrt_meta WHERE key = 'chain_partitions'").fetchone()
    if row is None:
        found = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        if found is None or found[0] is None or int(found[0]) < PARTITIONS_VERSION:
            return 1
        raise StoreError(
            ("" if not where else f"cannot open {where}: ")
            + "agentrt_meta has no chain_partitions row, which every record of this schema "
            "holds from its creation, so it was deleted or changed by hand and agentrt will "
            "not guess how many partitions the record's chain has: put the row back with the "
            "N the record was created with (its chain_head table keeps one row per "
            "partition), or restore the record from a backup"
        )
    text = row[0]
    n = int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else 0
    if 1 <= n <= MAX_PARTITIONS:
        return n
    if not strict:
        rows = conn.execute("SELECT count(*) FROM chain_head").fetchone()
        if rows is not None and 1 <= int(rows[0]) <= MAX_PARTITIONS:
            return int(rows[0])
    raise StoreError(
        f"agentrt_meta holds a chain_partitions that is not 1 to {MAX_PARTITIONS}: {text!r}"
    )


def settle_partitions(
    conn: Any, wanted: int | None, *, created: bool, mark: str = "?", where: str = ""
) -> None:
    """At creation, make the record's N `wanted` (its heads, one row each); later, refuse a
    `wanted` that is not the record's own N. Both backends' (`mark`: the parameter mark;
    `where`: the record, as `chain_partitions` names it)."""
    if wanted is not None and not 1 <= wanted <= MAX_PARTITIONS:
        raise ValueError(f"chain_partitions must be 1 to {MAX_PARTITIONS}, not {wanted}")
    if created and wanted is not None and wanted != 1:
        conn.execute(
            f"UPDATE agentrt_meta SET value = {mark} WHERE key = 'chain_partitions'",
            (str(wanted),),
        )
        for part in range(1, wanted):
            conn.execute(
                f"INSERT INTO chain_head (part, seq, hash) VALUES ({mark}, 0, '')",
                (part,),
            )
        return
    if wanted is not None and (found := chain_partitions(conn, where=where)) != wanted:
        raise StoreError(
            f"the record's chain has {found} partition(s), fixed when it was created; "
            f"it cannot be opened with chain_partitions={wanted}"
        )


def rollback_quietly(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is open, never letting a failed ROLLBACK hide the cause."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
