"""The chain's append as agentrt 0.1.0 (schema 4 and before) wrote it, for the tests that
make a record of a previous release (decision 0093).

One chain, no head rows: the next event chains to the last one present, its seq past the
highest issued (`sqlite_sequence`; PostgreSQL's one `chain_head` row, `id = 1`, locked).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrt._store.postgres._tx import PostgresTx
from agentrt._store.sqlite._chain_rows import SqliteChainReader
from agentrt._store.sqlite._tx import TxCore


def _sqlite_head(tx: TxCore, part: int) -> tuple[int, str]:
    seq, digest, issued = tx.execute(
        "SELECT (SELECT seq FROM events ORDER BY seq DESC LIMIT 1), "
        "(SELECT hash FROM events ORDER BY seq DESC LIMIT 1), "
        "(SELECT seq FROM sqlite_sequence WHERE name = 'events')"
    ).fetchone()
    return max(seq or 0, issued or 0), digest or ""


def _issued(reader: SqliteChainReader) -> list[int]:
    if hasattr(reader, "_pg"):  # PostgreSQL's reader is SQLite's, translated
        found = reader._all("SELECT seq FROM chain_head WHERE id = 1")
    else:
        found = reader._all("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
    return [int(found[0][0]) if found else 0]


def _postgres_head(tx: PostgresTx, part: int) -> tuple[int, str]:
    issued = tx.execute("SELECT seq FROM chain_head WHERE id = 1 FOR UPDATE").fetchone()
    last = tx.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    seq = max(int(issued[0]), 0 if last is None else int(last[0]))
    return seq, "" if last is None else str(last[1])


def _postgres_move(tx: PostgresTx, part: int, seq: int, digest: str) -> Any:
    return tx.execute("UPDATE chain_head SET seq = ? WHERE id = 1", (seq,))


def _postgres_write(
    tx: PostgresTx, rows: list[tuple[Any, ...]], heads: list[tuple[int, int, str]]
) -> None:
    """The events one statement each, then the one head row (decision 0100 writes the
    rows and the new heads in one statement, which a schema-4 head row cannot take)."""
    for row in rows:
        tx.execute(
            "INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            row,
        )
    for part, seq, digest in heads:
        _postgres_move(tx, part, seq, digest)


def previous_release_chain(m: pytest.MonkeyPatch) -> None:
    """Make both backends append and verify as 0.1.0 did, inside `m`'s context."""
    from agentrt._store.postgres import _migrations as postgres_migrations

    m.setattr(TxCore, "_read_head", _sqlite_head)
    m.setattr(TxCore, "_move_head", lambda tx, part, seq, digest: None)
    m.setattr(SqliteChainReader, "issued_seqs", _issued)
    m.setattr(PostgresTx, "_read_head", _postgres_head)
    m.setattr(PostgresTx, "lock_head_with_run", False)  # no head row by partition yet
    m.setattr(PostgresTx, "_write_events", _postgres_write)
    m.setattr(postgres_migrations, "settle_partitions", lambda *a, **k: None)
