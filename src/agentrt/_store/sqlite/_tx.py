"""One SQLite write transaction's core: statements, and events appended to the chain.

An event is chained in its run's partition (`agentrt._chain`, decision 0093): its
seq is the partition head's seq plus N (the partition's first seq when it has
none), its previous hash the head's hash, and the head row of `chain_head` is
moved to it in the same transaction. Each head the transaction appends to is read
once and cached; that is safe because `BEGIN IMMEDIATE` admits one writer at a
time, so nobody else can append between the read and this transaction's commit.

The events are hashed and numbered when appended, in order, and written when the
transaction is about to commit (`write_events`, decision 0100): one statement for
all its events and one move of each partition's head, where a row and a head move
per event were written before. The store calls it before `COMMIT` (and before a
group commit's work releases its savepoint); a statement of the transaction that
names `events` or `chain_head` writes them first, so a read inside the transaction
still sees what it appended. Until then they are nowhere but in memory, which a
crash or a rollback loses exactly as it would lose them written.

A group commit's work keeps the heads its events move (`keep_heads`) and the group
writes each once, before its `COMMIT` (`move_heads`, decision 0129): inside a group,
the `chain_head` rows show the heads as the group found them, and the works chain from
the heads in memory instead (`chain_from`), so no work reads a row another moved.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..._canonical import from_text, to_text
from ..._chain import event_hash, first_seq, partition_of
from ..._clock import as_stored, format_time
from ..._errors import (
    StoreError,
    repeated_id,
)
from ..._records import (
    Event,
)
from ._connection import read_only_before_commit, sqlite_failure, store_error
from ._values import INSERT_SQL, pack

# A statement that reads or writes the events or the heads: the appended events are
# written before it runs.
_TOUCHES_CHAIN = re.compile(r"\b(events|chain_head)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def _touches_chain(sql: str) -> bool:
    """Whether `sql` names `events` or `chain_head`, worked out once per text (a step's
    statements are a few constant texts; the search cost more than the rest of `execute`),
    as the PostgreSQL backend's `_statement` does."""
    return _TOUCHES_CHAIN.search(sql) is not None


# --- transactions -------------------------------------------------------------------------------


