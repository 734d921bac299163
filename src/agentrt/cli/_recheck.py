"""`agentrt recheck`: would the policy given now have decided a run's calls the same?

`agentrt recheck RUN --policy module:attr` re-asks the policy about every policy
evaluation the run recorded (`agentrt.recheck`) and prints the differences
first, one line each, then what could not be re-checked, then the rest, then a
summary; `--all --since T` re-checks every run created since `T`, printing the
differing lines of each and a summary. `--json` prints the reports as one JSON
document. Exit 1 when any evaluation differs, 0 otherwise (what could not be
re-checked is said, not failed: decision 0073), 2 on usage errors (a policy or
tools reference that cannot be loaded included).

The policy (and `--tools`) is the operator's own code, imported and run in
this process; the database is opened read-only and nothing is written. Every
text from the record (tool names, reasons, policy ids) is escaped by
`trace.sanitize` and clipped before it reaches the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .. import view
from .._clock import format_time
from .._recheck import RecheckReport, RecheckVerdict, recheck, registration
from .._store._records import RunCursor
from ..trace import sanitize
from ._opening import open_db
from ._output import EXIT_ERROR, EXIT_OK, Output, UsageError

REASON_WIDTH = 120
"""Columns of a reason (the policy's words) shown on a difference's line."""
_PAGE = 200
_ORDER = {
    RecheckVerdict.DIFFERENT: 0,
    RecheckVerdict.NOT_RECHECKABLE: 1,
    RecheckVerdict.SAME: 2,
    RecheckVerdict.NOT_A_POLICY_EVALUATION: 3,
}


def recheck_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", nargs="?", default=None, help="the run to re-check")
    parser.add_argument(
        "--policy",
        metavar="MODULE:ATTR",
        default=None,
        help="the policy to ask now: a Policy, or a function of no arguments returning one",
    )
    parser.add_argument(
        "--tools",
        metavar="MODULE:ATTR",
        default=None,
        help="the current tools (a list, or a function returning one), for specs the record lacks",
    )
    parser.add_argument(
        "--all", action="store_true", help="re-check every run created since --since"
    )
    parser.add_argument(
        "--since",
        metavar="TIME",
        default=None,
        help="with --all: runs created at or after this UTC time (2026-05-01 or "
        "2026-05-01T09:00:00Z)",
    )


def cmd_recheck(args: argparse.Namespace, out: Output) -> int:
    if args.all and args.run is not None:
        raise UsageError("give a RUN or --all, not both")
    if not args.all and args.run is None:
        raise UsageError("say which run: agentrt recheck RUN --policy MODULE:ATTR (or --all)")
    if args.all and args.since is None:
        raise UsageError("--all needs --since TIME: the runs created at or after it")
    if not args.all and args.since is not None:
        raise UsageError("--since goes with --all")
    if not args.policy:
        raise UsageError("say which policy to ask now: --policy MODULE:ATTR")
    since = _since(args.since) if args.all else None
    # The operator's code prints where it likes: never into the report (or its JSON).
    with contextlib.redirect_stdout(out.stderr):
        return _recheck(args, out, since)


def _recheck(args: argparse.Namespace, out: Output, since: datetime | None) -> int:
    policy = _load(args.policy, "policy", want_policy=True)
    tools = _load(args.tools, "tools", want_policy=False) if args.tools else None
    if tools is not None:
        try:
            registration(tools)
        except TypeError as exc:
            raise UsageError(f"--tools {sanitize(args.tools)}: {sanitize(str(exc))}") from None
    with open_db(args) as store:
        if since is None:
            report = recheck(store, view.resolve_run_id(store, args.run), policy, tools)
            return _one(out, report)
        reports: list[RecheckReport] = []
        after: RunCursor | None = None
        while True:
            page = store.run_ids_created_since(since, after, _PAGE)
            reports.extend(recheck(store, run_id, policy, tools) for _, run_id in page)
            if len(page) < _PAGE:
                break
            after = page[-1][0]
    return _many(out, reports, format_time(since))


def _since(text: str) -> datetime:
    """`text` as stored time (UTC); a date alone is its midnight."""
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith("Z") else raw)
    except ValueError:
        raise UsageError(
            f"--since {sanitize(text)!r} is not a time: give 2026-05-01 or 2026-05-01T09:00:00Z"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-01:00 is past the calendar in UTC
        raise UsageError(
            f"--since {sanitize(text)!r} is not a time: in UTC it is beyond the calendar"
        ) from None


def _load(ref: str, what: str, *, want_policy: bool) -> Any:
    """Import `module:attr`; call it when it is a factory. A bad reference is a usage error."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--{what} is MODULE:ATTR (pkg.mod:name), got {sanitize(ref)!r}")
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:  # the operator's module ended its import: not this command
        raise UsageError(
            f"cannot import {sanitize(module_name)!r} for --{what}: it exited ({exc.code!r})"
        ) from None
    except Exception as exc:  # the operator's module: any failure to import it is theirs
        raise UsageError(
            f"cannot import {sanitize(module_name)!r} for --{what}: {sanitize(str(exc))}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise UsageError(f"{sanitize(module_name)!r} has no {sanitize(attr)!r} (--{what})")
        target = getattr(target, part)
    if want_policy:
        ready = hasattr(target, "evaluate") and not isinstance(target, type)
    else:
        ready = not callable(target)
    if not ready and callable(target):
        try:
            target = target()
        except SystemExit as exc:  # the operator's factory ended the process: refused
            raise UsageError(f"--{what} {sanitize(ref)} exited ({exc.code!r})") from None
        except Exception as exc:  # the operator's factory
            raise UsageError(f"--{what} {sanitize(ref)} raised {sanitize(repr(exc))}") from exc
    if want_policy and not callable(getattr(target, "evaluate", None)):
        raise UsageError(f"--policy {sanitize(ref)} is not a policy (it has no evaluate)")
    if want_policy:
        return target
    if isinstance(target, str | bytes | Mapping) or not isinstance(target, Iterable):
        raise UsageError(f"--tools {sanitize(ref)} is not a list of tools")
    return list(target)


def _lines(report: RecheckReport, verdicts: Sequence[str]) -> list[str]:
    chosen = [e for e in report.evaluations if e.verdict in verdicts]
    chosen.sort(key=lambda e: (_ORDER[RecheckVerdict(e.verdict)], e.seq))
    return [e.line(report.run_id) for e in chosen]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _counts(report: RecheckReport) -> str:
    return ", ".join(f"{n} {verdict}" for verdict, n in report.counts().items())


def _one(out: Output, report: RecheckReport) -> int:
    differs = bool(report.differences)
    if out.json:
        out.document(report.to_json())
        return EXIT_ERROR if differs else EXIT_OK
    out.lines(_lines(report, tuple(RecheckVerdict)))
    policy = sanitize(report.policy_id) or '""'
    recorded = ", ".join(sanitize(p) for p in report.recorded_policy_ids) or "none"
    changed = "changed" if report.policy_changed else "unchanged"
    state = "ended" if report.ended else "not yet ended"
    out.line(
        f"{len(report.evaluations)} evaluations: {_counts(report)}; policy {policy} "
        f"({changed}; recorded: {recorded}); run {sanitize(str(report.run_status))}, {state}"
    )
    return EXIT_ERROR if differs else EXIT_OK


def _many(out: Output, reports: Sequence[RecheckReport], since: str) -> int:
    changed = [r for r in reports if r.differences]
    unchecked = [r for r in reports if r.count(RecheckVerdict.NOT_RECHECKABLE)]
    summary = {
        "runs": len(reports),
        "runs_changed": len(changed),
        "runs_with_not_recheckable": len(unchecked),
        "evaluations": sum(len(r.evaluations) for r in reports),
        "different": sum(r.count(RecheckVerdict.DIFFERENT) for r in reports),
        "not_recheckable": sum(r.count(RecheckVerdict.NOT_RECHECKABLE) for r in reports),
    }
    if out.json:
        out.document({"since": since, "summary": summary, "runs": [r.to_json() for r in reports]})
        return EXIT_ERROR if changed else EXIT_OK
    for report in changed:
        out.lines(_lines(report, (RecheckVerdict.DIFFERENT,)))
    for report in unchecked:
        out.lines(_lines(report, (RecheckVerdict.NOT_RECHECKABLE,)))
    out.line(
        f"{_plural(summary['runs'], 'run')} since {sanitize(since)}: "
        f"{summary['runs_changed']} would have changed "
        f"({summary['different']} of {summary['evaluations']} evaluations differ), "
        f"{summary['runs_with_not_recheckable']} with evaluations not re-checkable"
    )
    return EXIT_ERROR if changed else EXIT_OK


__all__ = ["cmd_recheck", "recheck_arguments"]
