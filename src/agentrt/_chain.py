"""The event hash chain: how each event's hash is computed and how a chain is verified.

Each event's `hash` is hex SHA-256 over seven netstrings (`<byte length>:<bytes>,`,
UTF-8): the previous event's hash (`''` for the first), `seq` in decimal, `run_id`,
`step_id`, `at`, `type` and `payload_json`, each exactly as stored.

The record's events form N chains, its partitions (decisions 0086, 0093), N fixed
when the record is created (`agentrt_meta.chain_partitions`; a record made before
partitions is N = 1). A run's events are all in partition `partition_of(run_id, N)`;
the events of partition `p` have the seqs `seq % N == p`, consecutive within it: the
event "previous" to `seq` is the one at `seq - N` (with N = 1, the next-lower seq
across all runs, the one chain of before). Each partition follows commit order.
A partition's first seq is `p` (`N` for partition 0).

Verification reads only, in bounded pages of all partitions in seq order, and
reports the first break met:

- `deleted`: a `seq` is missing inside a partition (a seq is never reused, and a
  rolled-back append leaves no gap, so a gap is a deletion);
- `truncated`: events after the last one of a partition are missing (the store
  has handed out a higher seq in it, or a kept head lies beyond its last event);
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
    if (
        prev_hash.__class__ is str
        and run_id.__class__ is str
        and step_id.__class__ is str
        and at.__class__ is str
        and type.__class__ is str
        and payload_json.__class__ is str
        and prev_hash.isascii()
        and run_id.isascii()
        and step_id.isascii()
        and at.isascii()
        and type.isascii()
    ):
        # What the writers hand in: the same bytes as the netstrings below, made in one
        # formatting (ASCII text's length is its byte length; the payload's is counted).
        body, number = payload_json.encode(), str(seq)
        head = (
            f"{len(prev_hash)}:{prev_hash},{len(number)}:{number},{len(run_id)}:{run_id},"
            f"{len(step_id)}:{step_id},{len(at)}:{at},{len(type)}:{type},{len(body)}:"
        )
        return hashlib.sha256(b"%b%b," % (head.encode(), body)).hexdigest()
    parts = (prev_hash, str(seq), run_id, step_id, at, type, payload_json)
    return hashlib.sha256(b"".join(map(netstring, parts))).hexdigest()


def _type_name(value: object) -> str:
    return type(value).__name__


def partition_of(run_id: str, partitions: int) -> int:
    """The partition a run's events are chained in: `sha256(run_id)`, as an integer, mod N."""
    if partitions == 1:
        return 0
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest, "big") % partitions


def first_seq(partition: int, partitions: int) -> int:
    """The lowest seq of a partition: `partition`, or N for partition 0 (seqs start at 1)."""
    return partition or partitions


def heads_digest(heads: Sequence[tuple[int, str]]) -> str:
    """The one value the N partition heads are kept as: with N = 1 the head's own hash;
    otherwise hex SHA-256 over netstrings of N, then each head's seq and hash in order."""
    if len(heads) == 1:
        return heads[0][1]
    parts: list[str] = [str(len(heads))]
    for seq, digest in heads:
        parts += [str(seq), digest]
    return hashlib.sha256(b"".join(map(netstring, parts))).hexdigest()


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

    def partitions(self) -> int:
        """N, the number of chain partitions the record was created with."""

    def event_before(self, seq: int, partition: int) -> tuple[int, str | bytes] | None:
        """`(seq, hash)` of the partition's last event before `seq`, or None."""

    def events_between(self, first: int, last: int, limit: int) -> list[ChainRow]:
        """Up to `limit` events (of every partition) from seq `first` to `last`, in order."""

    def events_after(self, after: int, limit: int) -> list[ChainRow]:
        """Up to `limit` events (of every partition) after seq `after`, in order."""

    def issued_seqs(self) -> list[int] | None:
        """Per partition, the highest seq ever handed out in it, deleted or not (0 for none;
        None when the backend cannot say)."""

    def event_hash(self, seq: int) -> str | bytes | None:
        """The stored hash of the event at `seq`, or None when there is none."""

    def last_seq(self, partition: int) -> int:
        """The highest seq stored now in the partition (0 when there is none)."""


Head = tuple[int, str]
"""A kept head of one partition: `(seq, hash)` of its last event (`(0, '')`: none)."""


def verify_chain(
    reader: ChainReader,
    from_seq: int | None = None,
    to_seq: int | None = None,
    *,
    head: Head | Sequence[Head] | None = None,
    page_size: int = PAGE_SIZE,
) -> VerifyReport:
    """Verify the events with `from_seq <= seq <= to_seq` (whole chain by default).

    In each partition the hash of the event just before `from_seq` is taken as
    given. `head`, kept where the database's writers cannot reach, is checked after
    the range: it catches a truncated tail or a recomputed chain. It is one
    `(seq, hash)` for a record of one partition, the N partitions' pairs in order
    (`Store.chain_heads()`) for any N; ValueError when it does not fit the record.
    The report's `head_seq`/`head_hash` are the last event that verified (N > 1:
    N, and `heads_digest` of `heads`, each partition's last event that verified).
    Reads only; run it inside a read transaction for a consistent snapshot.
    Never raises on what the file holds: unreadable text, or a page the storage
    cannot read, is reported as an `unreadable` break.
    """
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    n = reader.partitions()
    kept = _kept_heads(head, n)
    # No seq is past a 64-bit integer (what either database can hold or bind): a bound
    # beyond it reads as no bound, and a start beyond it as nothing in range.
    start = 1 if from_seq is None else min(max(1, from_seq), _MAX_SEQ - n + 1)
    if to_seq is not None:
        to_seq = min(to_seq, _MAX_SEQ)
    walk = _Walk(reader, n, start, to_seq, kept, page_size)
    try:
        brk = walk.run()
    except StoreDamagedError as e:  # a damaged page: say so, as a break, where it stopped
        brk = ChainBreak(seq=walk.last_seq + 1, problem=UNREADABLE, detail=str(e))
    heads = tuple((max(seq, 0), h if isinstance(h, str) else "") for seq, h in walk.prev)
    if n == 1:
        return VerifyReport(
            intact=brk is None,
            checked=walk.checked,
            head_seq=heads[0][0],
            head_hash=heads[0][1],
            first_break=brk,
        )
    return VerifyReport(
        intact=brk is None,
        checked=walk.checked,
        head_seq=n,
        head_hash=heads_digest(heads),
        first_break=brk,
        heads=heads,
    )


