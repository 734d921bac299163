"""One SQLite write transaction's core: statements, and events appended to the chain.

The chain head is read once per transaction and cached; that is safe because
`BEGIN IMMEDIATE` admits one writer at a time, so nobody else can append
between the read and this transaction's commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..._canonical import from_text, to_text
from ..._chain import event_hash
from ..._clock import as_stored, format_time
from ..._errors import (
    StoreError,
)
from ..._records import (
    Event,
)
from ._connection import store_error
from ._values import INSERT_SQL, pack

# --- transactions -------------------------------------------------------------------------------


# The chain head (seq and hash of the last event) and the last seq AUTOINCREMENT
# issued, in one statement; each is NULL on an empty chain.
_CHAIN_HEAD = (
    "SELECT (SELECT seq FROM events ORDER BY seq DESC LIMIT 1), "
    "(SELECT hash FROM events ORDER BY seq DESC LIMIT 1), "
    "(SELECT seq FROM sqlite_sequence WHERE name = 'events')"
)


class TxCore:
    """The statements and the chain of one write transaction (`SqliteTx` adds the named writes)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # The appended events as stored, turned into `Event`s only when asked for
        # (`events`): most transactions have no observer to hand them to.
        self._appended: list[tuple[int, str, str, datetime, str, str, str]] = []
        self._open = True
        # (hash of the chain head, next seq to hand out), read once per transaction.
        self._head: tuple[str, int] | None = None
        # A snapshot's reads (nothing written, nothing to run twice): busy is retryable.
        self._reads_only = False

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the transaction is over; use a new store.transaction()")

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        self._check_open()
        try:
            return self.conn.execute(sql, params)
        except sqlite3.Error as e:
            raise store_error(
                e, "a statement of the transaction failed", retryable=self._reads_only
            ) from e

    def stored(self, text: str) -> str:
        """What a JSON column holds for `text`: `text` itself, or `text` packed, its large
        parts written to `stored_values` once each (`_values`, decision 0084)."""
        held, parts = pack(text)
        # Inserted every time, never remembered as written: a part met again costs a key
        # look-up, and a savepoint rolled back can never leave a reference to nothing.
        for hash, (length, body) in parts.items():
            self.execute(INSERT_SQL, (hash, length, body))
        return held

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
        self.execute(
            "INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, run_id, step_id, at_text, type, self.stored(payload_json), digest),
        )
        self._head = (digest, seq + 1)
        self._appended.append((seq, run_id, step_id, at, type, payload_json, digest))
        return seq

    def _next(self) -> tuple[str, int]:
        """The hash to chain to and the seq AUTOINCREMENT would give the next row."""
        if self._head is None:
            head_seq, head_hash, issued = self.execute(_CHAIN_HEAD).fetchone()
            head_seq = 0 if head_seq is None else int(head_seq)
            head_hash = "" if head_hash is None else str(head_hash)
            issued_seq = 0 if issued is None else int(issued)
            # AUTOINCREMENT never reuses a seq, even one whose row was deleted.
            self._head = (head_hash, max(head_seq, issued_seq) + 1)
        return self._head

    def _close(self) -> None:
        self._open = False