# A partition's head: the last seq handed out in it and the hash to chain to.
_PARTITION_HEAD = "SELECT seq, hash FROM chain_head WHERE part = ?"
_MOVE_HEAD = "UPDATE chain_head SET seq = ?, hash = ? WHERE part = ?"
_INSERT_EVENT = (
    "INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

# An event's row as written: seq, run_id, step_id, at, type, payload_json (as stored), hash.
EventRow = tuple[int, str, str, str, str, str, str]


_OVER = "the transaction is over; use a new store.transaction()"

# A new row's id already taken: SQLite names the table, the statement holds the id.
_TAKEN_ID = re.compile(r"UNIQUE constraint failed: ([a-z_]+)\.id")
_INSERT_ID = re.compile(r"\s*INSERT INTO ([a-z_]+) \(id,")


def _repeated(
    error: sqlite3.IntegrityError, sql: str, params: Sequence[Any] | Mapping[str, Any]
) -> StoreError | None:
    """`repeated_id`'s error for an INSERT whose id (its first value) is already a row's: an
    id factory that repeats ids (SQLite rolled back only the statement)."""
    taken = _TAKEN_ID.search(str(error))
    inserting = _INSERT_ID.match(sql)
    if taken is None or inserting is None or taken.group(1) != inserting.group(1):
        return None
    if isinstance(params, Mapping) or not params:
        return None
    return repeated_id(taken.group(1), params[0])


def move_heads(conn: sqlite3.Connection, moved: Mapping[int, tuple[int, str]]) -> None:
    """Make each partition's head the event `(seq, hash)` given: the heads a group commit's
    works moved, written once before its COMMIT (`TxCore.keep_heads`, decision 0129)."""
    for part, (seq, digest) in moved.items():
        conn.execute(_MOVE_HEAD, (seq, digest, part))


class TxCore:
    """The statements and the chain of one write transaction (`SqliteTx` adds the named writes)."""

    def __init__(
        self, conn: sqlite3.Connection, partitions: int = 1, *, path: str | None = None
    ) -> None:
        self.conn = conn
        self.partitions = partitions  # N, the record's chain partitions
        # The database file, for a store with one: a write failing on a filesystem turned
        # read-only is said as one (`_failed`, decision 0214).
        self.path = path
        # The appended events as stored, turned into `Event`s only when asked for
        # (`events`): most transactions have no observer to hand them to.
        self._appended: list[tuple[int, str, str, datetime, str, str, str]] = []
        self._open = True
        self._over = _OVER  # what a use after its end says (`_close`)
        # Per partition appended to: (hash of its head, next seq to hand out in it).
        self._heads: dict[int, tuple[str, int]] = {}
        # A snapshot's reads (nothing written, nothing to run twice): busy is retryable.
        self._reads_only = False
        # The events appended and not yet written, and per partition the head they move
        # it to (`write_events`).
        self._unwritten: list[EventRow] = []
        self._moved: dict[int, tuple[int, str]] = {}
        # A work of a group commit: the heads its events move are kept here for the group
        # to move once, before its COMMIT (`keep_heads`), not moved by each work.
        self._kept_heads: dict[int, tuple[int, str]] | None = None

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError(self._over)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        self._check_open()
        if self._unwritten and _touches_chain(sql):
            self.write_events()
        try:
            return self.conn.execute(sql, params)
        except sqlite3.IntegrityError as e:
            raise (_repeated(e, sql, params) or self._failed(e)) from e
        except sqlite3.Error as e:
            raise self._failed(e) from e
        except UnicodeEncodeError as e:  # a value UTF-8 cannot hold: nothing was run
            raise StoreError(f"a statement of the transaction failed: {e}") from e

    def _failed(self, error: sqlite3.Error) -> StoreError:
        """The error a failed statement raises. SQLite rolls the whole transaction back on
        some failures (a full disk, an I/O error, out of memory): the transaction is over
        then, and every later statement of it is refused. Run on, each would commit on its
        own, outside any transaction, and the block's end would find nothing to commit.

        On a filesystem turned read-only under the store, it says so, naming the file, and
        that nothing of the transaction was written (decision 0214)."""
        read_only = None if self._reads_only else read_only_before_commit(self.path, error)
        if read_only is not None:
            said = f"a statement of the transaction failed: {read_only}"
            if self._open and not self.conn.in_transaction:
                self._close(said)  # rolled back by SQLite: a later statement says the same
            return StoreError(said)
        error_ = store_error(
            error, "a statement of the transaction failed", retryable=self._reads_only
        )
        if self._open and not self.conn.in_transaction:
            why = (
                f"SQLite rolled the whole transaction back after a failed statement "
                f"({sqlite_failure(error) or error}): nothing of it was written; "
                "use a new store.transaction()"
            )
            self._close(why)
            error_ = type(error_)(f"{error_}; {why}")
        return error_

    def check_open(self) -> None:
        """StoreError when the transaction is over (SQLite rolled it back, or its block
        ended): the store calls it before its COMMIT."""
        self._check_open()

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
        """Insert one event chained to the previous one of its run's partition; returns its seq.

        Events must be inserted only through this method: each partition's head
        is read once per transaction and cached here. `events` lists what was appended.
        The row is written with the transaction's others by `write_events`.
        """
        self._check_open()
        return self.append_event_text(run_id, step_id, at, type, to_text(payload))

    def append_event_text(
        self, run_id: str, step_id: str, at: datetime, type: str, payload_json: str
    ) -> int:
        """`append_event` of a payload whose text (`to_text` of it) the caller already made."""
        self._check_open()
        at_text = format_time(at)
        part = partition_of(run_id, self.partitions)
        prev_hash, seq = self._next(part)
        digest = event_hash(prev_hash, seq, run_id, step_id, at_text, type, payload_json)
        held = self.stored(payload_json)
        self._unwritten.append((seq, run_id, step_id, at_text, type, held, digest))
        self._moved[part] = (seq, digest)
        self._heads[part] = (digest, seq + self.partitions)
        self._appended.append((seq, run_id, step_id, at, type, payload_json, digest))
        return seq

    def known_heads(self) -> dict[int, tuple[str, int]]:
        """Per partition read or moved by this transaction: the hash to chain to and the
        next seq, as its connection now holds them once `write_events` has run."""
        return dict(self._heads)

    def chain_from(self, heads: dict[int, tuple[str, int]]) -> None:
        """Begin from `heads` (`known_heads` of a work committed before this one in the same
        transaction: the rows its connection holds), rather than reading them again."""
        self._heads.update(heads)

    def keep_heads(self) -> None:
        """Keep the heads this transaction's events move (`kept_heads`) instead of writing
        them: a group commit's work, whose group moves each head once (`SqliteStore.
        transactions`). Its events still chain from, and hand out seqs after, the heads as
        moved (`known_heads`); only the `chain_head` rows wait."""
        self._kept_heads = {}

    def kept_heads(self) -> Mapping[int, tuple[int, str]]:
        """Per partition, `(seq, hash)` of the last event this transaction appended there,
        once written (`keep_heads`)."""
        return self._kept_heads or {}

    def _read_head(self, part: int) -> Any:
        """The partition's head row, `(seq, hash)`, or None (`PostgresTx` locks it)."""
        return self.execute(_PARTITION_HEAD, (part,)).fetchone()

    def write_events(self) -> None:
        """Write the events appended since the last call, and move each partition's head to
        its last one (or keep it for the group, `keep_heads`): called by the store before
        the transaction commits."""
        if not self._unwritten:
            return
        rows, moved = self._unwritten, self._moved
        self._unwritten, self._moved = [], {}
        try:
            self._write_events(rows, [(part, seq, digest) for part, (seq, digest) in moved.items()])
        except BaseException:
            # Still to be written: a caller that catches this and goes on cannot commit the
            # transaction without its events (the commit writes them again, and fails).
            self._unwritten = rows + self._unwritten
            self._moved = {**moved, **self._moved}
            raise

    def _write_events(self, rows: list[EventRow], heads: list[tuple[int, int, str]]) -> None:
        """The events' rows, in order, and the heads `(part, seq, hash)` they move to."""
        self._check_open()
        try:
            self.conn.executemany(_INSERT_EVENT, rows)
        except sqlite3.Error as e:
            raise self._failed(e) from e
        kept = self._kept_heads
        for part, seq, digest in heads:
            if kept is None:
                self._move_head(part, seq, digest)
            else:
                kept[part] = (seq, digest)

    def _move_head(self, part: int, seq: int, digest: str) -> None:
        """Make the event at `seq` the partition's head (in this transaction)."""
        self.execute(_MOVE_HEAD, (seq, digest, part))

    def _next(self, part: int) -> tuple[str, int]:
        """The hash to chain to and the next seq of the partition; a seq is never handed
        out twice, even one whose row was deleted (the head keeps the highest issued)."""
        cached = self._heads.get(part)
        if cached is not None:
            return cached
        row = self._read_head(part)
        if row is None:
            raise StoreError(
                f"the chain has no head for partition {part} of {self.partitions}: "
                "the record is damaged (agentrt verify)"
            )
        head_seq, head_hash = row[0], row[1]
        if not isinstance(head_seq, int) or not isinstance(head_hash, str):
            raise StoreError(
                f"the chain's head of partition {part} is not a seq and a hash as written: "
                "the record is damaged (agentrt verify)"
            )
        following = head_seq + self.partitions if head_seq > 0 else first_seq(part, self.partitions)
        self._heads[part] = (head_hash, following)
        return self._heads[part]

    def _close(self, why: str | None = None) -> None:
        """The transaction is over; `why` (kept if it is still open) is what a use says
        from now on (a store left to its parent at a fork, decision 0127)."""
        if self._open and why is not None:
            self._over = why
        self._open = False
