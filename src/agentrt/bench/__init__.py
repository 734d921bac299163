"""Outcome benchmarks: score an agent change by what its runs did, safe or not.

A benchmark runs scenarios in one or more modes (an agent version, a policy, a
prompt) on one or more models, each a few times, and records each run as a
`Trial`: its outcome, named by a `Taxonomy` that classes every outcome as
`success`, `safe_non_success` or `unsafe`, and what the run cost, read from the
record (`trial_from_run`). A taxonomy must have at least one `success` and one
`unsafe` outcome: a benchmark that cannot tell "did it" from "did harm" scores
nothing.

Results are files of format `agent-runtime/bench/v1` (`Result`, `load_result`,
`Result.write`); a file that does not read as one is refused with the reason,
naming the field (`BenchFormatError`). `summarize` counts each mode and model;
one `unsafe` trial disqualifies its mode, whatever its success rate.
`compare_markdown` sets several result files side by side; it refuses to mix
taxonomies, or commits, unless told. `comparison_svg` draws the same comparison
(an SVG written here, no plotting library). `agentrt bench compare A.json B.json`
is the command.

Decision record: docs/decisions/0066-bench-result-format.md; guide: docs/bench.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeGuard
from xml.sax.saxutils import escape as _xml_escape

from .._canonical import parse_json
from .._errors import AgentrtError, JSONValueError
from .._store import Store
from ..trace import sanitize

FORMAT = "agent-runtime/bench/v1"
MAX_FILE_BYTES = 64 * 1024 * 1024
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")
_MAX_TEXT = 256
_MAX_COUNT = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
EVENT_PAGE = 1000


class BenchError(AgentrtError):
    """A benchmark asked for something it cannot do (a bad taxonomy, a mixed comparison)."""


class BenchFormatError(BenchError):
    """A result file that is not `agent-runtime/bench/v1`: the message says where and why."""


class OutcomeClass(StrEnum):
    """How a taxonomy classes an outcome: a success, safe but unsuccessful, or unsafe."""

    SUCCESS = "success"
    SAFE_NON_SUCCESS = "safe_non_success"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Outcome:
    """One named outcome and its class (`name`: lowercase, 1-64 of `a-z0-9_.:-`)."""

    name: str
    klass: OutcomeClass
    description: str = ""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "klass", OutcomeClass(self.klass))
        except ValueError:
            raise BenchError(
                f"outcome {self.name!r}: class {self.klass!r} is not one of success, "
                "safe_non_success, unsafe"
            ) from None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "class": str(self.klass), "description": self.description}


@dataclass(frozen=True)
class Taxonomy:
    """The outcomes a benchmark can end in; at least one `success` and one `unsafe`."""

    name: str
    outcomes: tuple[Outcome, ...]

    def __post_init__(self) -> None:
        problem = _taxonomy_problem(self.name, self.outcomes)
        if problem:
            raise BenchError(f"taxonomy {self.name!r}: {problem}")

    def classify(self, outcome: str) -> OutcomeClass:
        for o in self.outcomes:
            if o.name == outcome:
                return o.klass
        raise BenchError(f"{outcome!r} is not an outcome of taxonomy {self.name!r}")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "outcomes": [o.to_json() for o in self.outcomes]}

    @property
    def digest(self) -> str:
        """sha256 of the taxonomy's JSON (sorted keys): two files compare only when equal."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @classmethod
    def of(cls, name: str, **outcomes: OutcomeClass | str) -> Taxonomy:
        """`Taxonomy.of("refunds", refunded="success", declined="safe_non_success", ...)`."""
        return cls(name, tuple(Outcome(k, OutcomeClass(v)) for k, v in outcomes.items()))


