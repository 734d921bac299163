"""Showing text from models and servers safely, and observers that print events as they commit.

`sanitize(text)` is the one function every human-readable output goes through:
goals, tool names, arguments and results come from models and remote servers, and
a terminal must never be made to lie by them (ANSI escapes that recolour or
erase, right-to-left overrides that reorder, zero-width and tag characters that
hide text). It escapes, never removes, so nothing is hidden either.

The observers (`TextObserver`, `JsonLinesObserver`) take any `Event`; each writes
one whole line per event under a lock, so events delivered from several threads
never interleave mid-line. `event_json` and `json_line` are the JSON shapes the
command and the exporter share.
"""

from __future__ import annotations

import re
import sys
import threading
import unicodedata
from typing import Any, TextIO

from .canonical import to_text
from .clock import format_time
from .records import Event

MAX_COMBINING = 4
"""Combining marks allowed in a row after one base character; later ones are escaped.

Real scripts stack two or three (Vietnamese, Indic, Hebrew points); a longer run
is "zalgo" text that smears over the lines around it.
"""

# Categories that are never shown raw: controls, format characters (bidi
# controls, zero-width characters, tag characters, the soft hyphen...), private
# use, surrogates, unassigned code points, and the line/paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})

# Characters outside those categories that still show as nothing (or as blank
# space a reader cannot tell from a space), or that carry hidden data.
_INVISIBLE = frozenset(
    {
        0x034F,  # combining grapheme joiner
        0x115F,
        0x1160,
        0x3164,
        0xFFA0,  # Hangul fillers
        0x17B4,
        0x17B5,  # Khmer inherent vowels
        0x180B,
        0x180C,
        0x180D,
        0x180F,  # Mongolian free variation selectors
        0x2800,  # braille pattern blank
    }
)
_VARIATION_SELECTORS = ((0xFE00, 0xFE0F), (0xE0100, 0xE01EF))

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN_ASCII = re.compile(r"[\x20-\x7e]*")


def _escape(char: str) -> str:
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _always_escaped(char: str, category: str) -> bool:
    if category in _ESCAPED_CATEGORIES:
        return True
    code = ord(char)
    if code in _INVISIBLE:
        return True
    if category == "Zs":
        # Only the ASCII space is shown as a space: the others (no-break, em,
        # ideographic...) look alike and can disguise text.
        return char != " "
    return any(low <= code <= high for low, high in _VARIATION_SELECTORS)


def sanitize(text: str, *, max_combining: int = MAX_COMBINING) -> str:
    """`text` with every character that could mislead a terminal reader escaped.

    Escaped: control characters (`\\x1b`, `\\n`, `\\t`...), format characters
    (bidi overrides and isolates, zero-width space/joiners, word joiner, BOM,
    tag characters), private-use, surrogate and unassigned code points, line and
    paragraph separators, spaces other than U+0020, variation selectors and
    other characters that render as nothing, and each combining mark after the
    first `max_combining` in a row. Escapes are `\\xNN`, `\\uNNNN` or
    `\\UNNNNNNNN` (`\\n`, `\\r`, `\\t` for those three), so the result is one
    line of visible characters. Backslashes are left alone.
    """
    if _PLAIN_ASCII.fullmatch(text):
        return text
    out: list[str] = []
    marks = 0
    for char in text:
        category = unicodedata.category(char)
        if _always_escaped(char, category):
            out.append(_escape(char))
            marks = 0
        elif category.startswith("M"):
            marks += 1
            out.append(char if marks <= max_combining else _escape(char))
        else:
            out.append(char)
            marks = 0
    return "".join(out)


