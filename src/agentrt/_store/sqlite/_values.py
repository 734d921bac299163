"""Each large value stored once: JSON parts kept in `stored_values` by their SHA-256.

A JSON column (`STORED_COLUMNS`: a step's decision, policy and observation, an
event's payload, an approval's capability, presentation and request, a run's
result) holds either its text exactly as written before migration 4, or that
text *packed*: each large part replaced by a reference, the character U+0001
followed by the SHA-256 (64 hex digits) of the part's text. A part is a JSON
string, array or object whose text is at least `INLINE_LIMIT` characters once
its own large parts are references (so parts nest), and its text, packed, is
one row of `stored_values (hash, length, body)`. The same argument in the
decision, in `step.decided` and in `step.tool_started` is one row, referred to
three times (docs/decisions/0084-each-value-stored-once.md).

Why a raw U+0001 is unambiguous: JSON escapes every control character, so no
JSON text holds one. A text that holds one is packed; a text without one is the
value itself, so rows written before migration 4 read as they did, and nothing
is rewritten by the migration. A text that already holds a raw U+0001 (not JSON,
which the runtime never writes) is stored as it is.

Reading puts the parts back (`unpacked`, called by each backend's row factory
for the columns above, so every reader, the chain walk included, sees the text
as written). Each part's text is checked against its hash: a part missing, or
changed, or swapped for another leaves the column as stored, an `Unresolved`
text, which a row decoder reports as that record's error and the chain walk as
an event whose hash does not match; nothing else in the read fails.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..._errors import StoreError

INLINE_LIMIT = 1024
"""Parts shorter than this many characters stay in their row (decision 0084)."""

STORED_COLUMNS = frozenset(
    {
        "decision_json",
        "policy_json",
        "observation_json",
        "payload_json",
        "capability_json",
        "presentation_json",
        "request_json",
        "result_json",
    }
)
"""The columns whose text may be packed, by name (as a SELECT names them)."""

MARK = "\x01"
_HASH = re.compile(r"[0-9a-f]{64}")
# Where a string starts, or a bracket; everything between (numbers, literals, commas,
# colons, white space) is copied as it is. A string's end is found with `str.find`,
# which skips a long string's characters without a step of Python each.
_STRUCTURE = re.compile(r'["\[\]{}]')

INSERT_SQL = "INSERT OR IGNORE INTO stored_values (hash, length, body) VALUES (?, ?, ?)"


def digest(text: str) -> str:
    """The SHA-256 of a part's text (UTF-8), as its reference names it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def pack(text: str, limit: int | None = None) -> tuple[str, dict[str, tuple[int, str]]]:
    """`text` with its large parts replaced by references, and the parts: hash -> (length, body).

    The text comes back as it is (and no parts) when it is shorter than `limit`,
    holds a raw U+0001, or has no part that large. Putting the parts back gives
    `text` exactly, character for character, whatever `text` is (the scan copies
    every character it does not replace). `limit` is `INLINE_LIMIT` unless given.
    """
    if limit is None:
        limit = INLINE_LIMIT
    if len(text) > MAX_UNPACKED:
        raise StoreError(
            f"a value of {len(text)} characters is over the {MAX_UNPACKED} a store puts back; "
            "nothing was written"
        )
    if len(text) < limit or MARK in text:
        return text, {}
    parts: dict[str, tuple[int, str]] = {}
    stack: list[tuple[int, list[str]]] = []
    pieces: list[str] = []
    pos = 0
    search = _STRUCTURE.search
    while (match := search(text, pos)) is not None:
        start = match.start()
        if start > pos:
            pieces.append(text[pos:start])
        token = match.group()
        if token == '"':
            end = _string_end(text, start)
            if end < 0:  # an unterminated string: not JSON, kept as it is
                return text, {}
            string = text[start:end]
            pieces.append(_refer(parts, string, string) if end - start >= limit else string)
            pos = end
            continue
        pos = start + 1
        if token in "[{":
            stack.append((start, pieces))
            pieces = [token]
            continue
        if not stack:  # a closing bracket with nothing open: not JSON, kept as it is
            return text, {}
        pieces.append(token)
        body = "".join(pieces)
        opened, pieces = stack.pop()
        pieces.append(_refer(parts, text[opened:pos], body) if len(body) >= limit else body)
    if stack or not parts:
        return text, {}
    total = sum(length for length, _ in parts.values())
    if total > MAX_PARTS_FACTOR * MAX_UNPACKED:
        raise StoreError(
            f"a value whose parts put back {total} characters in all is over the "
            f"{MAX_PARTS_FACTOR * MAX_UNPACKED} a store puts back; nothing was written"
        )
    if pos < len(text):
        pieces.append(text[pos:])
    return "".join(pieces), parts


