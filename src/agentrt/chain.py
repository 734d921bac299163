"""The event hash chain: how each event's hash is computed and how a chain is verified.

Each event's `hash` is hex SHA-256 over seven netstrings (`<byte length>:<bytes>,`,
UTF-8): the previous event's hash (`''` for the first), `seq` in decimal, `run_id`,
`step_id`, `at`, `type` and `payload_json`, each exactly as stored. "Previous" is
the next-lower `seq` across all runs, so the chain follows commit order.

Verification reads only, in bounded pages, and reports the first break:

- `deleted`: a `seq` is missing inside the chain (AUTOINCREMENT never reuses a
  seq, and a rolled-back insert leaves no gap, so a gap is a deletion);
- `truncated`: events after the last one are missing (`sqlite_sequence` has
  handed out a higher seq, or a kept head lies beyond the last event);
- `swapped`: the hash fails, and the event that belongs at this seq sits at a
  later one (looked for within one page after the break);
- `altered`: the hash fails for any other reason;
- `rewritten`: the chain verifies, but the event at a kept head's seq does not
  carry the kept hash (the chain was recomputed after an edit).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from .records import ChainBreak, VerifyReport

PAGE_SIZE = 1000

ALTERED = "altered"
DELETED = "deleted"
SWAPPED = "swapped"
TRUNCATED = "truncated"
REWRITTEN = "rewritten"

_COLUMNS = "seq, run_id, step_id, at, type, payload_json, hash"


def netstring(text: str) -> bytes:
    """`<byte length>:<UTF-8 bytes>,`."""
    data = text.encode("utf-8")
    return b"%d:%s," % (len(data), data)


def event_hash(
    prev_hash: str, seq: int, run_id: str, step_id: str, at: str, type: str, payload_json: str
) -> str:
    """Hex SHA-256 of the seven netstrings that chain one event to the one before it."""
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"seq must be an int, got {_type_name(seq)}")
    parts = (prev_hash, str(seq), run_id, step_id, at, type, payload_json)
    return hashlib.sha256(b"".join(map(netstring, parts))).hexdigest()


def _type_name(value: object) -> str:
    return type(value).__name__


@dataclass(frozen=True)
class _Row:
    seq: int
    run_id: object
    step_id: object
    at: object
    type: object
    payload_json: object
    hash: object

    def hash_at(self, prev_hash: str, seq: int) -> str | None:
        """This row's content hashed as if it stood at `seq` after `prev_hash`; None if untyped."""
        parts = (self.run_id, self.step_id, self.at, self.type, self.payload_json)
        if not all(isinstance(p, str) for p in parts):
            return None
        run_id, step_id, at, type_, payload = (str(p) for p in parts)
        return event_hash(prev_hash, seq, run_id, step_id, at, type_, payload)


def _rows(cursor: sqlite3.Cursor) -> list[_Row]:
    return [_Row(*tuple(r)) for r in cursor.fetchall()]


def verify_chain(
    conn: sqlite3.Connection,
    from_seq: int | None = None,
    to_seq: int | None = None,
    *,
    head: tuple[int, str] | None = None,
    page_size: int = PAGE_SIZE,
) -> VerifyReport:
    """Verify the events with `from_seq <= seq <= to_seq` (whole chain by default).

    The hash of the event just before `from_seq` is taken as given. `head`, a
    `(seq, hash)` kept where the database's writers cannot reach, is checked
    after the range: it catches a truncated tail or a recomputed chain. The
    report's `head_seq`/`head_hash` are the last event that verified.
    Reads only; run it inside a read transaction for a consistent snapshot.
    """
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    start = 1 if from_seq is None else max(1, from_seq)
    before = conn.execute(
        "SELECT seq, hash FROM events WHERE seq < ? ORDER BY seq DESC LIMIT 1", (start,)
    ).fetchone()
    prev_seq, prev_hash = (0, "") if before is None else (int(before[0]), str(before[1]))
    checked = 0

    def report(brk: ChainBreak | None) -> VerifyReport:
        return VerifyReport(
            intact=brk is None,
            checked=checked,
            head_seq=prev_seq,
            head_hash=prev_hash,
            first_break=brk,
        )

    cursor_seq = start
    while True:
        if to_seq is not None and cursor_seq > to_seq:
            break
        page = _rows(
            conn.execute(
                f"SELECT {_COLUMNS} FROM events WHERE seq >= ? AND seq <= ? ORDER BY seq LIMIT ?",
                (cursor_seq, _MAX_SEQ if to_seq is None else to_seq, page_size),
            )
        )
        for i, row in enumerate(page):
            if row.seq != prev_seq + 1:
                return report(ChainBreak(seq=prev_seq + 1, problem=DELETED))
            if row.hash_at(prev_hash, row.seq) != row.hash:
                problem = ALTERED
                if _swapped(conn, prev_hash, row, page[i + 1 :], page_size):
                    problem = SWAPPED
                return report(ChainBreak(seq=row.seq, problem=problem))
            prev_seq, prev_hash = row.seq, str(row.hash)
            checked += 1
        if len(page) < page_size:
            break
        cursor_seq = prev_seq + 1

    brk = _tail_break(conn, prev_seq, to_seq)
    if brk is None and head is not None:
        brk = _head_break(conn, head)
    return report(brk)


_MAX_SEQ = 2**63 - 1


def _swapped(
    conn: sqlite3.Connection,
    prev_hash: str,
    bad: _Row,
    rest_of_page: Sequence[_Row],
    page_size: int,
) -> bool:
    """Whether the event that belongs at `bad.seq` is found at a later seq, within one page.

    Swapping whole rows moves the hash with the content; swapping only content
    leaves the hash behind. Either way, some later row's content hashes, at this
    position, to its own stored hash or to the hash stored here.
    """
    later = list(rest_of_page)
    if len(later) < page_size:
        after = later[-1].seq if later else bad.seq
        later += _rows(
            conn.execute(
                f"SELECT {_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                (after, page_size - len(later)),
            )
        )
    for other in later:
        candidate = other.hash_at(prev_hash, bad.seq)
        if candidate is not None and candidate in (bad.hash, other.hash):
            return True
    return False


def _tail_break(conn: sqlite3.Connection, last_seq: int, to_seq: int | None) -> ChainBreak | None:
    """A tail deleted after `last_seq`, as `sqlite_sequence` remembers the seqs handed out."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    if row is None or not isinstance(row[0], int):
        return None
    issued = int(row[0])
    if issued > last_seq and (to_seq is None or to_seq > last_seq):
        return ChainBreak(seq=last_seq + 1, problem=TRUNCATED)
    return None


def _head_break(conn: sqlite3.Connection, head: tuple[int, str]) -> ChainBreak | None:
    head_seq, head_hash = head
    if head_seq <= 0:
        return None
    row = conn.execute("SELECT hash FROM events WHERE seq = ?", (head_seq,)).fetchone()
    if row is None:
        last = conn.execute("SELECT max(seq) FROM events").fetchone()
        last_seq = int(last[0]) if last is not None and last[0] is not None else 0
        if last_seq < head_seq:
            return ChainBreak(seq=last_seq + 1, problem=TRUNCATED)
        return ChainBreak(seq=head_seq, problem=DELETED)
    if row[0] != head_hash:
        return ChainBreak(seq=head_seq, problem=REWRITTEN)
    return None