def _kept_heads(head: Head | Sequence[Head] | None, n: int) -> list[Head] | None:
    """The kept head as one pair per partition; ValueError when it does not fit N."""
    if head is None:
        return None
    pairs: list[Head] = []
    if len(head) == 2 and isinstance(head[0], int) and isinstance(head[1], str):
        pairs.append((head[0], head[1]))  # one (seq, hash)
    else:
        for pair in head:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise ValueError(f"a kept head is (seq, hash) pairs, not {pair!r}")
            pairs.append((int(pair[0]), str(pair[1])))
    if len(pairs) != n:
        raise ValueError(
            f"the kept head has {len(pairs)} partition head(s) and the record {n} partitions: "
            "keep the record's chain_heads(), one (seq, hash) per partition"
        )
    for p, (seq, _) in enumerate(pairs):
        if seq > 0 and seq % n != p:
            raise ValueError(f"the kept head of partition {p} names seq {seq}, not one of its own")
    return pairs


class _Walk:
    """One verification: per partition, where it stands (last verified seq and hash), and how
    many events verified."""

    def __init__(
        self,
        reader: ChainReader,
        n: int,
        start: int,
        to_seq: int | None,
        head: list[Head] | None,
        page_size: int,
    ) -> None:
        self.reader = reader
        self.n = n
        self.start = start
        self.to_seq = to_seq
        self.head = head
        self.page_size = page_size
        # Per partition: the last seq verified (or the one before its first in range, which
        # is 0 or below when there is none) and its hash.
        self.prev: list[tuple[int, str | bytes]] = [(start - 1, "")] * n
        self.last_seq = start - 1  # the highest seq verified, of any partition
        self.checked = 0

    def _starts(self) -> None:
        """Each partition's event just before the range, taken as given."""
        reader, n, start = self.reader, self.n, self.start
        for p in range(n):
            first = start + (p - start) % n  # the partition's first seq in the range
            before = first - n
            if before <= 0:
                self.prev[p] = (before, "")
                continue
            found = reader.event_before(first, p)
            self.prev[p] = found if found is not None else (first_seq(p, n) - n, "")
        self.last_seq = max(0, *(seq for seq, _ in self.prev))

    def run(self) -> ChainBreak | None:
        reader, to_seq, page_size, n = self.reader, self.to_seq, self.page_size, self.n
        self._starts()
        cursor_seq = self.start
        while True:
            if to_seq is not None and cursor_seq > to_seq:
                break
            page = reader.events_between(
                cursor_seq, _MAX_SEQ if to_seq is None else to_seq, page_size
            )
            for i, row in enumerate(page):
                p = row.seq % n
                prev_seq, prev_hash = self.prev[p]
                if row.seq != prev_seq + n:
                    return ChainBreak(seq=prev_seq + n, problem=DELETED)
                unreadable = row.unreadable()
                if row.hash_at(prev_hash, row.seq) != row.hash:
                    problem = ALTERED
                    if _swapped(reader, prev_hash, row, page[i + 1 :], page_size):
                        problem = SWAPPED
                    return ChainBreak(seq=row.seq, problem=problem, detail=unreadable)
                if unreadable:
                    # The hash matches bytes the runtime never writes: recomputed after an edit.
                    return ChainBreak(seq=row.seq, problem=UNREADABLE, detail=unreadable)
                self.prev[p] = (row.seq, str(row.hash))
                self.last_seq = row.seq
                self.checked += 1
            if len(page) < page_size:
                break
            cursor_seq = self.last_seq + 1
        brk = self._tail_break()
        if brk is None and self.head is not None:
            brk = self._head_break(self.head)
        return brk

    def _tail_break(self) -> ChainBreak | None:
        """A partition's tail deleted after its last event, as the store remembers the seqs
        handed out; the lowest such seq."""
        issued = self.reader.issued_seqs()
        if issued is None:
            return None
        found: list[int] = []
        for p, (last, _) in enumerate(self.prev):
            following = last + self.n
            if issued[p] >= following and (self.to_seq is None or self.to_seq >= following):
                found.append(following)
        return ChainBreak(seq=min(found), problem=TRUNCATED) if found else None

    def _head_break(self, head: list[Head]) -> ChainBreak | None:
        found: list[ChainBreak] = []
        for p, (head_seq, head_hash) in enumerate(head):
            if head_seq <= 0:
                continue
            # A kept seq past a 64-bit integer names no event any database holds.
            stored = self.reader.event_hash(head_seq) if head_seq <= _MAX_SEQ else None
            if stored is None:
                last = self.reader.last_seq(p)
                if last < head_seq:
                    following = last + self.n if last else first_seq(p, self.n)
                    found.append(ChainBreak(seq=following, problem=TRUNCATED))
                else:
                    found.append(ChainBreak(seq=head_seq, problem=DELETED))
            elif stored != head_hash:
                found.append(ChainBreak(seq=head_seq, problem=REWRITTEN))
        return min(found, key=lambda b: b.seq) if found else None


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
