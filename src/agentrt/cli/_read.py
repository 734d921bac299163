"""The reading commands: `runs`, `approvals`, `show` and `events`.

Each opens the database read-only, reads one bounded page through the read
models (`agentrt.view`) or the event follower (`agentrt.export`), and prints
it as a table or fields at a terminal, or as one JSON document (JSON Lines for
events) with `--json`; every text from the database is escaped. A page that is
not the last ends with a hint: the command that shows the next one.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from .. import view
from .._errors import AgentrtError
from .._records import Approval
from .._render_approval import (
    HEAD_TAIL,
    INTERRUPTED_KIND,
    head_tail,
    interrupted_notice,
    json_literal,
    long_text,
    number,
    time_cell,
)
from ..export import DEFAULT_INTERVAL, MAX_PAGE_SIZE, CursorError, Follower, Sink
from ..trace import (
    ID_WIDTH,
    TYPE_WIDTH,
    JsonLinesObserver,
    TextObserver,
    clip,
    sanitize,
    shown,
)
from ._args import after_seqs, bounded, seconds, status
from ._opening import Refused, open_db
from ._output import EXIT_OK, Output, UsageError, again, arg, db_path

EVENTS_PAGE_DEFAULT = 100


def runs_arguments(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("--status", type=status, help="only runs with this status")
    runs.add_argument(
        "--limit",
        type=bounded(1, view.RUN_PAGE_MAX),
        default=view.RUN_PAGE_DEFAULT,
        help="runs per page (default %(default)s)",
    )
    runs.add_argument("--offset", type=bounded(0, None), default=0, help="runs to skip")


def approvals_arguments(approvals: argparse.ArgumentParser) -> None:
    approvals.add_argument(
        "--limit",
        type=bounded(1, view.PENDING_PAGE_MAX),
        default=view.PENDING_PAGE_DEFAULT,
        help="approvals to list (default %(default)s)",
    )


def show_arguments(show: argparse.ArgumentParser) -> None:
    show.add_argument("run", metavar="RUN")
    show.add_argument(
        "--limit",
        type=bounded(1, view.STEP_PAGE_MAX),
        default=view.STEP_PAGE_DEFAULT,
        help="steps to show (default %(default)s)",
    )
    show.add_argument(
        "--offset",
        type=bounded(0, None),
        default=None,
        help="index of the first step shown (default: the latest steps)",
    )


def events_arguments(events: argparse.ArgumentParser) -> None:
    events.add_argument(
        "run", metavar="RUN", nargs="?", default=None, help="the run (default: every run)"
    )
    events.add_argument(
        "--after",
        type=after_seqs,
        default=(0,),
        metavar="SEQ[,SEQ...]",
        help=(
            "start after this seq (default 0), or after one seq per chain partition, "
            "as the hint below a page prints them"
        ),
    )
    events.add_argument(
        "--follow",
        action="store_true",
        help="keep printing events as they commit, until interrupted",
    )
    events.add_argument(
        "--limit",
        type=bounded(1, None),
        default=None,
        metavar="N",
        help=f"print at most N events (default {EVENTS_PAGE_DEFAULT}; unlimited with --follow)",
    )
    events.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="with --follow, stop after this long",
    )
    events.add_argument(
        "--interval",
        type=seconds,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help="with --follow, how often to look (default %(default)s)",
    )
    events.add_argument(
        "--cursor",
        metavar="FILE",
        default=None,
        help="resume after the event saved in FILE, and save progress there",
    )


def _waiting_cell(summary: view.RunSummary) -> str:
    """Shown (escaped) text for the approvals a run waits on."""
    if not summary.waiting:
        return "-"
    if len(summary.waiting) > 1:
        return f"{len(summary.waiting)} pending"
    w = summary.waiting[0]
    return " ".join(shown(x) for x in (w.kind, w.tool) if x) or "pending"


def _reason_cell(reason: str) -> str:
    return reason or "-"


def cmd_runs(args: argparse.Namespace, out: Output) -> int:
    with open_db(args) as store, store.snapshot():  # the runs and their leases at one moment
        page = view.run_page(store, limit=args.limit, offset=args.offset, status=args.status)
    if out.json:
        out.document(
            {
                "total": page.total,
                "offset": page.offset,
                "limit": page.limit,
                "status": page.status,
                "next_offset": page.next_offset,
                "runs": [s.to_json() for s in page.runs],
            }
        )
        return EXIT_OK
    which = f" with status {page.status}" if page.status else ""
    if not page.runs:
        if page.total and page.offset >= page.total:
            out.line(f"no runs{which} at offset {page.offset}; there are {page.total}")
        else:
            out.line(f"no runs{which}")
        return EXIT_OK
    rows = [
        [
            shown(s.run.id),
            shown(s.run.status),
            "-" if s.lease is None else s.lease.state,
            shown(s.run.origin),
            shown(_reason_cell(s.run.reason)),
            number(s.run.step_count),
            number(s.run.model_calls),
            number(s.tokens),
            view.format_cost(s.run.estimated_cost_micros),
            _waiting_cell(s),
            shown(s.run.goal),
        ]
        for s in page.runs
    ]
    out.table(
        [
            "RUN",
            "STATUS",
            "LEASE",
            "ORIGIN",
            "REASON",
            "STEPS",
            "MODEL CALLS",
            "TOKENS",
            "COST",
            "WAITING",
            "GOAL",
        ],
        rows,
        right=frozenset({5, 6, 7, 8}),
        flex=10,
    )
    first, last = page.offset + 1, page.offset + len(page.runs)
    footer = f"runs {first}-{last} of {page.total}{which}, newest first"
    if page.next_offset is not None:
        words = ["runs", "--offset", str(page.next_offset)]
        if page.limit != view.RUN_PAGE_DEFAULT:
            words += ["--limit", str(page.limit)]
        if page.status:
            words += ["--status", arg(page.status)]
        footer += f"; next page: {again(args, *words)}"
    out.hint(footer)
    if any(s.lease is not None and s.lease.state != "held" for s in page.runs):
        out.hint(
            "LEASE owner_gone, lapsed or none: no live process holds the run, and its "
            f"program's resume takes it over; who held it: {again(args, 'show', 'RUN')}"
        )
    return EXIT_OK


def cmd_approvals(args: argparse.Namespace, out: Output) -> int:
    with open_db(args) as store:
        page = view.pending_page(store, limit=args.limit)
    if out.json:
        out.document(
            {
                "limit": page.limit,
                "more": page.more,
                "approvals": [p.to_json() for p in page.approvals],
            }
        )
        return EXIT_OK
    if not page.approvals:
        out.line("no approval is pending")
        return EXIT_OK
    rows = [
        [
            shown(a.run_id),
            shown(a.id),
            shown(a.kind),
            shown(a.tool) if a.tool else "-",
            time_cell(a.created_at),
            time_cell(a.expires_at) if a.expires_at else "never",
            shown(p.goal),
        ]
        for p in page.approvals
        for a in (p.approval,)
    ]
    out.table(["RUN", "APPROVAL", "KIND", "TOOL", "CREATED", "EXPIRES", "GOAL"], rows, flex=6)
    count = len(page.approvals)
    footer = f"{count} pending approval{'' if count == 1 else 's'}, newest first"
    if page.more:
        if page.limit < view.PENDING_PAGE_MAX:
            wider = again(args, "approvals", "--limit", str(view.PENDING_PAGE_MAX))
            footer += f"; more are waiting: {wider}"
        else:
            footer += f"; more than {number(page.limit)} are waiting"
    out.hint(footer)
    out.hint(
        "decide one (the request is shown first): "
        f"{again(args, 'approve', 'RUN', '--approval', 'ID')}   or   "
        f"{again(args, 'reject', 'RUN', '--approval', 'ID')}"
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    with open_db(args) as store, store.snapshot():  # the run and its lease at one moment
        run_id = view.resolve_run_id(store, args.run)
        detail = view.run_detail(store, run_id, step_limit=args.limit, step_offset=args.offset)
    lease = detail.summary.lease
    run = detail.summary.run
    steps = detail.steps
    if out.json:
        out.document(
            {
                "run": detail.summary.to_json(),
                "lease": None if lease is None else lease.to_json(),
                "waiting": [view.approval_json(a) for a in detail.waiting],
                "steps": [view.step_json(s.step) for s in steps.steps],
                "steps_total": steps.total,
                "steps_offset": steps.offset,
                "steps_limit": steps.limit,
            }
        )
        return EXIT_OK
    for approval in detail.waiting:
        _waiting_block(out, args, run.id, approval, several=len(detail.waiting) > 1)
        out.line()
    fields = [
        ("run", shown(run.id)),
        ("goal", long_text(run.goal, 1000, HEAD_TAIL)),
        ("status", shown(run.status)),
        *([] if lease is None else [("lease", sanitize(lease.words()))]),
        ("origin", shown(run.origin)),
        ("reason", shown(_reason_cell(run.reason))),
    ]
    if run.reason_detail:
        fields.append(("detail", head_tail(run.reason_detail, 1000, 400)))
    fields += [
        ("created", time_cell(run.created_at)),
        ("started", time_cell(run.started_at)),
        ("finished", time_cell(run.finished_at)),
        (
            "totals",
            f"{number(run.step_count)} steps, {number(run.model_calls)} model calls, "
            f"{number(detail.summary.tokens)} tokens (input {number(run.input_tokens)}, "
            f"output {number(run.output_tokens)}, cached {number(run.cached_input_tokens)}), "
            f"cost {view.format_cost(run.estimated_cost_micros)}, "
            f"active {view.format_duration(run.active_time)}",
        ),
    ]
    if run.result is not None:
        fields.append(("result", sanitize(clip(json_literal(run.result), 2000))))
    if run.decode_error:
        fields.append(("unreadable", sanitize(run.decode_error)))
    out.fields(fields)
    out.line()
    if not steps.steps:
        out.line("no steps")
        return EXIT_OK
    first, last = steps.offset, steps.offset + len(steps.steps) - 1
    out.line(f"steps {first}-{last} of {number(steps.total)} (by index, from 0)")
    rows = [
        [
            str(s.step.index),
            sanitize(str(s.step.status)),
            sanitize(s.decision),
            sanitize(s.policy),
            sanitize(s.observation),
        ]
        for s in steps.steps
    ]
    out.table(["IDX", "STATUS", "DECISION", "POLICY", "OBSERVATION"], rows, flex=2)
    if len(steps.steps) < steps.total:
        out.hint(
            f"showing {len(steps.steps)} of {number(steps.total)} steps; see others with "
            f"{again(args, 'show', arg(run.id), '--offset', 'N')} [--limit N] "
            f"(at most {view.STEP_PAGE_MAX})"
        )
    return EXIT_OK


def _waiting_block(
    out: Output, args: argparse.Namespace, run_id: str, approval: Approval, *, several: bool
) -> None:
    out.line(f"WAITING FOR APPROVAL {shown(approval.id)}")
    which = ("--approval", arg(approval.id)) if several else ()
    decide = again(args, "approve", arg(run_id), *which)
    also = again(args, "reject", arg(run_id), *which)
    out.fields(
        [
            ("kind", shown(approval.kind)),
            ("tool", sanitize(view.approval_tool(approval)) or "-"),
            ("hash", shown(approval.hash)),
            ("created", time_cell(approval.created_at)),
            ("expires", time_cell(approval.expires_at) if approval.expires_at else "never"),
            ("decide", f"{decide}   or   {also}"),
        ],
        indent="  ",
    )
    if approval.kind == INTERRUPTED_KIND:
        out.line(f"  {interrupted_notice(approval)}")


def cmd_events(args: argparse.Namespace, out: Output) -> int:
    path = db_path(args)
    # Opened first for its checks and refusals (and to know the run exists); the follower
    # then opens its own read-only connection.
    with open_db(args) as store:
        if args.run is not None:
            args.run = view.resolve_run_id(store, args.run)
        partitions = len(store.chain_heads())
    if len(args.after) not in (1, partitions):
        raise UsageError(
            f"--after names {len(args.after)} seqs and this database's chain has "
            f"{partitions} partition(s): give one seq, or one per partition as a hint prints"
        )
    show_run = args.run is None
    if out.json:
        sink: Sink = JsonLinesObserver(out.stdout)
    else:
        limit = 300 if out.width is None else max(40, out.width - (ID_WIDTH + 70))
        sink = TextObserver(out.stdout, show_run=show_run, detail_limit=limit)
    try:
        follower = Follower(
            path,
            run_id=args.run,
            cursor=args.cursor,
            interval=args.interval,
            page_size=min(args.limit or MAX_PAGE_SIZE, 500),
            after_seq=args.after,
        )
    except AgentrtError as e:
        if isinstance(e, CursorError):
            raise
        raise Refused(path, e) from e
    # SIGINT and SIGTERM stop between pages on both paths: the page being printed is
    # finished and acknowledged, so a cursor file never lags what was printed.
    with follower, _stop_on_signals() as stop:
        if not out.json:  # once the cursor is taken: a refusal prints nothing on stdout
            out.line(events_header(show_run))
        if not args.follow:
            follower.run(
                sink, follow=False, stop=stop, max_events=args.limit or EVENTS_PAGE_DEFAULT
            )
            if follower.poll(1):
                _next_page_hint(out, args, follower)
            return EXIT_OK
        follower.run(sink, stop=stop, max_events=args.limit, timeout=args.timeout)
    return EXIT_OK


def _next_page_hint(out: Output, args: argparse.Namespace, follower: Follower) -> None:
    """The command that prints the next page: after the last event shown, or, when the
    chain has more than one partition and every run is shown, after the last shown of
    each partition (one seq cannot say where N chains stopped; decision 0095)."""
    after = follower.after
    words = ["events"] if args.run is None else ["events", arg(str(args.run))]
    place = ",".join(str(seq) for seq in after)
    more = again(args, *words, "--after", place)
    if len(after) == 1:
        out.hint(f"more events after seq {place}: {more}")
    else:
        out.hint(
            f"more events after seq {place} (the last shown of each of the "
            f"{len(after)} chain partitions): {more}"
        )


def events_header(show_run: bool) -> str:
    """The column heads above `TextObserver` lines."""
    parts = ["   SEQ", "AT".ljust(27)]
    if show_run:
        parts.append("RUN".ljust(ID_WIDTH))
    parts += ["STEP".ljust(ID_WIDTH), "TYPE".ljust(TYPE_WIDTH), "PAYLOAD"]
    return "  ".join(parts)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM, so following stops cleanly between pages.

    A second signal ends the command at once (`KeyboardInterrupt`, "interrupted", exit
    1): the page being delivered cannot always finish (a reader that stopped reading
    leaves a write blocked for ever), and it is then left unacknowledged, so a cursor
    file never gets ahead of what was delivered."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


__all__ = ["cmd_approvals", "cmd_events", "cmd_runs", "cmd_show", "events_header"]
