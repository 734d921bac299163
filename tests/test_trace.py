"""agentrt.trace: sanitize, display widths, the JSON line shape, and the two observers."""

from __future__ import annotations

import io
import json
import threading
import time
import unicodedata
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt._canonical import JSONFloat, from_text, to_text
from agentrt._capped import CappedText
from agentrt._records import Event
from agentrt.trace import (
    JsonLinesObserver,
    TextObserver,
    ascii_json,
    capped_note,
    clip,
    display_width,
    event_json,
    event_text,
    json_line,
    sanitize,
    shown,
    text_json,
)

AT = datetime(2026, 11, 30, 9, 0, 0, 1000, tzinfo=UTC)
RUN = "a" * 32
STEP = "b" * 32


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text: ok!", "plain text: ok!"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),  # ANSI colour
        ("\x1b]8;;http://evil\x07link", "\\x1b]8;;http://evil\\x07link"),  # OSC hyperlink
        ("a\x9bb", "a\\x9bb"),  # C1 control sequence introducer
        ("line1\nline2\r\tx", "line1\\nline2\\r\\tx"),
        ("pay \u202eredro\u202c", "pay \\u202eredro\\u202c"),  # right-to-left override
        ("\u2066isolate\u2069", "\\u2066isolate\\u2069"),
        ("\u200fmark\u200e", "\\u200fmark\\u200e"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("join\u200dner\u200c", "join\\u200dner\\u200c"),
        ("word\u2060joiner\ufeff", "word\\u2060joiner\\ufeff"),
        ("soft\u00adhyphen", "soft\\xadhyphen"),
        ("tag\U000e0041\U000e007f", "tag\\U000e0041\\U000e007f"),  # invisible tag characters
        ("\u2764\ufe0f", "\u2764\\ufe0f"),  # a variation selector can carry hidden bytes
        ("x\U000e0100", "x\\U000e0100"),
        ("private\ue000", "private\\ue000"),
        ("unassigned\U000effff", "unassigned\\U000effff"),
        ("para\u2029line\u2028", "para\\u2029line\\u2028"),
        ("no\u00a0break\u3000wide", "no\\xa0break\\u3000wide"),
        ("\u3164filler\u115f", "\\u3164filler\\u115f"),
        ("blank\u2800", "blank\\u2800"),
        ("cgj\u034f", "cgj\\u034f"),
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        ("café naïve 東京 🙂 שלום", "café naïve 東京 🙂 שלום"),
        ("e\u0301\u0302\u0303\u0304", "e\u0301\u0302\u0303\u0304"),  # four marks are kept
        ("e\u0301\u0302\u0303\u0304\u0305\u0306", "e\u0301\u0302\u0303\u0304\\u0305\\u0306"),
        ("a\u0301b\u0301", "a\u0301b\u0301"),  # the count restarts at each base character
        ("back\\slash", "back\\slash"),
        # Hangul vowel and trailing jamo take no column: shown only inside a syllable.
        ("bob\u11a8\u11a8\u11a8\u11a8\u11a8@x", "bob" + "\\u11a8" * 5 + "@x"),
        ("x\ud7b0\ud7cb y", "x\\ud7b0\\ud7cb y"),
        ("\u1100\u1161\u11a8", "\u1100\u1161\u11a8"),  # L V T: one syllable
        ("\ua960\ud7b0\ud7cb", "\ua960\ud7b0\ud7cb"),  # the extended blocks alike
        ("\uac00\u11a8 \uac01\u11a8", "\uac00\u11a8 \uac01\u11a8"),  # after LV and LVT
        ("\uac01\u1161", "\uac01\\u1161"),  # no vowel after a syllable that has its final
        ("\u1100" + "\u1161" * 6, "\u1100" + "\u1161" * 4 + "\\u1161" * 2),  # the run cap
        ("\u1100e\u0301\u1161", "\u1100e\u0301\\u1161"),  # a base letter ends the syllable
    ],
)
def test_sanitize_escapes_what_could_mislead_a_reader(raw: str, shown: str) -> None:
    assert sanitize(raw) == shown


def test_sanitize_combining_limit_is_configurable() -> None:
    assert sanitize("o\u0308\u0308", max_combining=1) == "o\u0308\\u0308"


_HIDDEN = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}


