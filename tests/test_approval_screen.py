"""What a person reads before deciding (`agentrt._render_approval`, decision 0057).

The summary comes first: the tool, each argument once as its exact JSON literal,
why a person is asked, what approving and rejecting do, and a warning when the
capability or the presentation names other arguments or another tool than the
request runs. The full hashed view follows; a nanosecond duration shows its unit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentrt._approval import approval_hash, decided_words
from agentrt._canonical import to_text
from agentrt._records import Approval
from agentrt._render_approval import (
    ARGS_SHOWN,
    approval_lines,
    compact_value,
    hashed_rows,
    human_ns,
    summary,
)

AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def approval(
    args: Any,
    *,
    kind: str = "remote_mutation",
    capability: Any = None,
    presentation: Any = None,
    tool: str = "send",
    timeout_ns: int = 60_000_000_000,
) -> Approval:
    request = {
        "run_id": "r1",
        "step_id": "s1",
        "spec": {
            "name": tool,
            "description": "",
            "input_schema": {"type": "object"},
            "side_effect": "remote_mutation",
            "timeout": timeout_ns,
        },
        "args": args,
    }
    capability = {"tool": tool, "args": args} if capability is None else capability
    presentation = {"tool": tool, "args": args} if presentation is None else presentation
    return Approval(
        id="a1",
        run_id="r1",
        step_id="s1",
        kind=kind,
        capability=capability,
        presentation=presentation,
        request=request,
        hash=approval_hash(kind, capability, presentation, request),
        status="pending",
        created_at=AT,
        expires_at=None,
        decided_at=None,
    )


@pytest.mark.parametrize(
    ("ns", "shown"),
    [
        (0, "0 ns"),
        (999, "999 ns"),
        (1_500, "1.5 µs"),
        (250_000_000, "250 ms"),
        (5_000_000_000, "5 s"),
        (60_000_000_000, "60 s"),
        (90_500_000_000, "90.5 s"),
        (300_000_000_000, "5 min"),
        (3_660_000_000_000, "1 h 1 min"),
        (90_061_000_000_000, "1 d 1 h 1 min 1 s"),
    ],
)
def test_a_nanosecond_duration_reads_in_human_units(ns: int, shown: str) -> None:
    assert human_ns(ns) == shown


def test_the_hashed_timeout_shows_its_unit_beside_the_exact_integer() -> None:
    rows = dict(hashed_rows(approval({"to": "bob"})))
    assert rows["request.spec.timeout"] == "60000000000 (60 s)"
    # Only the field the runtime writes in nanoseconds: a capability's own "timeout" is as given.
    other = dict(hashed_rows(approval({"timeout": 60_000_000_000})))
    assert other["request.args.timeout"] == "60000000000"


def test_each_argument_is_listed_once_as_its_exact_json_literal_in_hash_order() -> None:
    args = {"to": "bob", "n": 1.5, "ok": True, "nested": {"b": [1, 2], "a": None}, "z": "\u202e"}
    s = summary(approval(args), "because")
    assert s.args == (
        ("n", "1.5"),
        ("nested", to_text(args["nested"])),
        ("ok", "true"),
        ("to", '"bob"'),
        ("z", '"\\u202e"'),
    )
    assert s.args[1][1] == '{"a":null,"b":[1,2]}'
    assert s.mismatches == ()
    lines = approval_lines(approval(args), "because", verb="approve", full=False)
    assert sum(line.count('"bob"') for line in lines) == 1  # the arguments appear once


def test_a_long_object_argument_shows_head_tail_and_its_size() -> None:
    big = {f"k{i:03d}": i for i in range(100)}
    shown = compact_value(big)
    literal = to_text(big)
    assert shown == (
        f"{literal[:80]} … {len(literal) - 160:,} chars not shown; object, 100 keys … "
        f"{literal[-80:]}"
    )


def test_more_arguments_than_the_summary_lists_are_counted() -> None:
    args = {f"a{i:02d}": i for i in range(ARGS_SHOWN + 3)}
    s = summary(approval(args), "")
    assert len(s.args) == ARGS_SHOWN and s.args_more == 3
    lines = approval_lines(approval(args), "", verb="approve", full=False)
    assert "    …    and 3 more (every one: the full view)" in lines


def test_a_presentation_or_capability_naming_other_arguments_or_tool_is_flagged() -> None:
    a = approval(
        {"to": "mallory"},
        presentation={"tool": "send", "args": {"to": "bob"}},
        capability={"tool": "lookup", "args": {"to": "mallory"}},
    )
    s = summary(a, "")
    assert s.mismatches == (
        'capability.tool names "lookup", but the request calls "send": read the full view '
        "before deciding",
        "presentation.args differs from the arguments the tool is called with (request.args): "
        "read both in the full view before deciding",
    )
    lines = approval_lines(a, "", verb="approve", full=False)
    assert [x for x in lines if x.startswith("WARNING: ")] == [
        f"WARNING: {m}" for m in s.mismatches
    ]


def test_arguments_equal_in_python_but_not_as_hashed_json_are_flagged() -> None:
    # 1 == 1.0 == True in Python; the hash tells them apart, and so must the warning.
    for shown in ({"n": True}, {"n": 1.0}):
        a = approval({"n": 1}, presentation={"tool": "send", "args": shown})
        assert summary(a, "").mismatches == (
            "presentation.args differs from the arguments the tool is called with "
            "(request.args): read both in the full view before deciding",
        )
    assert summary(approval({"n": 1}), "").mismatches == ()


def test_what_approving_and_rejecting_do_depends_on_the_kind() -> None:
    plain = summary(approval({"to": "bob"}), "")
    assert plain.approving == (
        "lets the run call send once with exactly these arguments, when the program that owns "
        "the run resumes it"
    )
    assert plain.rejecting == "cancels the run; send is not called"
    crashed = summary(approval({"to": "bob"}, kind="interrupted_side_effect"), "")
    assert crashed.interrupted
    assert crashed.approving.startswith("runs send once more with these arguments")
    assert crashed.rejecting == "ends the run (cancelled) without calling it again"


def test_arguments_that_are_not_an_object_are_shown_as_their_literal() -> None:
    assert summary(approval([1, 2]), "").args_note == "[1,2]"
    assert summary(approval({}), "").args_note == "(none)"


def test_the_full_view_follows_the_summary_and_keeps_every_field() -> None:
    a = approval({"to": "bob"})
    lines = approval_lines(a, "r", verb="approve")
    heading = lines.index("What you approve, one field a line, exactly as the hash covers it:")
    assert lines.index(f"  hash       {a.hash}") < heading
    rows = hashed_rows(a)
    shown = lines[heading + 1 : -1]
    assert len(shown) == len(rows)
    for line, (path, value) in zip(shown, rows, strict=True):
        assert line.startswith(f"  {path} ") and line.endswith(f"  {value}")
    assert lines[-1] == f"hash  {a.hash}"
    short = approval_lines(a, "r", verb="approve", full=False, more="see --full")
    assert short[-2:] == ["", "see --full"] and heading >= len(short) - 2


def test_who_decided_how_and_when_is_said_with_the_note_escaped_and_cut() -> None:
    decided = Approval(
        **{
            **approval({"to": "bob"}).__dict__,
            "status": "approved",
            "decided_by": "ann",
            "decided_at": AT,
            "note": "line one\nline two" + "x" * 300,
        }
    )
    words = decided_words(decided)
    assert words.startswith(
        'approved by ann at 2026-11-30T09:00:00.000000Z (note: "line one\\nline two'
    )
    assert words.endswith('x"…)')
    assert len(words) < 300
