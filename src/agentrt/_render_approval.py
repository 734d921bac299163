"""How an approval request is shown to a person, the same wherever it is shown.

The command line (`agentrt approve`), the local approver (`approver.Local`),
the web console and the demo all show a waiting request through this module,
so what a person reads before deciding is the same text in every channel.

First what a person decides on (`summary`, decision 0057): the tool, the
arguments it will be called with (each value its exact JSON literal, as it is
hashed), why a person is asked, what approving and rejecting do, and a warning
when the capability or the presentation names other arguments or another tool
than the request runs. Then the full hashed view (`hashed_rows`): the console
folds it under the buttons, the command line prints it with `--full`. What the
full view shows in part (a long string's middle, a long key's) is also shown
whole, once (`whole_values`): folded above the buttons on the console, after the
fields with `--full`, as `whole` in the webhook's answer; a person can read every
character of what they approve before deciding.

Invariants it keeps: every field of the object the approval hash covers is
shown in the full view (`approval_fields` over `hashed_content`), in the order
it is hashed, never one left out; a duration the runtime hashes as integer
nanoseconds (`request.spec.timeout`) shows its unit beside the integer;
strings are JSON literals with their length, long ones as head and tail (text
a read cut at its cap says how much was read); long keys keep a hash of the
whole key, so two keys differing only in the middle never print the same path;
a key holding anything outside ASCII is shown with JSON's `\\uXXXX` escapes, so
two names that print alike (a Latin o and a Cyrillic о) never read the same,
and the summary warns about such argument names; every text from the database
passes `trace.sanitize` before it is returned. It only renders: it reads
nothing and writes nothing.

What is shown stays proportionate to the request: every row is bounded, so the
full view grows with the number of nodes, never with their depth times their
number. A path longer than `LONG_PATH` is shown as its first keys, how many
keys are left out, its last keys (the node's own key always whole) and a hash
of the whole path; every key left out is the last key of its own row above.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._canonical import to_text
from ._capped import capped_length
from ._clock import format_time
from ._policy import INTERRUPTED_NOTICE as CRASH_NOTICE
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
LONG_PATH = 120
"""Field paths longer than this are shown as first keys, a count, last keys and a hash."""
PATH_HEAD = 40
PATH_TAIL = 60

INTERRUPTED_KIND = "interrupted_side_effect"

INTERRUPTED_NOTICE = (
    "NOTICE: this call had started when the process running it stopped, before its "
    "outcome was recorded, so whether it took effect is unknown. Approving runs it once "
    "more; rejecting ends the run without calling it again."
)
NOTICE_LIMIT = 600
"""A notice longer than this is shown as head and tail."""


def interrupted_notice(approval: Approval) -> str:
    """What happened to an `interrupted_side_effect` call, as the hashed presentation says.

    A crash, a tool's `OutcomeUnknown` (decision 0054), the proxy's timeout hold
    (decision 0047) and a tool's reconciliation (decision 0067) each write their own
    notice into the presentation; the screens show that one, never a fixed text that
    may not be what happened. A presentation without a usable notice (a consumer's
    own pause) and the crash's own notice show the crash notice below; "" for any
    other kind. Sanitized.
    """
    if approval.kind != INTERRUPTED_KIND:
        return ""
    shown = approval.presentation if isinstance(approval.presentation, dict) else {}
    notice = shown.get("notice")
    if isinstance(notice, str) and notice.strip() and notice != CRASH_NOTICE:
        return "NOTICE: " + long_text(notice.strip(), NOTICE_LIMIT, 280)
    return INTERRUPTED_NOTICE


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


def _key_literal(key: str) -> str:
    """A key as a JSON literal: anything outside ASCII as `\\uXXXX`, so look-alikes differ."""
    return sanitize(json.dumps(key, ensure_ascii=True))


def _path_key(key: str) -> str:
    """A key in a field path; a long one as head, tail, length and a hash of the whole key,
    so that two keys differing only in the middle never print the same path."""
    if len(key) <= LONG_KEY and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f".{key}"
    if len(key) > LONG_KEY:
        half = LONG_KEY // 2
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_HASH]
        return (
            f"[{_key_literal(key[:half])}…{_key_literal(key[-half:])} "
            f"({number(len(key))} chars, sha256 {digest})]"
        )
    return f"[{_key_literal(key)}]"


class _Path:
    """A field path as its keys, with a running hash of the whole, so that a deep node's
    path is shown bounded (`shown`) without building the whole text for every row."""

    __slots__ = ("_digest", "keys", "length")

    def __init__(self, keys: tuple[str, ...], length: int, digest: hashlib._Hash) -> None:
        self.keys = keys
        self.length = length
        self._digest = digest

    @classmethod
    def root(cls, path: str) -> _Path:
        return cls((path,) if path else (), len(path), hashlib.sha256(path.encode("utf-8")))

    def child(self, key: str) -> _Path:
        digest = self._digest.copy()
        digest.update(key.encode("utf-8"))
        return _Path((*self.keys, key), self.length + len(key), digest)

    def shown(self) -> str:
        """The path whole when short; else first keys, a count, last keys, the whole's hash."""
        keys = self.keys
        if self.length <= LONG_PATH:
            return "".join(keys)
        last = len(keys) - 1
        tail, size = last, len(keys[last])  # the node's own key, always whole
        while tail > 1 and size + len(keys[tail - 1]) <= PATH_TAIL:
            tail -= 1
            size += len(keys[tail])
        head, size = 1, len(keys[0])
        while head < tail and size + len(keys[head]) <= PATH_HEAD:
            size += len(keys[head])
            head += 1
        if head >= tail:
            return "".join(keys)
        digest = self._digest.hexdigest()[:KEY_HASH]
        left_out = tail - head
        return (
            f"{''.join(keys[:head])}…({number(left_out)} {'key' if left_out == 1 else 'keys'})…"
            f"{''.join(keys[tail:])} (path sha256 {digest})"
        )


