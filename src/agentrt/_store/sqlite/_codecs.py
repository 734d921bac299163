"""The SQLite backend's row codecs: SELECT lists with capped text, and rows decoded into records.

A decoder never raises on a bad row: a value that will not decode leaves its
field empty and sets the record's `decode_error`, naming the column. Capped
columns come with their full length (`select_list`), so a cut value reads as
`CappedText` or a `truncated_marker`, never as if it were whole.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from ..._canonical import from_text
from ..._capped import CappedText, truncated_marker
from ..._clock import parse_time
from ..._records import (
    JSON,
    Approval,
    ApprovalStatus,
    Decision,
    Event,
    Limits,
    ModelCallRecord,
    Observation,
    PolicyDecision,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
)
from ..._stored_text import shown_text, unreadable_text
from .._records import ApprovalState, LeaseState, WaitingRow
from ._values import STORED_COLUMNS, Unresolved

MAX_INT64 = 2**63 - 1

_T = TypeVar("_T")


def _columns(names: str, *, integers: str = "") -> tuple[tuple[str, bool], ...]:
    """`(column, is_text)` pairs; every column not named in `integers` is text."""
    ints = set(integers.split())
    return tuple((name, name not in ints) for name in names.split())


_COUNTERS = "model_calls input_tokens output_tokens cached_input_tokens estimated_cost_micros"
_RUN_COLUMNS = _columns(
    "id goal status reason reason_detail limits_json step_count created_at started_at "
    f"finished_at result_json {_COUNTERS} active_ms origin",
    integers=f"step_count {_COUNTERS} active_ms",
)
_STEP_COLUMNS = _columns(
    "id run_id idx status decision_json policy_json observation_json started_at finished_at "
    "spec_hash policy_id",
    integers="idx",
)
_APPROVAL_COLUMNS = _columns(
    "id run_id step_id kind capability_json presentation_json request_json hash status "
    "created_at expires_at decided_at decided_by note"
)
_EVENT_COLUMNS = _columns("seq run_id step_id at type payload_json hash", integers="seq")
_MODEL_CALL_COLUMNS = (
    "id, run_id, step_id, attempt, status, model, input_tokens, output_tokens, "
    "cached_input_tokens, cost_micros, latency_ms, error, dispatched_at, completed_at"
)
_LENGTH_PREFIX = "_n_"


def select_list(columns: Sequence[tuple[str, bool]], cap: int | None) -> str:
    """The SELECT list for `columns`, each text column capped at `cap` characters in SQL.

    A capped column `c` reads as `substr(c, 1, cap)` plus its full length as `_n_c`,
    which is how the row decoders know a value was cut.
    """
    if cap is not None and cap < 1:
        raise ValueError("cap must be a positive number of characters or None")
    parts: list[str] = []
    for name, is_text in columns:
        if is_text and cap is not None and name in STORED_COLUMNS:
            # A packed value (it holds a reference, U+0001) is read whole, short as it is,
            # with `-cap` for its length: the row factory puts its parts back, then cuts it.
            held = f"instr({name}, char(1)) > 0"
            parts.append(
                f"CASE WHEN {held} THEN {name} ELSE substr({name}, 1, {int(cap)}) END AS {name}"
            )
            parts.append(
                f"CASE WHEN {held} THEN {-int(cap)} ELSE length({name}) END "
                f"AS {_LENGTH_PREFIX}{name}"
            )
        elif is_text and cap is not None:
            parts.append(capped_sql(name, int(cap), name, _LENGTH_PREFIX + name))
        else:
            parts.append(name)
    return ", ".join(parts)


def capped_sql(expr: str, cap: int, alias: str, length_alias: str) -> str:
    """Two SELECT items: the text `expr` cut at `cap` characters, and its full length.

    SQLite's `substr` and `length` stop at a NUL character, so a text holding one would
    read cut there, with nothing saying so: such a text is read whole instead, with `-cap`
    for its length, and cut by its decoder (`cut_whole`).
    """
    nul = f"instr(CAST({expr} AS BLOB), x'00') > 0"  # PostgreSQL: FALSE (`translate`)
    return (
        f"CASE WHEN {nul} THEN {expr} ELSE substr({expr}, 1, {cap}) END AS {alias}, "
        f"CASE WHEN {nul} THEN {-cap} ELSE length({expr}) END AS {length_alias}"
    )


def cut_whole(value: object, length: object) -> tuple[object, object]:
    """A text read whole with `-cap` for its length (`capped_sql`): cut to the cap, with
    its full length; any other value and length as they are."""
    if isinstance(length, int) and length < 0 and isinstance(value, str):
        return value[:-length], len(value)
    return value, length


def saturating_add_sql(column: str, param: str) -> str:
    """SQL adding the named parameter to `column`, saturating at 2^63-1.

    SQLite turns an integer overflow into a float silently, so the sum is taken
    only when it fits. Bind a value clamped with `clamp_charge` (never negative).
    """
    if not column.isidentifier():
        raise ValueError(f"not a column name: {column!r}")
    if not (param.startswith(":") and param[1:].isidentifier()):
        raise ValueError(f"not a named parameter (':name'): {param!r}")
    return (
        f"CASE WHEN {param} <= {MAX_INT64} - {column} THEN {column} + {param} ELSE {MAX_INT64} END"
    )


def clamp_charge(value: int) -> int:
    """A usage charge ready to bind for `saturating_add_sql`: negatives are zero, at most 2^63-1."""
    return min(max(int(value), 0), MAX_INT64)


# --- row decoding --------------------------------------------------------------------------------


class _Fields:
    """Reads typed fields out of one row, collecting what will not decode instead of raising."""

    def __init__(self, row: sqlite3.Row) -> None:
        self._row = row
        self._keys = set(row.keys())
        self.errors: list[str] = []

    def fail(self, name: str, why: str) -> None:
        self.errors.append(f"{name}: {why}")

    @property
    def error(self) -> str:
        return "; ".join(self.errors)

    def full_length(self, name: str) -> int | None:
        """The value's full length in characters when the read cut it, else None."""
        key = _LENGTH_PREFIX + name
        if key not in self._keys:
            return None
        value, length = cut_whole(self._row[name], self._row[key])
        if isinstance(length, int) and isinstance(value, str) and length > len(value):
            return length
        return None

    def text(self, name: str) -> str:
        """A text column; one the read cut at its cap is a `CappedText` with the full length."""
        value = self._plain_text(name)
        length = self.full_length(name)
        return value if length is None else CappedText(value, length)

    def _plain_text(self, name: str) -> str:
        value = self._row[name]
        if isinstance(value, Unresolved):
            self.fail(name, value.why)
            return ""
        if isinstance(value, str):
            key = _LENGTH_PREFIX + name
            return value if key not in self._keys else str(cut_whole(value, self._row[key])[0])
        self.fail(name, unreadable_text(value))
        return ""

    def integer(self, name: str) -> int:
        value = self._row[name]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        self.fail(name, f"expected an integer, found {type(value).__name__}")
        return 0

    def time(self, name: str) -> datetime | None:
        text = self.text(name)
        try:
            return parse_time(text)
        except ValueError as e:
            self.fail(name, f"not a stored timestamp: {e}")
            return None

    def json(self, name: str) -> JSON:
        """A JSON column: `''` is None; a capped value is the truncated marker."""
        text = self._plain_text(name)
        if text == "":
            return None
        length = self.full_length(name)
        if length is not None:
            return truncated_marker(length, text)
        try:
            return from_text(text)
        except Exception as e:  # a bad row must not crash a read, whatever the parser raises
            self.fail(name, f"invalid JSON: {e}")
            return None

    def record(self, name: str, decode: Callable[[Mapping[str, Any]], _T]) -> _T | None:
        """A JSON object column decoded into a record; None (and an error) when it will not."""
        text = self._plain_text(name)
        if text == "":
            return None
        length = self.full_length(name)
        if length is not None:
            self.fail(name, f"holds {length} characters, over this read's cap of {len(text)}")
            return None
        try:
            data = from_text(text)
        except Exception as e:  # a bad row must not crash a read, whatever the parser raises
            self.fail(name, f"invalid JSON: {e}")
            return None
        if not isinstance(data, Mapping):
            self.fail(name, f"expected a JSON object, found {type(data).__name__}")
            return None
        try:
            return decode(data)
        except Exception as e:  # from_json of arbitrary stored data may raise anything
            self.fail(name, f"does not decode: {type(e).__name__}: {e}")
            return None

    def enum(self, name: str, kind: type[StrEnum], *, allow_empty: bool = False) -> str:
        """A status-like column as its enum member; an unknown value is kept and reported."""
        text = self.text(name)
        if allow_empty and text == "":
            return text
        try:
            return kind(text)
        except ValueError:
            self.fail(name, f"{text!r} is not a {kind.__name__}")
            return text