@given(st.text(alphabet=st.characters(codec=None), max_size=60))
def test_sanitize_output_is_one_line_of_visible_characters(text: str) -> None:
    shown = sanitize(text)
    assert "\n" not in shown and "\r" not in shown
    marks = 0
    for char in shown:
        category = unicodedata.category(char)
        assert category not in _HIDDEN, (text, shown)
        assert category != "Zs" or char == " "
        marks = marks + 1 if category.startswith("M") else 0
        assert marks <= 4
    assert sanitize(shown) == shown  # escapes are plain ASCII: escaping twice changes nothing


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_ascii_json_is_lossless_and_ascii(text: str) -> None:
    value = {"k": text, "n": [1, 2.5]}
    line = ascii_json(to_text(value))
    assert line.isascii()
    assert json.loads(line) == value


def test_json_line_keeps_number_literals() -> None:
    value = from_text('{"a":1.0,"b":1e1,"c":-0,"d":"é"}')
    assert json_line(value) == '{"a":1.0,"b":1e1,"c":-0,"d":"\\u00e9"}'
    assert isinstance(value["b"], JSONFloat)


def test_display_width_and_clip_count_terminal_columns() -> None:
    assert display_width("abc") == 3
    assert display_width("東京") == 4
    assert display_width("e\u0301") == 1
    assert clip("abcdef", 4) == "abc…"
    assert clip("東京都", 5) == "東京…"
    assert clip("short", 10) == "short"
    assert display_width("\u1100\u1161\u11a8") == 2  # a syllable of conjoining jamo
    assert clip("\u1100\u1161\u11a8\u1100\u1161", 3) == "\u1100\u1161\u11a8…"


def test_text_a_read_cut_at_its_cap_says_so_in_text_and_json() -> None:
    capped = CappedText("t" * 10, 70_117)
    event = Event(seq=1, run_id=RUN, step_id=STEP, at=AT, type=capped, payload=None, hash="h")
    assert "t" * 10 + " … (70,117 chars; the first 10 read)" in event_text(event)
    assert event_json(event)["type"] == {"truncated": True, "length": 70_117, "head": "t" * 10}
    assert shown(capped) == "t" * 10 + capped_note(capped)
    assert (capped_note("whole"), shown("whole"), text_json("whole")) == ("", "whole", "whole")


def _event(seq: int, payload: object = None, step: str = STEP, type: str = "step.started") -> Event:
    return Event(seq=seq, run_id=RUN, step_id=step, at=AT, type=type, payload=payload, hash="h")


def test_event_text_is_one_aligned_sanitized_line() -> None:
    line = event_text(_event(7, {"goal": "\x1b[2J\u202e"}, step=""), show_run=False)
    assert line == (
        "     7  2026-11-30T09:00:00.001000Z  " + "-".ljust(32) + "  " + "step.started".ljust(19)
        + '  {"goal":"\\u001b[2J\\u202e"}'
    )  # fmt: skip
    with_run = event_text(_event(8, {}), show_run=True)
    assert with_run.split() == ["8", "2026-11-30T09:00:00.001000Z", RUN, STEP, "step.started", "{}"]


def test_event_text_caps_a_long_payload() -> None:
    line = event_text(_event(1, {"x": "y" * 1000}), detail_limit=20)
    # 1,008 characters of JSON: the first 20 are kept, the count says how many are not.
    assert line.endswith('{"x":"' + "y" * 14 + "… (+988 chars)")


def test_event_json_shape() -> None:
    event = _event(3, {"index": 0})
    assert event_json(event) == {
        "seq": 3,
        "run_id": RUN,
        "step_id": STEP,
        "at": "2026-11-30T09:00:00.001000Z",
        "type": "step.started",
        "payload": {"index": 0},
        "hash": "h",
    }


class _SlowStream(io.StringIO):
    """Writes in two halves with a thread switch between: unlocked writers would interleave."""

    def write(self, text: str) -> int:
        half = len(text) // 2
        super().write(text[:half])
        time.sleep(0.0001)
        super().write(text[half:])
        return len(text)


@pytest.mark.parametrize("kind", ["text", "json"])
def test_observers_write_whole_lines_under_concurrent_events(kind: str) -> None:
    stream = _SlowStream()
    observer = TextObserver(stream) if kind == "text" else JsonLinesObserver(stream)
    threads = 6
    per_thread = 40

    def emit(t: int) -> None:
        for i in range(per_thread):
            observer(_event(t * 1000 + i, {"thread": t, "i": i}))

    workers = [threading.Thread(target=emit, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == threads * per_thread
    if kind == "json":
        seen = sorted(json.loads(line)["seq"] for line in lines)
    else:
        seen = sorted(int(line.split()[0]) for line in lines)
        assert all(line.rstrip().endswith("}") for line in lines)
    assert seen == sorted(t * 1000 + i for t in range(threads) for i in range(per_thread))