def display_width(text: str) -> int:
    """Terminal columns `text` takes: wide East Asian characters count 2, combining marks 0.

    Meant for sanitized text (no controls).
    """
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def clip(text: str, width: int, *, ellipsis: str = "…") -> str:
    """`text` cut to at most `width` terminal columns, ending in `ellipsis` when cut."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    room = width - display_width(ellipsis)
    out: list[str] = []
    used = 0
    for char in text:
        w = 0 if unicodedata.combining(char) else display_width(char)
        if used + w > room:
            break
        out.append(char)
        used += w
    return "".join(out) + ellipsis


def ascii_json(text: str) -> str:
    r"""JSON text with every non-ASCII character (and DEL) written as a `\uXXXX` escape.

    Non-ASCII characters occur only inside JSON strings, where the escape means
    the same character; the result is lossless and safe to print to a terminal.
    """
    if text.isascii() and "\x7f" not in text:
        return text
    out: list[str] = []
    for char in text:
        code = ord(char)
        if code < 0x7F:
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    return "".join(out)


def json_line(value: Any) -> str:
    """One line of JSON for `value`: agentrt's stored form (literals kept), ASCII only."""
    return ascii_json(to_text(value))


def event_json(event: Event) -> dict[str, Any]:
    """An event as a JSON object: the stored columns, `at` as stored text."""
    out: dict[str, Any] = {
        "seq": event.seq,
        "run_id": event.run_id,
        "step_id": event.step_id,
        "at": format_time(event.at),
        "type": event.type,
        "payload": event.payload,
        "hash": event.hash,
    }
    if event.decode_error:
        out["decode_error"] = event.decode_error
    return out


def compact(value: Any, limit: int) -> str:
    """A JSON value as one sanitized line of at most about `limit` characters."""
    try:
        text = to_text(value)
    except (ValueError, TypeError):  # not JSON at all: still show something, escaped
        text = repr(value)
    if len(text) > limit:
        text = f"{text[:limit]}… (+{len(text) - limit} chars)"
    return sanitize(text)


TYPE_WIDTH = 19  # the longest event type in the catalogue, step.tool_finished, plus one
ID_WIDTH = 32  # run and step ids are 32 hex characters
DETAIL_LIMIT = 300


def event_text(event: Event, *, show_run: bool = True, detail_limit: int = DETAIL_LIMIT) -> str:
    """One aligned line for an event: seq, time, [run,] step, type, payload."""
    at = format_time(event.at) if event.at is not None else "-"
    parts = [f"{event.seq:>6}", at]
    if show_run:
        parts.append((sanitize(event.run_id) or "-").ljust(ID_WIDTH))
    parts.append((sanitize(event.step_id) or "-").ljust(ID_WIDTH))
    parts.append(sanitize(event.type).ljust(TYPE_WIDTH))
    detail = compact(event.payload, detail_limit)
    if event.decode_error:
        detail = f"{detail} [decode error: {sanitize(event.decode_error)}]"
    parts.append(detail)
    return "  ".join(parts).rstrip()


class TextObserver:
    """Writes each event as one aligned, sanitized line; safe to call from several threads."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        show_run: bool = True,
        detail_limit: int = DETAIL_LIMIT,
        lock: threading.Lock | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.show_run = show_run
        self.detail_limit = detail_limit
        self._lock = lock or threading.Lock()

    def __call__(self, event: Event) -> None:
        line = event_text(event, show_run=self.show_run, detail_limit=self.detail_limit)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class JsonLinesObserver:
    """Writes each event as one JSON line (`event_json`); safe to call from several threads."""

    def __init__(self, stream: TextIO | None = None, *, lock: threading.Lock | None = None):
        self.stream = stream if stream is not None else sys.stdout
        self._lock = lock or threading.Lock()

    def __call__(self, event: Event) -> None:
        line = json_line(event_json(event))
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


__all__ = [
    "ID_WIDTH",
    "MAX_COMBINING",
    "TYPE_WIDTH",
    "JsonLinesObserver",
    "TextObserver",
    "ascii_json",
    "clip",
    "compact",
    "display_width",
    "event_json",
    "event_text",
    "json_line",
    "sanitize",
]