# A run's limits never change, and the driver re-reads its run row at every
# write: decoding the same text once is enough (Limits is frozen, safe to share).
_LIMITS_BY_TEXT: dict[str, Limits] = {}


def _limits(fields: _Fields) -> Limits:
    known = len(fields.errors)
    text = fields.text("limits_json")
    if text == "":
        if len(fields.errors) == known:  # really empty, not unreadable (already said)
            fields.fail("limits_json", "empty: the run was recorded without its limits")
        return Limits()
    cached = _LIMITS_BY_TEXT.get(text)
    if cached is not None:
        return cached
    limits = fields.record("limits_json", Limits.from_json)
    if limits is None:
        return Limits()
    if len(_LIMITS_BY_TEXT) >= 1024:
        _LIMITS_BY_TEXT.clear()
    _LIMITS_BY_TEXT[str(text)] = limits
    return limits


def run_from_row(row: sqlite3.Row) -> Run:
    """A `runs` row (any SELECT naming the run columns) as a `Run`."""
    f = _Fields(row)
    return Run(
        id=f.text("id"),
        goal=f.text("goal"),
        status=f.enum("status", RunStatus),
        reason=f.enum("reason", TerminalReason, allow_empty=True),
        reason_detail=f.text("reason_detail"),
        limits=_limits(f),
        step_count=f.integer("step_count"),
        created_at=f.time("created_at"),
        started_at=f.time("started_at"),
        finished_at=f.time("finished_at"),
        result=f.json("result_json"),
        model_calls=f.integer("model_calls"),
        input_tokens=f.integer("input_tokens"),
        output_tokens=f.integer("output_tokens"),
        cached_input_tokens=f.integer("cached_input_tokens"),
        estimated_cost_micros=f.integer("estimated_cost_micros"),
        active_time=timedelta(milliseconds=f.integer("active_ms")),
        origin=f.text("origin"),
        decode_error=f.error,
    )


