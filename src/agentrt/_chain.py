"""The event hash chain: how each event's hash is computed and how a chain is verified.

Each event's `hash` is hex SHA-256 over seven netstrings (`<byte length>:<bytes>,`,
UTF-8): the previous event's hash (`''` for the first), `seq` in decimal, `run_id`,
`step_id`, `at`, `type` and `payload_json`, each exactly as stored. "Previous" is
the next-lower `seq` across all runs, so the chain follows commit order.

Verification reads only, in bounded pages, and reports the first break:

- `deleted`: a `seq` is missing inside the chain (a seq is never reused, and a
  rolled-back append leaves no gap, so a gap is a deletion);
- `truncated`: events after the last one are missing (the store has handed
  out a higher seq, or a kept head lies beyond the last event);
- `swapped`: the hash fails, and the event that belongs at this seq sits at a
  later one (looked for within one page after the break);
- `altered`: the hash fails for any other reason;
- `rewritten`: the chain verifies, but the event at a kept head's seq does not
  carry the kept hash (the chain was recomputed after an edit);
- `unreadable`: an event's stored text is not valid UTF-8 (the runtime never
  writes such bytes, so even a hash that matches them was recomputed after an
  edit), or the storage itself cannot read the events (a damaged page), or a
  payload's large part, stored once in a table of its own, is missing or does
  not match its hash (the payload is then hashed as stored, with its reference,
  so the event's hash does not match either: decision 0084).

Any bytes in any column are hashed and reported, never raised on: each column
is hashed exactly as stored (the bytes, when they are not valid UTF-8), and the
break's `detail` names the column and what is wrong with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ._errors import StoreDamagedError
from ._records import ChainBreak, VerifyReport
from ._stored_text import unreadable_text

PAGE_SIZE = 1000

ALTERED = "altered"
DELETED = "deleted"
SWAPPED = "swapped"
TRUNCATED = "truncated"
REWRITTEN = "rewritten"
UNREADABLE = "unreadable"

_TEXT_COLUMNS = ("run_id", "step_id", "at", "type", "payload_json", "hash")


def netstring(text: str | bytes) -> bytes:
    """`<byte length>:<UTF-8 bytes>,`; bytes (a stored value that is not UTF-8) as they are."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
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
class ChainRow:
    """One event as stored: each text column as text, or as its bytes when it is not UTF-8."""

    seq: int
    run_id: object
    step_id: object
    at: object
    type: object
    payload_json: object
    hash: object

    def hash_at(self, prev_hash: str | bytes, seq: int) -> str | None:
        """This row's content hashed as if it stood at `seq` after `prev_hash`; None if untyped.

        Text that is not valid UTF-8 reads as bytes and is hashed exactly as stored.
        """
        parts: list[str | bytes] = [prev_hash, str(seq)]
        for value in (self.run_id, self.step_id, self.at, self.type, self.payload_json):
            if not isinstance(value, str | bytes):
                return None
            parts.append(value)
        return hashlib.sha256(b"".join(map(netstring, parts))).hexdigest()

    def unreadable(self) -> str:
        """Which stored column is not text, and why; `''` when every one is."""
        for name in _TEXT_COLUMNS:
            value = getattr(self, name)
            if not isinstance(value, str):
                return f"{name} is {unreadable_text(value)}"
            why = getattr(value, "why", None)  # a stored value not put back (decision 0084)
            if isinstance(why, str):
                return f"{name} {why}"
        return ""


class ChainReader(Protocol):
    """What the walk reads of a store's events, in one consistent snapshot.

    Each backend implements it over its own rows; a read the storage itself
    cannot complete (a damaged page) raises `StoreDamagedError`.
    """

    def event_before(self, seq: int) -> tuple[int, str | bytes] | None:
        """`(seq, hash)` of the last event before `seq`, or None."""

    def events_between(self, first: int, last: int, limit: int) -> list[ChainRow]:
        """Up to `limit` events from seq `first` to `last`, in order."""

    def events_after(self, after: int, limit: int) -> list[ChainRow]:
        """Up to `limit` events after seq `after`, in order."""

    def issued_seq(self) -> int | None:
        """The highest seq ever handed out, deleted or not (None when the backend cannot say)."""

    def event_hash(self, seq: int) -> str | bytes | None:
        """The stored hash of the event at `seq`, or None when there is none."""

    def last_seq(self) -> int:
        """The highest seq stored now (0 when there is none)."""


