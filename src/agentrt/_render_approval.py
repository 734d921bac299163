"""How an approval request is shown to a person, the same wherever it is shown.

The command line (`agentrt approve`), the local approver (`approver.Local`),
the web console and the demo all show a waiting request through this module,
so what a person reads before deciding is the same text in every channel.

Invariants it keeps: every field of the object the approval hash covers is
shown (`approval_fields` over `hashed_content`), in the order it is hashed,
never one left out; strings are JSON literals with their length, long ones as
head and tail (text a read cut at its cap says how much was read); long keys
keep a hash of the whole key, so two keys differing only in the middle never
print the same path; every text from the database passes `trace.sanitize`
before it is returned. It only renders: it reads nothing and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ._canonical import to_text
from ._clock import format_time
from ._db import capped_length
from ._records import JSON, Approval
from .trace import capped_note, display_width, sanitize
from .view import approval_tool

LONG_STRING = 200
"""Strings longer than this are shown in an approval as head and tail."""
HEAD_TAIL = 80
LONG_KEY = 64
"""Keys longer than this are shown in a field path as head, tail, length and hash."""
KEY_HASH = 12
"""Hex digits of a long key's SHA-256 shown in its path."""

INTERRUPTED_KIND = "interrupted_side_effect"

INTERRUPTED_NOTICE = (
    "NOTICE: this call had started when the process running it stopped, before its "
    "outcome was recorded, so whether it took effect is unknown. Approving runs it once "
    "more; rejecting ends the run without calling it again."
)


def json_literal(value: JSON) -> str:
    """A value as its JSON text; something that is not JSON still shows (escape it after)."""
    try:
        return to_text(value)
    except (ValueError, TypeError):  # not JSON: still show something, escaped by the caller
        return repr(value)


def quoted(text: str) -> str:
    """A string as a JSON literal, then sanitized: quotes and escapes make every character exact."""
    return sanitize(json.dumps(text, ensure_ascii=False))


def number(n: int) -> str:
    return f"{n:,}"


def time_cell(value: Any) -> str:
    return format_time(value) if value is not None else "-"


def head_tail(text: str, limit: int = LONG_STRING, keep: int = HEAD_TAIL) -> str:
    """A long string as quoted head and tail with the count of characters not shown.

    Text a read cut at its cap has no tail to show: its head, and how long it is
    and how much of it was read (`(70,117 chars; the first 65,536 read, 80 shown)`).
    """
    full = capped_length(text)
    if full is not None:
        if len(text) <= keep:
            return quoted(str(text)) + capped_note(text)
        return (
            f"{quoted(text[:keep])} … ({number(full)} chars; the first {number(len(text))} "
            f"read, {number(keep)} shown)"
        )
    if len(text) <= limit:
        return quoted(text)
    hidden = len(text) - 2 * keep
    return f"{quoted(text[:keep])} … {number(hidden)} chars not shown … {quoted(text[-keep:])}"


def long_text(text: str, limit: int, keep: int) -> str:
    """Text as itself (escaped) when short and whole, else as `head_tail` shows it."""
    if len(text) <= limit and capped_length(text) is None:
        return sanitize(text)
    return head_tail(text, limit, keep)


def _path_key(key: str) -> str:
    """A key in a field path; a long one as head, tail, length and a hash of the whole key,
    so that two keys differing only in the middle never print the same path."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f".{key}"
    if len(key) > LONG_KEY:
        half = LONG_KEY // 2
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_HASH]
        return (
            f"[{quoted(key[:half])}…{quoted(key[-half:])} "
            f"({number(len(key))} chars, sha256 {digest})]"
        )
    return f"[{quoted(key)}]"


def approval_fields(value: JSON, path: str = "") -> Iterator[tuple[str, str]]:
    """`(path, shown value)` for every node of a JSON value, in the order it is hashed.

    Objects and lists get a line with their size, then a line per member; strings
    are JSON literals with their length, long ones as head and tail; numbers are
    their exact literal.
    """
    if isinstance(value, dict):
        yield path, f"{{…}} (object, {number(len(value))} {'key' if len(value) == 1 else 'keys'})"
        for key in sorted(value):
            yield from approval_fields(value[key], f"{path}{_path_key(key)}")
    elif isinstance(value, list):
        count = len(value)
        yield path, f"[…] (list, {number(count)} {'item' if count == 1 else 'items'})"
        for i, item in enumerate(value):
            yield from approval_fields(item, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, f"{head_tail(value)} (string, {number(len(value))} chars)"
    else:
        yield path, sanitize(json_literal(value))


def hashed_content(approval: Approval) -> dict[str, JSON]:
    """The object the approval hash covers, exactly as `approval_hash` builds it."""
    return {
        "kind": approval.kind,
        "capability": {} if approval.capability is None else approval.capability,
        "presentation": {} if approval.presentation is None else approval.presentation,
        "request": approval.request,
    }


def field_lines(fields: Sequence[tuple[str, str]], indent: str = "") -> list[str]:
    """`key  value` lines, the keys padded to one width. Values must be sanitized already."""
    width = max(display_width(k) for k, _ in fields)
    return [f"{indent}{key.ljust(width)}  {value}".rstrip() for key, value in fields]


def approval_lines(approval: Approval, reason: str, *, verb: str) -> list[str]:
    """The whole request, one field a line, then the hash the decision will be bound to."""
    lines = [f"Run {sanitize(approval.run_id)} waits for approval {sanitize(approval.id)}."]
    lines += field_lines(
        [
            ("kind", sanitize(approval.kind)),
            ("tool", sanitize(approval_tool(approval)) or "-"),
            ("reason", head_tail(reason, 400, 180) if reason else "-"),
            ("created", time_cell(approval.created_at)),
            ("expires", time_cell(approval.expires_at) if approval.expires_at else "never"),
        ],
        indent="  ",
    )
    if approval.kind == INTERRUPTED_KIND:
        lines += ["", INTERRUPTED_NOTICE]
    lines += ["", f"What you {verb}, one field a line, exactly as the hash covers it:"]
    # The first node is the hashed object itself; its members are the fields.
    rows = [(path.lstrip("."), value) for path, value in approval_fields(hashed_content(approval))]
    rows = rows[1:]
    width = min(max((display_width(p) for p, _ in rows), default=0), 48)
    lines += [f"  {path.ljust(width)}  {value}" for path, value in rows]
    lines.append(f"hash  {sanitize(approval.hash)}")
    return lines


__all__ = [
    "HEAD_TAIL",
    "INTERRUPTED_KIND",
    "INTERRUPTED_NOTICE",
    "LONG_STRING",
    "approval_fields",
    "approval_lines",
    "field_lines",
    "hashed_content",
    "head_tail",
    "json_literal",
    "long_text",
    "number",
    "quoted",
    "time_cell",
]