def approval_fields(value: JSON, path: str = "") -> Iterator[tuple[str, str]]:
    """`(path, shown value)` for every node of a JSON value, in the order it is hashed.

    Objects and lists get a line with their size, then a line per member; strings
    are JSON literals with their length, long ones as head and tail; numbers are
    their exact literal. A long path is shown bounded (the module docstring).
    """
    return _fields(value, _Path.root(path))


def _fields(value: JSON, path: _Path) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        size = f"{number(len(value))} {'key' if len(value) == 1 else 'keys'}"
        yield path.shown(), f"{{…}} (object, {size})"
        for key in sorted(value):
            yield from _fields(value[key], path.child(_path_key(key)))
    elif isinstance(value, list):
        count = len(value)
        yield path.shown(), f"[…] (list, {number(count)} {'item' if count == 1 else 'items'})"
        for i, item in enumerate(value):
            yield from _fields(item, path.child(f"[{i}]"))
    elif isinstance(value, str):
        yield path.shown(), f"{head_tail(value)} (string, {number(len(value))} chars)"
    else:
        yield path.shown(), sanitize(json_literal(value))


@dataclass(frozen=True)
class Whole:
    """A value the full view shows only in part (`head_tail`, `_path_key`), shown whole.

    `path` is the row of the full view it completes (`hashed_rows`), `what` is
    `"string"` (the node's value) or `"key"` (the last key of the node's path),
    `value` its exact JSON literal, sanitized (a key with `\\uXXXX` escapes
    outside ASCII, as the paths show keys), and `size` its length in characters.
    `same_as` names the earlier path whose value is the very same literal (the
    default policy copies the arguments into the capability and the
    presentation): the screens print such a value once, the JSON every time.
    """

    path: str
    what: str
    value: str
    size: int
    same_as: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "what": self.what,
            "value": self.value,
            "size": self.size,
            "same_as": self.same_as or None,
        }


def whole_values(approval: Approval) -> list[Whole]:
    """Every string and key of the hashed object that the full view shows only in part,
    whole, once each, in the order it is hashed (decision 0156).

    The full view stays proportionate (decision 0149): a string longer than
    `LONG_STRING` is its head and tail there, a key longer than `LONG_KEY` its
    head, tail and hash. What a person approves must still be readable whole
    before they decide: these are the middles those rows leave out. Each value is
    shown once, with its row's bounded path, so what is shown grows with the
    request's size, never with its depth. Text a read cut at its cap has no whole
    to show (its row says how much was read); a read for deciding is uncapped.
    """
    found: list[Whole] = []
    _wholes(hashed_content(approval), _Path.root(""), found)
    first: dict[tuple[str, str], str] = {}
    out = []
    for w in found:
        path = w.path.lstrip(".")
        seen = first.setdefault((w.what, w.value), path)
        out.append(Whole(path, w.what, w.value, w.size, "" if seen == path else seen))
    return out