def _taxonomy_problem(name: Any, outcomes: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return (
            "its name must be 1-64 characters of a-z, 0-9 and _.:-, starting with a letter or digit"
        )
    if not isinstance(outcomes, tuple) or not outcomes:
        return "it has no outcomes"
    seen: set[str] = set()
    for o in outcomes:
        if not isinstance(o, Outcome) or not isinstance(o.name, str) or not _NAME.fullmatch(o.name):
            return f"outcome {getattr(o, 'name', o)!r} is not a valid name (a-z, 0-9, _.:-)"
        if o.name in seen:
            return f"outcome {o.name!r} is named twice"
        seen.add(o.name)
        if o.klass not in set(OutcomeClass):
            return f"outcome {o.name!r} has no class"
        problem = _text_problem(o.description, required=False)
        if problem:
            return f"outcome {o.name!r}: description {problem}"
    classes = {o.klass for o in outcomes}
    if OutcomeClass.SUCCESS not in classes:
        return "it needs at least one success outcome"
    if OutcomeClass.UNSAFE not in classes:
        return "it needs at least one unsafe outcome: a benchmark must tell success from harm"
    return ""


_TRIAL_INTS = (
    "repeat",
    "steps",
    "tool_calls",
    "policy_denials",
    "approvals",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "wall_ms",
)
_TRIAL_TEXTS = ("scenario", "mode", "model", "run_id", "outcome")


@dataclass(frozen=True)
class Trial:
    """One run of one scenario in one mode on one model, and what it came to."""

    scenario: str
    mode: str
    model: str
    repeat: int
    run_id: str
    outcome: str
    steps: int = 0
    tool_calls: int = 0
    policy_denials: int = 0
    approvals: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    wall_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (*_TRIAL_TEXTS, *_TRIAL_INTS)}


def trial_from_run(
    store: Store,
    run_id: str,
    *,
    scenario: str,
    mode: str,
    model: str,
    repeat: int,
    outcome: str,
    wall_ms: int,
) -> Trial:
    """A trial whose counts are read from the record of run `run_id`.

    Steps, model calls, tokens and cost are the run's totals; tool calls are its
    `step.tool_started` events, policy denials its `step.policy` events whose
    decision is `deny`, approvals its `approval.requested` events.
    """
    wall = _wall_ms(wall_ms)
    run = store.get_run(run_id, cap=256)
    tool_calls = denials = approvals = 0
    after = 0
    while True:
        page = store.list_events(run_id, after, EVENT_PAGE, cap=4096)
        for e in page:
            if e.type == "step.tool_started":
                tool_calls += 1
            elif e.type == "approval.requested":
                approvals += 1
            elif e.type == "step.policy" and isinstance(e.payload, dict):
                decision = e.payload.get("decision")
                if isinstance(decision, dict) and decision.get("outcome") == "deny":
                    denials += 1
        if len(page) < EVENT_PAGE:
            break
        after = page[-1].seq
    return Trial(
        scenario=scenario,
        mode=mode,
        model=model,
        repeat=repeat,
        run_id=run_id,
        outcome=outcome,
        steps=run.step_count,
        tool_calls=tool_calls,
        policy_denials=denials,
        approvals=approvals,
        model_calls=run.model_calls,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cost_micros=run.estimated_cost_micros,
        wall_ms=wall,
    )


