"""Policy conformance: a table of requests and the outcome a policy must give each.

`check_policy(policy, table)` puts every row to the policy exactly as the
driver would (the same `ToolRequest` and `RunView` shapes, args checked against
the tool's schema first, the decision validated the same way), and reports
every row whose outcome differs from the one expected. A row names the tool by
its spec, the tool itself, or only a side effect (a generic tool of that kind
is made up), the arguments, and the expectation:

- an outcome: `"allow"`, `"deny"`, `"abort"`, `"require_approval"`, or
  `"require_approval:<kind>"` to pin the approval kind too;
- `"invalid_args"`: the arguments fail the schema, so the policy is never asked;
- `"error"`: the policy raises or returns what the runtime refuses (the run
  would end `internal_error`);
- a `PolicyDecision`: exactly that decision.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .. import (
    ConfigError,
    Limits,
    Policy,
    PolicyDecision,
    PolicyOutcome,
    Run,
    RunStatus,
    RunView,
    SideEffect,
    ToolRequest,
    ToolSpec,
    check_args,
)
from ..lowlevel import JSON, copy_json, policy_id_of, validate_policy_decision
from ..lowlevel import evaluate as evaluate_policy

INVALID_ARGS = "invalid_args"
ERROR = "error"
_OUTCOMES = {str(o) for o in PolicyOutcome}

Expectation = str | PolicyOutcome | PolicyDecision


@dataclass(frozen=True)
class PolicyCase:
    """One row: a tool (spec, tool, or side effect), its args, and the expected outcome."""

    tool: Any
    args: JSON
    expect: Expectation
    name: str = ""
    view: RunView | None = None


@dataclass(frozen=True)
class CaseOutcome:
    """What the policy did with one row, and whether that is what the row expected."""

    case: PolicyCase
    spec: ToolSpec
    got: str  # "allow", "require_approval:<kind>", "invalid_args", "error: ..."
    decision: PolicyDecision | None
    ok: bool

    @property
    def label(self) -> str:
        return self.case.name or f"{self.spec.name}({_short(self.case.args)})"


@dataclass(frozen=True)
class ConformanceReport:
    """The outcome of `check_policy`: each case, what was expected and what the policy gave.

    `assert_ok()` raises `AssertionError` with the table when any case does not match.
    """

    policy_id: str
    outcomes: tuple[CaseOutcome, ...]

    @property
    def mismatches(self) -> list[CaseOutcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        rows = [("", "case", "expected", "got")]
        rows += [
            ("✓" if o.ok else "✗", o.label, _expected_label(o.case.expect), o.got)
            for o in self.outcomes
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            f"policy {self.policy_id!r}: {len(self.outcomes)} cases, "
            f"{len(self.mismatches)} mismatch(es)"
        ]
        lines += [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        return "\n".join(lines)


def check_policy(policy: Policy, table: Iterable[PolicyCase | Sequence[Any]]) -> ConformanceReport:
    """Put every row of `table` to `policy`; report what it decided against what was expected.

    Rows are `PolicyCase`s or tuples `(tool, args, expect[, name])`. A coroutine
    policy is run to completion (on a private event loop when one is running).
    """
    cases = [_as_case(row) for row in table]
    outcomes = _run(_evaluate_all(policy, cases))
    return ConformanceReport(policy_id_of(policy), tuple(outcomes))


def _as_case(row: PolicyCase | Sequence[Any]) -> PolicyCase:
    if isinstance(row, PolicyCase):
        return row
    if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) not in (3, 4):
        raise ConfigError(f"a conformance row is (tool, args, expect[, name]); got {row!r}")
    return PolicyCase(row[0], row[1], row[2], str(row[3]) if len(row) == 4 else "")


def spec_of(tool: Any) -> ToolSpec:
    """The spec a row names: a ToolSpec, a tool's `.spec`, or a made-up tool of a side effect."""
    if isinstance(tool, ToolSpec):
        return tool
    spec = getattr(tool, "spec", None)
    if isinstance(spec, ToolSpec):
        return spec
    try:
        side_effect = SideEffect(tool)
    except ValueError as exc:
        raise ConfigError(f"a row names a ToolSpec, a tool or a side effect; got {tool!r}") from exc
    return ToolSpec(
        name=f"{side_effect.value}_tool",
        description=f"a tool whose side effect is {side_effect.value}",
        input_schema={"type": "object"},
        side_effect=side_effect,
        timeout=timedelta(seconds=30),
    )


async def _evaluate_all(policy: Policy, cases: list[PolicyCase]) -> list[CaseOutcome]:
    out: list[CaseOutcome] = []
    for number, case in enumerate(cases):
        spec = spec_of(case.tool)
        args = {} if case.args is None else case.args
        decision: PolicyDecision | None = None
        if check_args(spec, args):
            got = INVALID_ARGS
        else:
            request = ToolRequest(
                run_id="conformance", step_id=f"case-{number}", spec=spec, args=copy_json(args)
            )
            try:
                result = await evaluate_policy(policy, request, case.view or _empty_view())
                error = validate_policy_decision(result)
            except Exception as exc:  # the policy is consumer code; its failure is a finding
                result, error = None, f"{type(exc).__name__}: {exc}"
            if error is not None or result is None:
                got = f"{ERROR}: {error}"
            else:
                decision = result
                got = _decision_label(result)
        out.append(CaseOutcome(case, spec, got, decision, _matches(case.expect, got, decision)))
    return out


def _decision_label(decision: PolicyDecision) -> str:
    if decision.outcome == PolicyOutcome.REQUIRE_APPROVAL:
        return f"{decision.outcome}:{decision.kind}"
    return str(decision.outcome)


def _matches(expect: Expectation, got: str, decision: PolicyDecision | None) -> bool:
    if isinstance(expect, PolicyDecision):
        return decision is not None and decision == expect
    text = str(expect)
    if text == ERROR:
        return got.startswith(f"{ERROR}:")
    if text == INVALID_ARGS:
        return got == INVALID_ARGS
    outcome, _, kind = text.partition(":")
    if outcome not in _OUTCOMES:
        raise ConfigError(
            f"unknown expectation {text!r}: use an outcome ({', '.join(sorted(_OUTCOMES))}), "
            f"'require_approval:<kind>', '{INVALID_ARGS}', '{ERROR}' or a PolicyDecision"
        )
    if decision is None or decision.outcome != outcome:
        return False
    return not kind or decision.kind == kind


def _expected_label(expect: Expectation) -> str:
    if isinstance(expect, PolicyDecision):
        return _decision_label(expect) + " (exact)"
    return str(expect)


def _short(args: JSON) -> str:
    text = repr(args)
    return text if len(text) <= 40 else text[:37] + "..."


def _empty_view() -> RunView:
    run = Run(
        id="conformance",
        goal="",
        status=RunStatus.RUNNING,
        reason="",
        reason_detail="",
        limits=Limits(),
        step_count=0,
        created_at=None,
        started_at=None,
        finished_at=None,
        result=None,
    )
    return RunView(run=run, steps=(), approvals=())


def _run(coro: Coroutine[Any, Any, list[CaseOutcome]]) -> list[CaseOutcome]:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from async code: a private loop on a helper thread, so a coroutine
    # policy can still be awaited without re-entering the caller's loop.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
