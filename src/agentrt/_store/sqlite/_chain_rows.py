"""The SQLite backend's side of the chain walk: the events' rows on one connection.

`verify_chain` (`agentrt._chain`) holds the walk; this reader gives it the rows,
each text column as SQLite stored it (bytes when it is not UTF-8), and turns a
read SQLite cannot complete (a damaged page) into `StoreDamagedError`. The seqs
ever handed out in each partition are its head row's (`chain_head`, decision 0093).
With one partition every statement is the one chain's of before; with N the
partition's own reads add `seq % N = p`. The PostgreSQL reader is this one, translated.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..._chain import ChainRow
from ..._errors import StoreDamagedError
from ._connection import is_busy, store_error
from ._migrations import chain_partitions

_COLUMNS = "seq, run_id, step_id, at, type, payload_json, hash"


class SqliteChainReader:
    """`ChainReader` over one connection, inside the caller's read snapshot.

    `partitions` is the record's N (read from `agentrt_meta` when not given)."""

    def __init__(self, conn: sqlite3.Connection, partitions: int | None = None) -> None:
        self._conn = conn
        self._partitions = chain_partitions(conn) if partitions is None else partitions

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return list(self._conn.execute(sql, params).fetchall())
        except sqlite3.DatabaseError as e:
            if is_busy(e):  # another connection held it: not damage, say so as busy
                raise store_error(e, "reading the events failed") from e
            raise StoreDamagedError(f"SQLite cannot read the events from here: {e}") from e

    def _rows(self, sql: str, params: Sequence[Any]) -> list[ChainRow]:
        return [ChainRow(*tuple(r)) for r in self._all(sql, params)]

    def _in(self, partition: int) -> tuple[str, tuple[int, ...]]:
        """The condition (and its parameters) that keeps a partition's events, `''` for one."""
        if self._partitions == 1:
            return "", ()
        return " AND seq % ? = ?", (self._partitions, partition)

    def partitions(self) -> int:
        return self._partitions

    def event_before(self, seq: int, partition: int) -> tuple[int, str | bytes] | None:
        cond, params = self._in(partition)
        found = self._all(
            f"SELECT seq, hash FROM events WHERE seq < ?{cond} ORDER BY seq DESC LIMIT 1",
            (seq, *params),
        )
        if not found:
            return None
        before, digest = tuple(found[0])
        return int(before), digest if isinstance(digest, str | bytes) else ""

    def events_between(self, first: int, last: int, limit: int) -> list[ChainRow]:
        return self._rows(
            f"SELECT {_COLUMNS} FROM events WHERE seq >= ? AND seq <= ? ORDER BY seq LIMIT ?",
            (first, last, limit),
        )

    def events_after(self, after: int, limit: int) -> list[ChainRow]:
        return self._rows(
            f"SELECT {_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
        )

    def issued_seqs(self) -> list[int] | None:
        issued = [0] * self._partitions
        for part, seq in self._all("SELECT part, seq FROM chain_head"):
            if isinstance(part, int) and isinstance(seq, int) and 0 <= part < self._partitions:
                issued[part] = seq
        return issued

    def event_hash(self, seq: int) -> str | bytes | None:
        found = self._all("SELECT hash FROM events WHERE seq = ?", (seq,))
        if not found:
            return None
        digest = found[0][0]
        return digest if isinstance(digest, str | bytes) else ""

    def last_seq(self, partition: int) -> int:
        cond, params = self._in(partition)
        found = self._all(f"SELECT max(seq) FROM events WHERE true{cond}", params)
        last = found[0][0] if found else None
        return int(last) if last is not None else 0
