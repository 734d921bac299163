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
from typing import TYPE_CHECKING, Any, TextIO

from ._canonical import to_text
from ._capped import capped_length, truncated_marker
from ._clock import format_time

if TYPE_CHECKING:  # an annotation only: `agentrt --help` sanitizes without the records
    from ._records import Event

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

# Hangul conjoining jamo. Vowels (V) and trailing consonants (T) are letters (Lo),
# but after a leading consonant (L) or a precomposed syllable they join it and take
# no column; anywhere else a terminal shows them as nothing. So a V or T is shown
# only where it continues a syllable (the grapheme rules: L+V, LV+V, V+V, LV+T,
# LVT+T, V+T, T+T), counts as a combining mark toward `max_combining`, and is
# escaped everywhere else.
_JAMO_L = ((0x1100, 0x115F), (0xA960, 0xA97F))
_JAMO_V = ((0x1160, 0x11A7), (0xD7B0, 0xD7C6))
_JAMO_T = ((0x11A8, 0x11FF), (0xD7CB, 0xD7FB))
_SYLLABLES = (0xAC00, 0xD7A3)
_V_FOLLOWS = frozenset({"L", "V", "LV"})
_T_FOLLOWS = frozenset({"V", "T", "LV", "LVT"})

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


def _in(code: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= code <= high for low, high in ranges)


def _jamo(code: int) -> str:
    """The Hangul syllable type of a code point: L, V, T, LV, LVT, or '' for none."""
    if code < 0x1100:
        return ""
    if _in(code, _JAMO_L):
        return "L"
    if _in(code, _JAMO_V):
        return "V"
    if _in(code, _JAMO_T):
        return "T"
    if _SYLLABLES[0] <= code <= _SYLLABLES[1]:
        return "LV" if (code - _SYLLABLES[0]) % 28 == 0 else "LVT"
    return ""


def _zero_width_jamo(char: str) -> bool:
    code = ord(char)
    return _in(code, _JAMO_V) or _in(code, _JAMO_T)


def sanitize(text: str, *, max_combining: int = MAX_COMBINING) -> str:
    """`text` with every character that could mislead a terminal reader escaped.

    Escaped: control characters (`\\x1b`, `\\n`, `\\t`...), format characters
    (bidi overrides and isolates, zero-width space/joiners, word joiner, BOM,
    tag characters), private-use, surrogate and unassigned code points, line and
    paragraph separators, spaces other than U+0020, variation selectors and
    other characters that render as nothing, Hangul vowel and trailing jamo that
    do not continue a syllable, and each combining mark (or continuing jamo)
    after the first `max_combining` in a row. Escapes are `\\xNN`, `\\uNNNN` or
    `\\UNNNNNNNN` (`\\n`, `\\r`, `\\t` for those three), so the result is one
    line of visible characters. Backslashes are left alone.
    """
    if _PLAIN_ASCII.fullmatch(text):
        return text
    out: list[str] = []
    marks = 0
    syllable = ""  # the Hangul syllable type of the last character shown, if any
    for char in text:
        category = unicodedata.category(char)
        if _always_escaped(char, category):
            out.append(_escape(char))
            marks = 0
            syllable = ""
            continue
        jamo = _jamo(ord(char))
        if jamo in ("V", "T"):
            follows = _V_FOLLOWS if jamo == "V" else _T_FOLLOWS
            marks += 1
            if syllable in follows and marks <= max_combining:
                out.append(char)
                syllable = jamo
            else:
                out.append(_escape(char))
                syllable = ""
        elif category.startswith("M"):
            marks += 1
            out.append(char if marks <= max_combining else _escape(char))
            syllable = ""
        else:
            out.append(char)
            marks = 0
            syllable = jamo
    return "".join(out)


def capped_note(text: str) -> str:
    """For text a read cut at its cap: `' … (70,117 chars; the first 65,536 read)'`; else `''`.

    Appended to the shown text, it says that the value goes on and that the rest
    was not read, so a head is never taken for the whole value.
    """
    length = capped_length(text)
    if length is None:
        return ""
    return f" … ({length:,} chars; the first {len(text):,} read)"


def text_json(text: str) -> Any:
    """A text field for JSON output: itself, or for text a read cut at its cap the marker
    `{"truncated": true, "length": n, "head": "..."}` that a capped JSON value reads as."""
    length = capped_length(text)
    return str(text) if length is None else truncated_marker(length, str(text))


def shown(text: str) -> str:
    """`sanitize(text)`, followed by `capped_note(text)` when a read cut it at its cap."""
    return sanitize(text) + capped_note(text)


def display_width(text: str) -> int:
    """Terminal columns `text` takes: wide East Asian characters count 2, combining marks 0.

    Meant for sanitized text (no controls).
    """
    if text.isascii():
        return len(text)
    return sum(_char_width(char) for char in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or _zero_width_jamo(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


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
        w = _char_width(char)
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
        "run_id": text_json(event.run_id),
        "step_id": text_json(event.step_id),
        "at": format_time(event.at),
        "type": text_json(event.type),
        "payload": event.payload,
        "hash": text_json(event.hash),
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
        parts.append((shown(event.run_id) or "-").ljust(ID_WIDTH))
    parts.append((shown(event.step_id) or "-").ljust(ID_WIDTH))
    parts.append(shown(event.type).ljust(TYPE_WIDTH))
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
    "capped_note",
    "clip",
    "compact",
    "display_width",
    "event_json",
    "event_text",
    "json_line",
    "sanitize",
    "shown",
    "text_json",
]