def _string_end(text: str, start: int) -> int:
    """The index just past the string token opening at `start`; -1 when it never closes."""
    at = start + 1
    while True:
        quote = text.find('"', at)
        if quote < 0:
            return -1
        before = quote - 1
        while text[before] == "\\":  # stops at the opening quote at the latest
            before -= 1
        if (quote - 1 - before) % 2 == 0:  # not escaped
            return quote + 1
        at = quote + 1


def _refer(parts: dict[str, tuple[int, str]], original: str, body: str) -> str:
    hash = digest(original)
    parts[hash] = (len(original), body)
    return MARK + hash


class Unresolved(str):
    """A packed text whose parts could not all be put back; `why` says which and how."""

    why: str

    def __new__(cls, text: str, why: str) -> Unresolved:
        made = super().__new__(cls, text)
        made.why = why
        return made


def references(text: str) -> list[str] | None:
    """The hashes a packed text refers to, in order; None when a reference is malformed."""
    if MARK not in text:
        return []
    found = text.split(MARK)[1:]
    hashes = [f[:64] for f in found]
    if not all(_HASH.fullmatch(h) for h in hashes):
        return None
    return hashes


Fetch = Callable[[list[str]], Mapping[str, object]]
"""Reads stored bodies: the hashes asked for -> each found body (a body that is not text
comes back as what the driver gave, and is reported as unreadable)."""


def unpacked(text: str, fetch: Fetch) -> str:
    """`text` with every part put back, each checked against its hash; `Unresolved` if not.

    `fetch` is asked once per level of nesting, for every hash of that level.
    """
    top = references(text)
    if top is None:
        return Unresolved(text, "holds a malformed reference to a stored value")
    bodies: dict[str, str] = {}
    wanted = list(dict.fromkeys(top))
    while wanted:
        got = fetch(wanted)
        for hash in wanted:
            body = got.get(hash)
            if body is None:
                return Unresolved(text, f"refers to stored value {hash}, which is missing")
            if not isinstance(body, str):
                return Unresolved(text, f"stored value {hash} is not readable text")
            inner = references(body)
            if inner is None:
                return Unresolved(text, f"stored value {hash} holds a malformed reference")
            bodies[hash] = body
        wanted = list(dict.fromkeys(h for h in _inner(bodies, wanted) if h not in bodies))
    order = _innermost_first(top, bodies)
    too_long = _too_long(text, top, order, bodies)
    if too_long is not None:
        return Unresolved(text, too_long)
    whole: dict[str, str] = {}
    # Put the parts back innermost first, without recursion (parts may nest deeply).
    for hash in order:
        if hash in whole:
            continue
        value = _joined(bodies[hash], whole)
        if value is None:
            return Unresolved(text, f"stored value {hash} refers to itself")
        if digest(value) != hash:
            return Unresolved(text, f"stored value {hash} does not match its hash")
        whole[hash] = value
    value = _joined(text, whole)
    assert value is not None  # every hash of `text` is in `whole` by now
    return value


MAX_UNPACKED = 2**30
"""The most characters a stored text is put back to (`pack` refuses a longer one): parts
that nest can name far more than a file holds, and a hostile file would otherwise make a
read build gigabytes before any cap applies (decision 0142)."""

MAX_PARTS_FACTOR = 4
"""The parts a text names put back at most this many times `MAX_UNPACKED` in all: a part
is kept whole while the parts around it are put back, so a chain of parts each within the
bound would otherwise build the bound once per link (decision 0142)."""

_REFERENCE = 1 + 64  # MARK and a hash