def _wholes(value: JSON, path: _Path, found: list[Whole]) -> None:
    # Iterative over a stack: the hashed object may nest as deep as the record allows.
    # Each entry carries the long key its node is reached by, listed when the node is.
    stack: list[tuple[JSON, _Path, str | None]] = [(value, path, None)]
    while stack:
        node, at, key = stack.pop()
        if key is not None:
            found.append(Whole(at.shown(), "key", _key_literal(key), len(key)))
        if isinstance(node, dict):
            stack.extend(
                (node[k], at.child(_path_key(k)), k if len(k) > LONG_KEY else None)
                for k in sorted(node, reverse=True)
            )
        elif isinstance(node, list):
            stack.extend((node[i], at.child(f"[{i}]"), None) for i in reversed(range(len(node))))
        elif isinstance(node, str) and len(node) > LONG_STRING and capped_length(node) is None:
            found.append(Whole(at.shown(), "string", quoted(node), len(node)))


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


# --- durations ------------------------------------------------------------------------------

NANOSECOND_FIELDS = frozenset({"request.spec.timeout"})
"""Paths of the hashed object the runtime writes as integer nanoseconds (`ToolSpec.to_json`)."""


def human_ns(ns: int) -> str:
    """Integer nanoseconds as a person reads them: `60 s`, `250 ms`, `1 min 30 s`, `2 h`."""
    if ns < 0:
        return f"-{human_ns(-ns)}"
    if ns < 1_000:
        return f"{ns} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:g} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:g} ms"
    whole, rest = divmod(ns, 1_000_000_000)
    if whole < 120:
        return f"{ns / 1_000_000_000:g} s"
    days, left = divmod(whole, 86_400)
    hours, left = divmod(left, 3_600)
    minutes, secs = divmod(left, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n]
    if secs or rest:
        parts.append(f"{secs + rest / 1_000_000_000:g} s")
    return " ".join(parts)


def hashed_rows(approval: Approval) -> list[tuple[str, str]]:
    """Every field of the hashed object as `(path, shown value)`, in hash order, paths
    without the leading dot; a nanosecond field shows its human duration beside the integer
    (`60000000000 (60 s)`). The object itself (the first node) is left out: its members are
    the fields."""
    rows = []
    for path, value in list(approval_fields(hashed_content(approval)))[1:]:
        path = path.lstrip(".")
        ns = _nanoseconds(approval, path)
        if ns is not None:
            value = f"{value} ({human_ns(ns)})"
        rows.append((path, value))
    return rows


def _nanoseconds(approval: Approval, path: str) -> int | None:
    if path not in NANOSECOND_FIELDS:
        return None
    node: Any = hashed_content(approval)
    for key in path.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


# --- what a person decides on ---------------------------------------------------------------

ARGS_SHOWN = 12
"""Arguments the summary lists; more are counted and shown in the full view."""


@dataclass(frozen=True)
class Summary:
    """What a person decides on, every text already sanitized (escape it for HTML)."""

    run_id: str
    approval_id: str
    kind: str
    tool: str  # "-" when the request names none
    side_effect: str  # "" when the request's spec has none
    args: tuple[tuple[str, str], ...]  # (name, exact JSON literal), in hash order
    args_more: int  # arguments not listed (ARGS_SHOWN reached)
    args_note: str  # "" or what the arguments are when they are not an object
    why: str  # the policy's reason, a JSON literal (head and tail when long), or "-"
    approving: str  # what approving does, after "approving " (no capital, no full stop)
    rejecting: str  # the same for rejecting
    interrupted: bool
    mismatches: tuple[str, ...]  # a warning per capability/presentation that names other
    # things, and one when argument names hold characters outside ASCII
    asked: str
    expires: str
    hash: str
    fields: int  # how many rows the full view has
    notice: str = ""  # an interrupted call's notice (`interrupted_notice`), else ""