def verify_chain(
    reader: ChainReader,
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
    Never raises on what the file holds: unreadable text, or a page the storage
    cannot read, is reported as an `unreadable` break.
    """
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    walk = _Walk(reader, 1 if from_seq is None else max(1, from_seq), to_seq, head, page_size)
    try:
        brk = walk.run()
    except StoreDamagedError as e:  # a damaged page: say so, as a break, where it stopped
        brk = ChainBreak(seq=walk.prev_seq + 1, problem=UNREADABLE, detail=str(e))
    prev_hash = walk.prev_hash
    return VerifyReport(
        intact=brk is None,
        checked=walk.checked,
        head_seq=walk.prev_seq,
        head_hash=prev_hash if isinstance(prev_hash, str) else "",
        first_break=brk,
    )


class _Walk:
    """One verification: where it stands (last verified seq and hash) and how many verified."""

    def __init__(
        self,
        reader: ChainReader,
        start: int,
        to_seq: int | None,
        head: tuple[int, str] | None,
        page_size: int,
    ) -> None:
        self.reader = reader
        self.start = start
        self.to_seq = to_seq
        self.head = head
        self.page_size = page_size
        self.prev_seq = start - 1
        self.prev_hash: str | bytes = ""
        self.checked = 0

    def run(self) -> ChainBreak | None:
        reader, to_seq, page_size = self.reader, self.to_seq, self.page_size
        before = reader.event_before(self.start)
        if before is None:
            self.prev_seq, self.prev_hash = 0, ""
        else:
            self.prev_seq, self.prev_hash = before
        cursor_seq = self.start
        while True:
            if to_seq is not None and cursor_seq > to_seq:
                break
            page = reader.events_between(
                cursor_seq, _MAX_SEQ if to_seq is None else to_seq, page_size
            )
            for i, row in enumerate(page):
                if row.seq != self.prev_seq + 1:
                    return ChainBreak(seq=self.prev_seq + 1, problem=DELETED)
                unreadable = row.unreadable()
                if row.hash_at(self.prev_hash, row.seq) != row.hash:
                    problem = ALTERED
                    if _swapped(reader, self.prev_hash, row, page[i + 1 :], page_size):
                        problem = SWAPPED
                    return ChainBreak(seq=row.seq, problem=problem, detail=unreadable)
                if unreadable:
                    # The hash matches bytes the runtime never writes: recomputed after an edit.
                    return ChainBreak(seq=row.seq, problem=UNREADABLE, detail=unreadable)
                self.prev_seq, self.prev_hash = row.seq, str(row.hash)
                self.checked += 1
            if len(page) < page_size:
                break
            cursor_seq = self.prev_seq + 1
        brk = _tail_break(reader, self.prev_seq, to_seq)
        if brk is None and self.head is not None:
            brk = _head_break(reader, self.head)
        return brk


_MAX_SEQ = 2**63 - 1


def _swapped(
    reader: ChainReader,
    prev_hash: str | bytes,
    bad: ChainRow,
    rest_of_page: Sequence[ChainRow],
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
        later += reader.events_after(after, page_size - len(later))
    for other in later:
        candidate = other.hash_at(prev_hash, bad.seq)
        if candidate is not None and candidate in (bad.hash, other.hash):
            return True
    return False


def _tail_break(reader: ChainReader, last_seq: int, to_seq: int | None) -> ChainBreak | None:
    """A tail deleted after `last_seq`, as the store remembers the seqs handed out."""
    issued = reader.issued_seq()
    if issued is None:
        return None
    if issued > last_seq and (to_seq is None or to_seq > last_seq):
        return ChainBreak(seq=last_seq + 1, problem=TRUNCATED)
    return None


def _head_break(reader: ChainReader, head: tuple[int, str]) -> ChainBreak | None:
    head_seq, head_hash = head
    if head_seq <= 0:
        return None
    stored = reader.event_hash(head_seq)
    if stored is None:
        last_seq = reader.last_seq()
        if last_seq < head_seq:
            return ChainBreak(seq=last_seq + 1, problem=TRUNCATED)
        return ChainBreak(seq=head_seq, problem=DELETED)
    if stored != head_hash:
        return ChainBreak(seq=head_seq, problem=REWRITTEN)
    return None