def _wall_ms(value: Any) -> int:
    """A measured wall time as the file holds it: a whole number of milliseconds, a
    negative one (a clock stepped back) as 0; `BenchError` for NaN, infinity, or a time
    beyond 2^63-1 ms, which no file could hold."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BenchError(f"wall_ms is {_shown(value)}, not an integer from 0 to 2^63-1")
    if isinstance(value, float) and not math.isfinite(value):
        raise BenchError(f"wall_ms is {_shown(value)}, not an integer from 0 to 2^63-1")
    whole = max(0, int(value))
    if whole > _MAX_COUNT:
        raise BenchError(f"wall_ms is {_shown(value)}, not an integer from 0 to 2^63-1")
    return whole


@dataclass(frozen=True)
class Result:
    """One result file: a taxonomy, the commit benchmarked, when, and its trials."""

    taxonomy: Taxonomy
    commit: str
    trials: tuple[Trial, ...]
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    label: str = ""

    def __post_init__(self) -> None:
        # What the file could not hold is refused here, not found when it is read back:
        # every rule `load_result` applies, applied to what would be written.
        if not isinstance(self.taxonomy, Taxonomy):
            raise BenchError(f"taxonomy is {_shown(self.taxonomy)}, not a Taxonomy")
        for name in _RESULT_TEXTS:
            problem = _text_problem(getattr(self, name), required=name != "label")
            if problem:
                raise BenchError(f"{name} {problem}")
        if not isinstance(self.trials, tuple):
            raise BenchError(f"trials is {_shown(self.trials)}, not a tuple of Trials")
        for i, t in enumerate(self.trials):
            if not isinstance(t, Trial):
                raise BenchError(f"trials[{i}] is {_shown(t)}, not a Trial")
            for key in _TRIAL_TEXTS:
                problem = _text_problem(getattr(t, key), required=key != "run_id")
                if problem:
                    raise BenchError(f"trials[{i}].{key} {problem}")
            for key in _TRIAL_INTS:
                if not _is_count(getattr(t, key)):
                    raise BenchError(f"trials[{i}].{key} {_count_problem(getattr(t, key))}")
            try:
                self.taxonomy.classify(t.outcome)
            except BenchError as e:
                raise BenchError(f"trials[{i}]: {e}") from None

    def to_json(self) -> dict[str, Any]:
        # The file's keys are the field names: `format`, then `commit`, `created_at`,
        # `label` (text), `taxonomy` and `trials`.
        out: dict[str, Any] = {"format": FORMAT}
        out.update((name, getattr(self, name)) for name in _RESULT_TEXTS)
        out["taxonomy"] = self.taxonomy.to_json()
        out["trials"] = [t.to_json() for t in self.trials]
        return out

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the file (0644 is fine: no secrets; replaced whole through a rename)."""
        target = os.fspath(path)
        text = json.dumps(self.to_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        data = text.encode("utf-8")  # before any file is made: a failure leaves none
        tmp = f"{target}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @classmethod
    def from_json(cls, data: Any) -> Result:
        """Read a result file's document; `BenchFormatError` saying where and why if malformed."""
        if not isinstance(data, dict):
            raise BenchFormatError("the file is not a JSON object")
        if data.get("format") != FORMAT:
            raise BenchFormatError(f"format is {_shown(data.get('format'))}, not {FORMAT!r}")
        known = {"format", "taxonomy", "trials", *_RESULT_TEXTS}
        extra = sorted(set(data) - known)
        if extra:
            raise BenchFormatError(f"unknown field {extra[0]!r}")
        texts = {name: _text(data, name, "", required=name != "label") for name in _RESULT_TEXTS}
        taxonomy = _taxonomy_from_json(data.get("taxonomy"))
        trials_data = data.get("trials")
        if not isinstance(trials_data, list):
            raise BenchFormatError("trials is not a list")
        trials = tuple(_trial_from_json(t, i, taxonomy) for i, t in enumerate(trials_data))
        return cls(taxonomy=taxonomy, trials=trials, **texts)


# The text fields of a result file (the commit benchmarked, when, a label), by field name.
_RESULT_TEXTS = tuple(f.name for f in fields(Result) if f.type == "str")


def _shown(value: Any) -> str:
    return sanitize(repr(value)[:80])


def _text_problem(value: Any, *, required: bool) -> str:
    """Why `value` cannot be a text field of the file (`is empty`...), or ""."""
    if not isinstance(value, str):
        return f"is {_shown(value)}, not text"
    if required and not value:
        return "is empty"
    if len(value) > _MAX_TEXT:
        return f"is longer than {_MAX_TEXT} characters"
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        return f"holds a lone surrogate U+{ord(surrogate[0]):04X}: it is not text UTF-8 can hold"
    return ""


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT


def _count_problem(value: Any) -> str:
    return f"is {_shown(value)}, not an integer from 0 to 2^63-1"


def _text(data: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = data.get(key, None if required else "")
    problem = _text_problem(value, required=required)
    if problem:
        raise BenchFormatError(f"{where}{key} {problem}")
    return str.__str__(value)


def _taxonomy_from_json(data: Any) -> Taxonomy:
    if not isinstance(data, dict):
        raise BenchFormatError("taxonomy is not an object")
    outcomes_data = data.get("outcomes")
    if not isinstance(outcomes_data, list):
        raise BenchFormatError("taxonomy.outcomes is not a list")
    outcomes = []
    for i, o in enumerate(outcomes_data):
        where = f"taxonomy.outcomes[{i}]."
        if not isinstance(o, dict):
            raise BenchFormatError(f"taxonomy.outcomes[{i}] is not an object")
        klass = o.get("class")
        if klass not in {c.value for c in OutcomeClass}:
            raise BenchFormatError(
                f"{where}class is {_shown(klass)}: one of success, safe_non_success, unsafe"
            )
        outcomes.append(
            Outcome(
                _text(o, "name", where, required=True),
                OutcomeClass(klass),
                _text(o, "description", where),
            )
        )
    name = data.get("name")
    problem = _taxonomy_problem(name, tuple(outcomes))
    if problem:
        raise BenchFormatError(f"taxonomy: {problem}")
    assert isinstance(name, str)
    return Taxonomy(name, tuple(outcomes))


def _trial_from_json(data: Any, i: int, taxonomy: Taxonomy) -> Trial:
    where = f"trials[{i}]."
    if not isinstance(data, dict):
        raise BenchFormatError(f"trials[{i}] is not an object")
    extra = sorted(set(data) - set(_TRIAL_TEXTS) - set(_TRIAL_INTS))
    if extra:
        raise BenchFormatError(f"{where}{extra[0]} is not a trial field")
    values: dict[str, Any] = {}
    for key in _TRIAL_TEXTS:
        values[key] = _text(data, key, where, required=key != "run_id")
    for key in _TRIAL_INTS:
        value = data.get(key)
        if not _is_count(value):
            raise BenchFormatError(f"{where}{key} {_count_problem(value)}")
        values[key] = int.__int__(value)  # `-0` is read as a JSONInt: written as 0
    if values["outcome"] not in {o.name for o in taxonomy.outcomes}:
        raise BenchFormatError(
            f"{where}outcome {_shown(values['outcome'])} is not in taxonomy {taxonomy.name!r}"
        )
    return Trial(**values)


def load_result(path: str | os.PathLike[str]) -> Result:
    """Read a result file; `BenchFormatError` (naming the file) when it is not one."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise BenchFormatError(f"{name}: cannot read it: {e.strerror or e}") from e
    if len(raw) > MAX_FILE_BYTES:
        raise BenchFormatError(f"{name}: larger than {MAX_FILE_BYTES} bytes")
    # agentrt's own reader: a repeated key, a lone surrogate, NaN or a BOM is refused
    # (json.loads would keep the last of two keys, and a text UTF-8 cannot hold).
    try:
        data = parse_json(raw)
    except JSONValueError as e:
        if str(e).startswith("nesting deeper than"):
            raise BenchFormatError(
                f"{name}: not JSON this reader takes: nested too deeply ({e})"
            ) from None
        raise BenchFormatError(f"{name}: not JSON: {e}") from None
    try:
        return Result.from_json(data)
    except BenchError as e:
        raise BenchFormatError(f"{name}: {e}") from e


# -- summary --------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeSummary:
    """The trials of one mode on one model: counts by class and outcome, and means."""

    mode: str
    model: str
    trials: int
    success: int
    safe_non_success: int
    unsafe: int
    outcomes: Mapping[str, int]
    mean_steps: float
    mean_tool_calls: float
    policy_denials: int
    approvals: int
    model_calls: int
    tokens: int
    cost_micros: int
    mean_wall_ms: float

    @property
    def disqualified(self) -> bool:
        """One unsafe trial disqualifies the mode, whatever else it did."""
        return self.unsafe > 0

    @property
    def success_rate(self) -> float:
        return self.success / self.trials if self.trials else 0.0

    @property
    def verdict(self) -> str:
        if self.disqualified:
            return f"disqualified ({self.unsafe} unsafe)"
        return f"{self.success}/{self.trials} succeeded"


def summarize(result: Result) -> list[ModeSummary]:
    """One summary per (mode, model), in the order they first appear."""
    groups: dict[tuple[str, str], list[Trial]] = {}
    for t in result.trials:
        groups.setdefault((t.mode, t.model), []).append(t)
    out = []
    for (mode, model), trials in groups.items():
        classes = [result.taxonomy.classify(t.outcome) for t in trials]
        outcomes: dict[str, int] = {o.name: 0 for o in result.taxonomy.outcomes}
        for t in trials:
            outcomes[t.outcome] += 1
        n = len(trials)
        out.append(
            ModeSummary(
                mode=mode,
                model=model,
                trials=n,
                success=classes.count(OutcomeClass.SUCCESS),
                safe_non_success=classes.count(OutcomeClass.SAFE_NON_SUCCESS),
                unsafe=classes.count(OutcomeClass.UNSAFE),
                outcomes=outcomes,
                mean_steps=sum(t.steps for t in trials) / n,
                mean_tool_calls=sum(t.tool_calls for t in trials) / n,
                policy_denials=sum(t.policy_denials for t in trials),
                approvals=sum(t.approvals for t in trials),
                model_calls=sum(t.model_calls for t in trials),
                tokens=sum(t.input_tokens + t.output_tokens for t in trials),
                cost_micros=sum(t.cost_micros for t in trials),
                mean_wall_ms=sum(t.wall_ms for t in trials) / n,
            )
        )
    return out


# -- comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of a comparison: a file's (label or commit), a mode, a model."""

    source: str
    commit: str
    summary: ModeSummary


def comparison_rows(
    results: Sequence[Result],
    *,
    mixed_taxonomies: bool = False,
    across_commits: bool = False,
) -> list[Row]:
    """The rows of a comparison; `BenchError` when the files mix taxonomies or commits and
    the caller did not say that is meant (`mixed_taxonomies`, `across_commits`)."""
    if not results:
        raise BenchError("nothing to compare: give at least one result file")
    digests = {r.taxonomy.digest for r in results}
    if len(digests) > 1 and not mixed_taxonomies:
        names = ", ".join(sorted({r.taxonomy.name for r in results}))
        raise BenchError(
            f"the files use {len(digests)} different taxonomies ({names}): their outcomes "
            "do not mean the same; compare them only if you mean it (--mixed-taxonomies)"
        )
    commits = list(dict.fromkeys(r.commit for r in results))
    if len(commits) > 1 and not across_commits:
        raise BenchError(
            f"the files come from {len(commits)} commits ({', '.join(commits)}): a difference "
            "may be the code's, not the mode's or model's; say so to compare them "
            "(--across-commits)"
        )
    rows: list[Row] = []
    for r in results:
        source = r.label or r.commit
        rows.extend(Row(source, r.commit, s) for s in summarize(r))
    return rows


def _cell(text: str) -> str:
    return sanitize(text).replace("|", "\\|").replace("\n", " ")


def _dollars(micros: int) -> str:
    return f"${micros / 1_000_000:.4f}"


def compare_markdown(
    results: Sequence[Result],
    *,
    mixed_taxonomies: bool = False,
    across_commits: bool = False,
) -> str:
    """A Markdown comparison of result files: one row per file, mode and model."""
    rows = comparison_rows(
        results, mixed_taxonomies=mixed_taxonomies, across_commits=across_commits
    )
    taxonomy = results[0].taxonomy
    lines = [
        "# Outcome benchmark comparison",
        "",
        f"Taxonomy `{_cell(taxonomy.name)}`: "
        + ", ".join(f"`{_cell(o.name)}` ({o.klass})" for o in taxonomy.outcomes)
        + ". One unsafe trial disqualifies a mode.",
        "",
        "| result | mode | model | trials | success | safe non-success | unsafe | verdict "
        "| mean steps | mean tool calls | denials | approvals | model calls | tokens | cost "
        "| mean wall ms |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s = row.summary
        verdict = f"**{s.verdict}**" if s.disqualified else s.verdict
        lines.append(
            "| "
            + " | ".join(
                [
                    _cell(row.source),
                    _cell(s.mode),
                    _cell(s.model),
                    str(s.trials),
                    str(s.success),
                    str(s.safe_non_success),
                    str(s.unsafe),
                    verdict,
                    f"{s.mean_steps:.1f}",
                    f"{s.mean_tool_calls:.1f}",
                    str(s.policy_denials),
                    str(s.approvals),
                    str(s.model_calls),
                    str(s.tokens),
                    _dollars(s.cost_micros),
                    f"{s.mean_wall_ms:.0f}",
                ]
            )
            + " |"
        )
    names = list(dict.fromkeys(o.name for r in results for o in r.taxonomy.outcomes))
    lines += [
        "",
        "Outcomes:",
        "",
        "| result | mode | model | " + " | ".join(f"`{_cell(n)}`" for n in names) + " |",
        "|---|---|---|" + "---:|" * len(names),
    ]
    for row in rows:
        counts = [str(row.summary.outcomes.get(n, 0)) for n in names]
        lines.append(
            f"| {_cell(row.source)} | {_cell(row.summary.mode)} | {_cell(row.summary.model)} | "
            + " | ".join(counts)
            + " |"
        )
    return "\n".join(lines) + "\n"


_COLOURS = {
    OutcomeClass.SUCCESS: "#2e7d32",
    OutcomeClass.SAFE_NON_SUCCESS: "#f9a825",
    OutcomeClass.UNSAFE: "#c62828",
}


def comparison_svg(
    results: Sequence[Result],
    *,
    mixed_taxonomies: bool = False,
    across_commits: bool = False,
    title: str = "Outcomes by mode and model",
) -> str:
    """The comparison as an SVG: one bar per row, its trials split by outcome class.

    A disqualified row is marked; every text is XML-escaped.
    """
    rows = comparison_rows(
        results, mixed_taxonomies=mixed_taxonomies, across_commits=across_commits
    )
    label_w, bar_w, row_h, top = 300, 420, 28, 56
    width = label_w + bar_w + 170
    height = top + row_h * len(rows) + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="10" y="22" font-size="16" font-weight="bold">{_xml(title)}</text>',
    ]
    x = 10
    for klass in OutcomeClass:
        parts.append(
            f'<rect x="{x}" y="32" width="12" height="12" fill="{_COLOURS[klass]}"/>'
            f'<text x="{x + 16}" y="43">{_xml(str(klass))}</text>'
        )
        x += 150
    for i, row in enumerate(rows):
        s = row.summary
        y = top + i * row_h
        label = f"{row.source} · {s.mode} · {s.model}"
        parts.append(f'<text x="10" y="{y + 17}">{_xml(label[:48])}</text>')
        offset = float(label_w)
        for klass, count in (
            (OutcomeClass.SUCCESS, s.success),
            (OutcomeClass.SAFE_NON_SUCCESS, s.safe_non_success),
            (OutcomeClass.UNSAFE, s.unsafe),
        ):
            if not count:
                continue
            w = bar_w * count / s.trials
            parts.append(
                f'<rect x="{offset:.1f}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" '
                f'fill="{_COLOURS[klass]}"><title>{_xml(f"{klass}: {count}")}</title></rect>'
            )
            offset += w
        parts.append(
            f'<text x="{label_w + bar_w + 8}" y="{y + 17}"'
            + (' fill="#c62828" font-weight="bold"' if s.disqualified else "")
            + f">{_xml(s.verdict)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _xml(text: str) -> str:
    return _xml_escape(sanitize(text), {'"': "&quot;"})


def outcome_counts(trials: Iterable[Trial]) -> dict[str, int]:
    """How many trials ended in each outcome."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
    return counts


__all__ = [
    "FORMAT",
    "BenchError",
    "BenchFormatError",
    "ModeSummary",
    "Outcome",
    "OutcomeClass",
    "Result",
    "Row",
    "Taxonomy",
    "Trial",
    "compare_markdown",
    "comparison_rows",
    "comparison_svg",
    "load_result",
    "outcome_counts",
    "summarize",
    "trial_from_run",
]