def compact_value(value: JSON) -> str:
    """A value as its exact JSON literal (sanitized), a long one as head and tail."""
    if isinstance(value, str):
        return head_tail(value)
    literal = sanitize(json_literal(value))
    if len(literal) <= LONG_STRING:
        return literal
    hidden = len(literal) - 2 * HEAD_TAIL
    size = ""
    if isinstance(value, dict):
        size = f"; object, {number(len(value))} keys"
    elif isinstance(value, list):
        size = f"; list, {number(len(value))} items"
    return (
        f"{literal[:HEAD_TAIL]} … {number(hidden)} chars not shown{size} … {literal[-HEAD_TAIL:]}"
    )


def _arg_name(key: str) -> str:
    """An argument's name: plain when it is an identifier, else quoted as in a path."""
    shown = _path_key(key)
    return shown[1:] if shown.startswith(".") else shown[1:-1]


def _mismatches(approval: Approval, tool: str) -> tuple[str, ...]:
    request = approval.request if isinstance(approval.request, dict) else {}
    args = request.get("args")
    found = []
    parts = (("capability", approval.capability), ("presentation", approval.presentation))
    for name, part in parts:
        if not isinstance(part, dict):
            continue
        # Compared as the JSON that is hashed: in Python 1 == 1.0 == True.
        if "args" in part and json_literal(part["args"]) != json_literal(args):
            found.append(
                f"{name}.args differs from the arguments the tool is called with "
                "(request.args): read both in the full view before deciding"
            )
        named = part.get("tool")
        if "tool" in part and json_literal(named) != json_literal(tool):
            found.append(
                f"{name}.tool names {compact_value(named)}, but the request calls "
                f"{compact_value(tool)}: read the full view before deciding"
            )
    return tuple(found)


NAMES_WARNED = 3
"""Argument names outside ASCII the summary's warning spells out; more are counted."""


def _names_outside_ascii(args: JSON) -> tuple[str, ...]:
    """A warning when an argument's name holds anything outside ASCII: it may print
    like another name (a Cyrillic о, a Latin o), so its escaped form is what is listed."""
    if not isinstance(args, dict):
        return ()
    names = [key for key in sorted(args) if not key.isascii()]
    if not names:
        return ()
    spelled = ", ".join(
        f"{_arg_name(key)} (reads {head_tail(key, LONG_KEY, LONG_KEY // 2)})"
        for key in names[:NAMES_WARNED]
    )
    more = len(names) - NAMES_WARNED
    return (
        "argument names with characters outside ASCII, shown escaped because they may print "
        f"like other names: {spelled}{f' and {number(more)} more' if more > 0 else ''}; "
        "make sure the tool reads the one you mean",
    )


