"""The MCP proxy's rows: which run each request key made (part of the store layer).

`agentrt-proxy` makes one run per tool call and ties an identical re-call to
the run of its predecessor through a request key (hex SHA-256 of the tool
name, a NUL byte and the canonical JSON of the arguments). This module owns
the statements over its table, `proxy_requests`, and the proxy's migrations
(`_migrations.PROXY_MIGRATIONS`, recorded in `proxy_migrations`).

Invariants:
- A key's row is written, in its own fsynced transaction, *before* the run it
  names is created (`claim_request`), so no run of the proxy ever exists
  without its key: a crash between the two leaves a row naming no run, which
  the proxy reads as "never started".
- `claim_request` is a compare-and-set on the key's latest row: of two
  processes that judged the same latest row, exactly one claims the key.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from .._clock import format_time, parse_time
from .._db import Store
from .._errors import SchemaVersionError
from .._migrations import PROXY_MIGRATIONS, statements


@dataclasses.dataclass(frozen=True)
class RequestRow:
    """One run made for a request key; `seq` orders the runs of a key."""

    seq: int
    request_key: str
    run_id: str
    tool: str
    side_effect: str
    created_at: datetime | None


def migrate_proxy(store: Store, now: datetime) -> int:
    """Apply the proxy's pending migrations in one transaction; returns the version reached.

    A file whose proxy tables are newer than this code is refused
    (`SchemaVersionError`) before anything changes.
    """
    known = PROXY_MIGRATIONS[-1].version
    with store.transaction() as tx:
        exists = tx.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'proxy_migrations'"
        ).fetchone()
        current = 0
        if exists is not None:
            row = tx.execute("SELECT max(version) FROM proxy_migrations").fetchone()
            current = int(row[0]) if row is not None and isinstance(row[0], int) else 0
        if current > known:
            raise SchemaVersionError(
                f"the database's proxy tables were written by a newer agentrt (proxy schema "
                f"version {current}; this one knows up to {known}): upgrade agentrt to use it"
            )
        for migration in PROXY_MIGRATIONS:
            if migration.version <= current:
                continue
            for sql in statements(migration.sql):
                tx.execute(sql)
            tx.execute(
                "INSERT INTO proxy_migrations (version, applied_at) VALUES (?, ?)",
                (migration.version, format_time(now)),
            )
    return known


def proxy_versions(store: Store) -> list[int]:
    """The proxy migrations the file records, in order."""
    return [
        int(row[0]) for row in store.query("SELECT version FROM proxy_migrations ORDER BY version")
    ]


def _row(values: tuple[object, ...]) -> RequestRow:
    seq, key, run_id, tool, side_effect, created_at = values
    return RequestRow(
        seq=int(seq),  # type: ignore[call-overload]
        request_key=str(key),
        run_id=str(run_id),
        tool=str(tool),
        side_effect=str(side_effect),
        created_at=parse_time(created_at) if isinstance(created_at, str) else None,
    )


_COLUMNS = "seq, request_key, run_id, tool, side_effect, created_at"


def latest_request(store: Store, key: str) -> RequestRow | None:
    """The latest run made for `key`, or None."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM proxy_requests WHERE request_key = ? ORDER BY seq DESC LIMIT 1",
        (key,),
    )
    return _row(tuple(rows[0])) if rows else None


def request_of_run(store: Store, run_id: str) -> RequestRow | None:
    """The key row that made `run_id`, or None for a run the proxy did not make."""
    rows = store.query(f"SELECT {_COLUMNS} FROM proxy_requests WHERE run_id = ?", (run_id,))
    return _row(tuple(rows[0])) if rows else None


def claim_request(
    store: Store,
    key: str,
    judged_seq: int | None,
    run_id: str,
    tool: str,
    side_effect: str,
    now: datetime,
) -> bool:
    """Record that `run_id` is the key's next run, if the key's latest row is still
    `judged_seq` (None: the key had none); False, writing nothing, when another
    call claimed the key since."""
    with store.transaction() as tx:
        row = tx.execute(
            "SELECT seq FROM proxy_requests WHERE request_key = ? ORDER BY seq DESC LIMIT 1",
            (key,),
        ).fetchone()
        current = None if row is None else int(row[0])
        if current != judged_seq:
            return False
        tx.execute(
            "INSERT INTO proxy_requests (request_key, run_id, tool, side_effect, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (key, run_id, tool, side_effect, format_time(now)),
        )
        return True


def pending_proxy_approvals(store: Store) -> int:
    """How many approvals of the proxy's runs wait for a person now."""
    rows = store.query(
        "SELECT count(*) FROM approvals AS a JOIN proxy_requests AS p ON p.run_id = a.run_id "
        "WHERE a.status = 'pending'"
    )
    return int(rows[0][0]) if rows else 0