def step_from_row(row: sqlite3.Row) -> Step:
    """A `steps` row as a `Step` (`index` is the `idx` column)."""
    f = _Fields(row)
    return Step(
        id=f.text("id"),
        run_id=f.text("run_id"),
        index=f.integer("idx"),
        status=f.enum("status", StepStatus),
        decision=f.record("decision_json", Decision.from_json),
        policy=f.record("policy_json", PolicyDecision.from_json),
        observation=f.record("observation_json", Observation.from_json),
        started_at=f.time("started_at"),
        finished_at=f.time("finished_at"),
        spec_hash=f.text("spec_hash"),
        policy_id=f.text("policy_id"),
        decode_error=f.error,
    )


def approval_from_row(row: sqlite3.Row) -> Approval:
    """An `approvals` row as an `Approval`; `request` is the decoded request JSON."""
    f = _Fields(row)
    return Approval(
        id=f.text("id"),
        run_id=f.text("run_id"),
        step_id=f.text("step_id"),
        kind=f.text("kind"),
        capability=f.json("capability_json"),
        presentation=f.json("presentation_json"),
        request=f.json("request_json"),
        hash=f.text("hash"),
        status=f.enum("status", ApprovalStatus),
        created_at=f.time("created_at"),
        expires_at=f.time("expires_at"),
        decided_at=f.time("decided_at"),
        decided_by=f.text("decided_by"),
        note=f.text("note"),
        decode_error=f.error,
    )