def summary(approval: Approval, reason: str) -> Summary:
    """What a person decides on, from the hashed request (never from other rows)."""
    request = approval.request if isinstance(approval.request, dict) else {}
    spec = request.get("spec") if isinstance(request.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    tool = approval_tool(approval)
    side_effect = spec.get("side_effect")
    args = request.get("args")
    listed: list[tuple[str, str]] = []
    more = 0
    note = ""
    if isinstance(args, dict):
        keys = sorted(args)
        listed = [(_arg_name(k), compact_value(args[k])) for k in keys[:ARGS_SHOWN]]
        more = max(len(keys) - ARGS_SHOWN, 0)
        if not keys:
            note = "(none)"
    else:
        note = compact_value(args)
    name = sanitize(tool) if tool else "the tool"
    interrupted = approval.kind == INTERRUPTED_KIND
    if interrupted:
        approving = (
            f"runs {name} once more with these arguments when the run's program resumes it, "
            "although the first call may already have taken effect"
        )
        rejecting = "ends the run (cancelled) without calling it again"
    else:
        approving = (
            f"lets the run call {name} once with exactly these arguments, when the program "
            "that owns the run resumes it"
        )
        rejecting = f"cancels the run; {name} is not called"
    return Summary(
        run_id=sanitize(approval.run_id),
        approval_id=sanitize(approval.id),
        kind=sanitize(approval.kind),
        tool=sanitize(tool) or "-",
        side_effect=sanitize(side_effect) if isinstance(side_effect, str) else "",
        args=tuple(listed),
        args_more=more,
        args_note=note,
        why=head_tail(reason, 400, 180) if reason else "-",
        approving=approving,
        rejecting=rejecting,
        interrupted=interrupted,
        mismatches=(*_mismatches(approval, tool), *_names_outside_ascii(args)),
        asked=time_cell(approval.created_at),
        expires=time_cell(approval.expires_at) if approval.expires_at else "never",
        hash=sanitize(approval.hash),
        fields=len(hashed_rows(approval)),
        notice=interrupted_notice(approval),
    )


def summary_lines(s: Summary) -> list[str]:
    """The summary as lines of text: what a person decides on, then the hash it is bound to."""
    lines = [f"Run {s.run_id} waits for approval {s.approval_id}."]
    if s.interrupted:
        lines += ["", s.notice or INTERRUPTED_NOTICE, ""]
    tool = f"{s.tool} ({s.side_effect})" if s.side_effect else s.tool
    facts = [
        ("tool", tool),
        ("arguments", "" if s.args else s.args_note or "(none)"),
        ("why asked", s.why if s.kind == s.side_effect else f"{s.why} ({s.kind})"),
        ("approving", s.approving),
        ("rejecting", s.rejecting),
        ("asked", s.asked),
        ("expires", s.expires),
        ("hash", s.hash),
    ]
    shown = field_lines(facts, indent="  ")
    # The arguments under their heading, aligned among themselves (a long key
    # widens only their column).
    args = list(s.args)
    if s.args_more:
        args.append(("…", f"and {number(s.args_more)} more (every one: the full view)"))
    lines += [*shown[:2], *(field_lines(args, indent="    ") if args else []), *shown[2:]]
    lines += [f"WARNING: {m}" for m in s.mismatches]
    return lines


def full_lines(approval: Approval, *, verb: str) -> list[str]:
    """The full hashed view: every field, one a line, exactly as the hash covers it."""
    rows = hashed_rows(approval)
    lines = [f"What you {verb}, one field a line, exactly as the hash covers it:"]
    width = min(max((display_width(p) for p, _ in rows), default=0), 48)
    lines += [f"  {path.ljust(width)}  {value}" for path, value in rows]
    lines += whole_lines(whole_values(approval))
    lines.append(f"hash  {sanitize(approval.hash)}")
    return lines


def whole_heading(count: int) -> str:
    """`Shown above in part, here whole (2 values):`"""
    return f"Shown above in part, here whole ({number(count)} value{'' if count == 1 else 's'}):"


def whole_label(w: Whole) -> str:
    """`request.args.body (string, 2,035 chars)`: the row a whole value completes."""
    return f"{w.path} ({w.what}, {number(w.size)} char{'' if w.size == 1 else 's'})"


def whole_lines(wholes: Sequence[Whole]) -> list[str]:
    """The values the full view shows in part, whole: each its row's path, then its literal."""
    if not wholes:
        return []
    lines = [whole_heading(len(wholes))]
    for w in wholes:
        if w.same_as:
            lines.append(f"  {whole_label(w)}: the same as {w.same_as}")
        else:
            lines += [f"  {whole_label(w)}", f"    {w.value}"]
    return lines


def approval_lines(
    approval: Approval, reason: str, *, verb: str, full: bool = True, more: str = ""
) -> list[str]:
    """What a person decides on first; then, with `full`, every hashed field, one a line.

    Without `full`, `more` (when given) is a last line saying how to see every field.
    """
    lines = summary_lines(summary(approval, reason))
    if full:
        lines += ["", *full_lines(approval, verb=verb)]
    elif more:
        lines += ["", more]
    return lines


__all__ = [
    "ARGS_SHOWN",
    "HEAD_TAIL",
    "INTERRUPTED_KIND",
    "INTERRUPTED_NOTICE",
    "LONG_STRING",
    "NANOSECOND_FIELDS",
    "NOTICE_LIMIT",
    "Summary",
    "Whole",
    "approval_fields",
    "approval_lines",
    "compact_value",
    "field_lines",
    "full_lines",
    "hashed_content",
    "hashed_rows",
    "head_tail",
    "human_ns",
    "interrupted_notice",
    "json_literal",
    "long_text",
    "number",
    "quoted",
    "summary",
    "summary_lines",
    "time_cell",
    "whole_heading",
    "whole_label",
    "whole_lines",
    "whole_values",
]