def _too_long(text: str, top: list[str], order: list[str], bodies: Mapping[str, str]) -> str | None:
    """Why `text` would put back to more than `MAX_UNPACKED` characters, or None; counted
    from the bodies' lengths, innermost first, before anything is joined."""
    lengths: dict[str, int] = {}
    total, most = 0, MAX_PARTS_FACTOR * MAX_UNPACKED
    for hash in order:
        if hash in lengths:
            continue
        refs = references(bodies[hash]) or []
        if any(ref not in lengths for ref in refs):
            return None  # refers to itself: said where the parts are put back
        size = len(bodies[hash]) - _REFERENCE * len(refs) + sum(lengths[r] for r in refs)
        if size > MAX_UNPACKED:
            return f"stored value {hash} would put back {size} characters, over {MAX_UNPACKED}"
        lengths[hash] = size
        total += size  # every part is put back (and kept) on the way
        if total > most:
            return f"its stored values would put back {total} characters in all, over {most}"
    size = len(text) - _REFERENCE * len(top) + sum(lengths.get(h, 0) for h in top)
    if size > MAX_UNPACKED:
        return f"it would put back {size} characters, over {MAX_UNPACKED}"
    return None


def _inner(bodies: Mapping[str, str], hashes: Iterable[str]) -> Iterable[str]:
    for hash in hashes:
        yield from references(bodies[hash]) or ()


def _innermost_first(top: list[str], bodies: Mapping[str, str]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()
    stack: list[tuple[str, bool]] = [(h, False) for h in reversed(top)]
    while stack:
        hash, children_done = stack.pop()
        if children_done:
            order.append(hash)
            continue
        if hash in seen:
            continue
        seen.add(hash)
        stack.append((hash, True))
        stack.extend((h, False) for h in reversed(references(bodies[hash]) or ()))
    return order


def _joined(text: str, whole: Mapping[str, str]) -> str | None:
    """`text` with each reference replaced by its part's text; None if one is not known yet."""
    if MARK not in text:
        return text
    chunks = text.split(MARK)
    out = [chunks[0]]
    for chunk in chunks[1:]:
        value = whole.get(chunk[:64])
        if value is None:
            return None
        out.append(value)
        out.append(chunk[64:])
    return "".join(out)


def packed(value: object) -> bool:
    """Whether a column's value is a packed text (holds a reference)."""
    return isinstance(value, str) and MARK in value


# --- rows ----------------------------------------------------------------------------------------

CAPPED_PREFIX = "_n_"
"""A capped SELECT names each text column's full length `_n_<column>` (`_codecs.select_list`);
for a packed column it selects the whole (short) packed text and `-cap` as its length, and
the row is cut here, once its parts are back."""


@functools.lru_cache(maxsize=512)
def stored_columns(names: tuple[str, ...]) -> tuple[tuple[int, int | None], ...]:
    """For a result's column names: (index, index of its `_n_` length or None) of each
    column that may be packed."""
    where = {name: i for i, name in enumerate(names)}
    return tuple(
        (i, where.get(CAPPED_PREFIX + name))
        for i, name in enumerate(names)
        if name in STORED_COLUMNS
    )


def unpacked_row(
    values: Sequence[Any], columns: tuple[tuple[int, int | None], ...], fetch: Fetch
) -> list[Any] | None:
    """The row's values with each packed column put back (and cut to the read's cap); None
    when no column is packed (the row is used as it is)."""
    changed: list[Any] | None = None
    for i, length_at in columns:
        value = values[i]
        if not (type(value) is str and MARK in value):
            continue
        if changed is None:
            changed = list(values)
        whole = unpacked(value, fetch)
        changed[i] = whole
        if length_at is not None and not isinstance(whole, Unresolved):
            cap = changed[length_at]
            if isinstance(cap, int) and cap < 0:
                changed[i] = whole[:-cap]
                changed[length_at] = len(whole)
    return changed


_BY_DESCRIPTION: dict[tuple[Any, ...], tuple[tuple[int, int | None], ...]] = {}


def columns_of(description: Sequence[Sequence[Any]] | None) -> tuple[tuple[int, int | None], ...]:
    """`stored_columns` of a cursor's description, remembered by the description's contents
    (the column names: `sqlite3` builds a new description for every statement it runs,
    so each row costs a dictionary look-up of that tuple, hashed and compared in C)."""
    if description is None:
        return ()
    key = tuple(description)
    hit = _BY_DESCRIPTION.get(key)
    if hit is not None:
        return hit
    columns = stored_columns(tuple(str(d[0]) for d in description))
    if len(_BY_DESCRIPTION) >= 256:
        _BY_DESCRIPTION.clear()
    _BY_DESCRIPTION[key] = columns
    return columns