def event_from_row(row: sqlite3.Row) -> Event:
    """An `events` row as an `Event`."""
    f = _Fields(row)
    return Event(
        seq=f.integer("seq"),
        run_id=f.text("run_id"),
        step_id=f.text("step_id"),
        at=f.time("at"),
        type=f.text("type"),
        payload=f.json("payload_json"),
        hash=f.text("hash"),
        decode_error=f.error,
    )


def model_call_from_row(row: sqlite3.Row) -> ModelCallRecord:
    """A `model_calls` row; a bad field reads as empty or zero and is named in `decode_error`."""
    f = _Fields(row)
    return ModelCallRecord(
        id=f.text("id"),
        run_id=f.text("run_id"),
        step_id=f.text("step_id"),
        attempt=f.integer("attempt"),
        status=f.text("status"),
        model=f.text("model"),
        input_tokens=f.integer("input_tokens"),
        output_tokens=f.integer("output_tokens"),
        cached_input_tokens=f.integer("cached_input_tokens"),
        cost_micros=f.integer("cost_micros"),
        latency_ms=f.integer("latency_ms"),
        error=f.text("error"),
        dispatched_at=f.time("dispatched_at"),
        completed_at=f.time("completed_at"),
        decode_error=f.error,
    )


# --- leases -------------------------------------------------------------------------------------


def lease_from(
    run_id: str, status: object, owner: object, expires: object, holder: object, epoch: object
) -> LeaseState:
    """A run's lease columns as a `LeaseState`, applying the rules for what will not read.

    An owner that is not text is still somebody (what could be read of it); an
    expiry that is not text, or text that is not a stored time, can be dated by
    nobody (`expiry_readable` False); a holder that is not text proves nothing.
    """
    expires_at: datetime | None = None
    readable = isinstance(expires, str)
    if isinstance(expires, str):
        try:
            expires_at = parse_time(expires)
        except ValueError:
            readable = False
    shown_owner = owner if isinstance(owner, str) else shown_text(owner) or "<unreadable owner>"
    return LeaseState(
        run_id=run_id,
        status=shown_text(status),
        owner=shown_owner,
        expires_at=expires_at,
        holder=holder if isinstance(holder, str) else "",
        epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0,
        expiry_readable=readable,
        owner_readable=isinstance(owner, str),
        stored=(owner, expires),
    )


# --- approvals as judgements and lists read them --------------------------------------------


def _time_or_none(value: object) -> datetime | None:
    """A stored time, None when there is none or it will not parse."""
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def approval_state(row: sqlite3.Row) -> ApprovalState:
    """`id`, `status`, `expires_at` of an approval row; what will not read shows as text or None."""
    return ApprovalState(
        id=shown_text(row["id"]),
        status=shown_text(row["status"]),
        expires_at=_time_or_none(row["expires_at"]),
    )


def _listed_text(value: object, length: object = None) -> str:
    """A column read by a list query; with its full `length`, text cut shorter is a CappedText."""
    # Bytes that are not UTF-8 (a damaged or tampered row) show with each bad byte as \xNN.
    value, length = cut_whole(value, length)
    text = shown_text(value)
    if isinstance(length, int) and length > len(text):
        return CappedText(text, length)
    return text


def waiting_from_row(row: sqlite3.Row, *, with_goal: bool = False) -> WaitingRow:
    """A pending approval as a list reads it; a value cut at the cap stays marked as cut."""
    return WaitingRow(
        id=_listed_text(row["id"], row["n_id"]),
        run_id=_listed_text(row["run_id"]),
        kind=_listed_text(row["kind"], row["n_kind"]),
        tool=_listed_text(row["tool"], row["n_tool"]),
        hash=_listed_text(row["hash"], row["n_hash"]),
        created_at=_time_or_none(row["created_at"]),
        expires_at=_time_or_none(row["expires_at"]),
        goal=_listed_text(row["goal"], row["n_goal"]) if with_goal else "",
    )
