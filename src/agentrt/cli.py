"""The `agentrt` command: see every run, decide every approval, verify the record, follow the log.

This module owns the command line: parsing (stdlib `argparse`; options before
or after the command), opening the database the way each command needs it,
rendering (aligned tables at a terminal, the same columns unclipped when piped,
JSON with `--json`), the approval display and confirmation, and exit codes:
0 ok, 1 error or refusal, 2 usage.

Rules it keeps: it opens an existing database only and never creates or
migrates one; `runs`, `approvals`, `show`, `events` and `verify` open it
read-only and read bounded pages; `approve`/`reject` print the request field by
field, then decide bound to the hash they printed, and need `--approval`,
`--yes` or a `y` typed at a terminal; every text from the database is escaped by
`trace.sanitize` before it reaches the terminal. A RUN may be given by a unique
prefix of its id (at least 8 characters); an ambiguous one is refused naming
its candidates. Every command it prints for the operator to run carries the
`--db` it was given, quoted for a shell. There is no `resume` (see `--help`).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, TextIO

from . import view
from .approval import verify_stored
from .canonical import to_text
from .clock import format_time
from .errors import (
    AgentrtError,
    ApprovalChangedError,
    ApprovalHashError,
    HardLinkError,
    InsecureDirectoryError,
    InsecureModeError,
    SchemaVersionError,
    StoreError,
    SymlinkError,
    UnreadableSchemaError,
    UnsafeSchemaError,
)
from .export import DEFAULT_INTERVAL, MAX_PAGE_SIZE, CursorError, Follower, Sink
from .operator import Operator
from .records import JSON, Approval, ChainBreak, FileCheck, RunStatus, VerifyReport
from .store import Store, capped_length, open_existing
from .trace import (
    ID_WIDTH,
    TYPE_WIDTH,
    JsonLinesObserver,
    TextObserver,
    capped_note,
    clip,
    display_width,
    json_line,
    sanitize,
    shown,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

EVENTS_PAGE_DEFAULT = 100
LONG_STRING = 200
"""Strings longer than this are shown in an approval as head and tail."""
HEAD_TAIL = 80
LONG_KEY = 64
"""Keys longer than this are shown in a field path as head, tail, length and hash."""
KEY_HASH = 12
"""Hex digits of a long key's SHA-256 shown in its path."""

INTERRUPTED_KIND = "interrupted_side_effect"

_NO_RESUME = (
    "There is no `resume` command. Resuming a run executes its tools, and that needs the "
    "agent, the tools, the policy and the reconciliation of the program that owns the "
    "run; none of them is in the database. Decide here (approve, reject, cancel); the "
    "program resumes the run with Driver.resume(run_id), or finds it with "
    "Driver.recover() when it starts."
)

_EPILOG = f"""\
The database is --db PATH or the AGENTRT_DB environment variable. agentrt opens
an existing database only: it never creates or migrates one. runs, approvals,
show, events and verify open it read-only and read one bounded page at a time.
RUN may be a unique prefix of a run id, at least 8 characters long.

{textwrap.fill(_NO_RESUME, 79)}

Text from models and servers (goals, arguments, results) is shown with control,
bidi, zero-width and other invisible characters escaped (\\x1b, \\u202e, ...).

Exit status: 0 ok, 1 error or refusal, 2 usage.
"""

_GLOBAL_VALUE_OPTIONS = ("--db",)


class UsageError(Exception):
    """The command line asks for something malformed: exit 2."""


class Refusal(Exception):
    """The operator did not confirm, or the command refuses to go on: exit 1, nothing changed."""


# --- output -------------------------------------------------------------------------------------


class Output:
    """Where the command writes: stdout for results, stderr for errors (and hints in JSON mode)."""

    def __init__(self, *, json_mode: bool) -> None:
        self.stdout: TextIO = sys.stdout
        self.stderr: TextIO = sys.stderr
        self.json = json_mode
        self.tty = _isatty(self.stdout)
        self.width = shutil.get_terminal_size().columns if self.tty else None

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def hint(self, text: str) -> None:
        """A note about the output (more pages...): never mixed into JSON on stdout."""
        (self.stderr if self.json else self.stdout).write(text + "\n")

    def document(self, value: Any) -> None:
        self.line(json_line(value))

    def error(self, text: str) -> None:
        self.stderr.write(f"agentrt: {text}\n")

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        right: frozenset[int] = frozenset(),
        flex: int | None = None,
    ) -> None:
        for text in render_table(headers, rows, right=right, flex=flex, width=self.width):
            self.line(text)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: frozenset[int] = frozenset(),
    flex: int | None = None,
    width: int | None = None,
) -> list[str]:
    """Aligned columns, two spaces apart. Cells must be sanitized already.

    With a `width` (a terminal's), the `flex` column is clipped so that lines fit
    when they can; without one nothing is clipped, so piped output is complete.
    """
    widths = [display_width(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], display_width(cell))
    if width is not None and flex is not None:
        total = sum(widths) + 2 * (len(widths) - 1)
        if total > width:
            widths[flex] = max(display_width(headers[flex]), widths[flex] - (total - width), 8)

    def fmt(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            text = clip(cell, widths[i])
            pad = " " * (widths[i] - display_width(text))
            parts.append(pad + text if i in right else text + pad)
        return "  ".join(parts).rstrip()

    return [fmt(headers), *(fmt(row) for row in rows)]


def _json_literal(value: JSON) -> str:
    try:
        return to_text(value)
    except (ValueError, TypeError):  # not JSON: still show something, escaped by the caller
        return repr(value)


def _quoted(text: str) -> str:
    """A string as a JSON literal, then sanitized: quotes and escapes make every character exact."""
    return sanitize(json.dumps(text, ensure_ascii=False))


def _number(n: int) -> str:
    return f"{n:,}"


def _time(value: Any) -> str:
    return format_time(value) if value is not None else "-"


# --- opening ------------------------------------------------------------------------------------


def _db_path(args: argparse.Namespace) -> str:
    path = getattr(args, "db", None) or os.environ.get("AGENTRT_DB", "")
    if not path:
        raise UsageError("no database given: pass --db PATH or set AGENTRT_DB")
    return str(path)


def _open(args: argparse.Namespace, *, write: bool = False) -> Store:
    path = _db_path(args)
    if not os.path.lexists(path):
        raise StoreError(
            f"no database at {path} (agentrt opens existing databases only and never creates one)"
        )
    try:
        return open_existing(path, read_only=not write)
    except AgentrtError as e:
        raise _Refused(path, e) from e


class _Refused(Exception):
    """The database itself was refused at open; carries one sentence for the operator."""

    def __init__(self, path: str, error: AgentrtError) -> None:
        super().__init__(refusal_sentence(path, error))


def refusal_sentence(path: str, error: AgentrtError) -> str:
    """One sentence saying why the database at `path` was refused."""
    if isinstance(error, SymlinkError):
        return (
            f"refusing {path}: it is a symlink, and agentrt opens only the database file "
            "itself, never a link to it"
        )
    if isinstance(error, HardLinkError):
        return (
            f"refusing {path}: it has another name (a second hard link), which could be "
            "changed out of sight of agentrt's checks; keep only one name for the database"
        )
    if isinstance(error, InsecureDirectoryError):
        return f"refusing {path}: {error}"
    if isinstance(error, InsecureModeError):
        return f"refusing {path}: {_insecure_reason(path, str(error))}"
    if isinstance(error, UnreadableSchemaError):
        return (
            f"refusing {path}: its schema (the list of its tables and indexes) is damaged or "
            "was edited by hand, so agentrt cannot check that it is safe to use"
        )
    if isinstance(error, UnsafeSchemaError):
        return (
            f"refusing {path}: it holds a trigger or a view, which could run hidden code "
            "whenever agentrt reads or writes it"
        )
    if isinstance(error, SchemaVersionError):
        return f"refusing {path}: {error}"
    return f"cannot open {path}: {error}"


# What `filesafety` says when it refuses a file (InsecureModeError), read back so
# that the sentence names the problem the file actually has.
_WHAT = r"(?P<what>database|[a-z]+ file) (?P<file>.+)"
_OWNED = re.compile(
    _WHAT + r" is owned by uid (?P<uid>[0-9]+), not by this process \(uid (?P<me>[0-9]+)\)"
)
_WRITABLE = re.compile(_WHAT + r" is writable by group or others \(mode (?P<mode>[0-7]+)\)")
_NOT_REGULAR = re.compile(r"(?P<file>.+) is not a regular file \(an? (?P<kind>[a-z ]+)\)")
_CANNOT = re.compile(r"cannot (?P<verb>inspect|tighten) (?P<file>.+?)(?: to 0600)?: (?P<why>.+)")


def _subject(path: str, what: str, file: str) -> str:
    if file == path:
        return "it"
    return f"the database {file}" if what == "database" else f"its -{what} {file}"


def _insecure_reason(path: str, message: str) -> str:
    """Why the file at `path` (or a -wal, -shm or -journal file beside it) is refused."""
    message = message.strip()
    if m := _WRITABLE.match(message):
        return (
            f"{_subject(path, m['what'], m['file'])} is writable by group or others (mode "
            f"{m['mode']}), and anyone who can write it can forge an approval; make it "
            "owner-only (chmod 600)"
        )
    if m := _OWNED.match(message):
        return (
            f"{_subject(path, m['what'], m['file'])} is owned by uid {m['uid']}, not by you "
            f"(uid {m['me']}), and its owner could rewrite any record or forge an approval"
        )
    if m := _NOT_REGULAR.match(message):
        return (
            f"{m['file']} is a {m['kind']}, not a regular file, so agentrt will not open the "
            "database beside it; move it out of the way"
        )
    if m := _CANNOT.match(message):
        return f"agentrt cannot {m['verb']} {m['file']} ({m['why'].rstrip('.')})"
    # Anything else, in the store's own words, kept to one sentence.
    return message.rstrip(".").replace(". ", "; ")


# --- commands: reading --------------------------------------------------------------------------


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
    with _open(args) as store:
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
            shown(_reason_cell(s.run.reason)),
            _number(s.run.step_count),
            _number(s.run.model_calls),
            _number(s.tokens),
            view.format_cost(s.run.estimated_cost_micros),
            _waiting_cell(s),
            shown(s.run.goal),
        ]
        for s in page.runs
    ]
    out.table(
        ["RUN", "STATUS", "REASON", "STEPS", "MODEL CALLS", "TOKENS", "COST", "WAITING", "GOAL"],
        rows,
        right=frozenset({3, 4, 5, 6}),
        flex=8,
    )
    first, last = page.offset + 1, page.offset + len(page.runs)
    footer = f"runs {first}-{last} of {page.total}{which}, newest first"
    if page.next_offset is not None:
        words = ["runs", "--offset", str(page.next_offset)]
        if page.limit != view.RUN_PAGE_DEFAULT:
            words += ["--limit", str(page.limit)]
        if page.status:
            words += ["--status", _arg(page.status)]
        footer += f"; next page: {_again(args, *words)}"
    out.hint(footer)
    return EXIT_OK


def cmd_approvals(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
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
            _time(a.created_at),
            _time(a.expires_at) if a.expires_at else "never",
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
            wider = _again(args, "approvals", "--limit", str(view.PENDING_PAGE_MAX))
            footer += f"; more are waiting: {wider}"
        else:
            footer += f"; more than {_number(page.limit)} are waiting"
    out.hint(footer)
    out.hint(
        "decide one (the request is shown first): "
        f"{_again(args, 'approve', 'RUN', '--approval', 'ID')}   or   "
        f"{_again(args, 'reject', 'RUN', '--approval', 'ID')}"
    )
    return EXIT_OK


def _head_tail(text: str, limit: int = LONG_STRING, keep: int = HEAD_TAIL) -> str:
    """A long string as quoted head and tail with the count of characters not shown.

    Text a read cut at its cap has no tail to show: its head, and how long it is
    and how much of it was read (`(70,117 chars; the first 65,536 read, 80 shown)`).
    """
    full = capped_length(text)
    if full is not None:
        if len(text) <= keep:
            return _quoted(str(text)) + capped_note(text)
        return (
            f"{_quoted(text[:keep])} … ({_number(full)} chars; the first {_number(len(text))} "
            f"read, {_number(keep)} shown)"
        )
    if len(text) <= limit:
        return _quoted(text)
    hidden = len(text) - 2 * keep
    return f"{_quoted(text[:keep])} … {_number(hidden)} chars not shown … {_quoted(text[-keep:])}"


def _long_text(text: str, limit: int, keep: int) -> str:
    """Text as itself (escaped) when short and whole, else as `_head_tail` shows it."""
    if len(text) <= limit and capped_length(text) is None:
        return sanitize(text)
    return _head_tail(text, limit, keep)


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        run_id = view.resolve_run_id(store, args.run)
        detail = view.run_detail(store, run_id, step_limit=args.limit, step_offset=args.offset)
    run = detail.summary.run
    steps = detail.steps
    if out.json:
        out.document(
            {
                "run": detail.summary.to_json(),
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
        ("goal", _long_text(run.goal, 1000, HEAD_TAIL)),
        ("status", shown(run.status)),
        ("reason", shown(_reason_cell(run.reason))),
    ]
    if run.reason_detail:
        fields.append(("detail", _head_tail(run.reason_detail, 1000, 400)))
    fields += [
        ("created", _time(run.created_at)),
        ("started", _time(run.started_at)),
        ("finished", _time(run.finished_at)),
        (
            "totals",
            f"{_number(run.step_count)} steps, {_number(run.model_calls)} model calls, "
            f"{_number(detail.summary.tokens)} tokens (input {_number(run.input_tokens)}, "
            f"output {_number(run.output_tokens)}, cached {_number(run.cached_input_tokens)}), "
            f"cost {view.format_cost(run.estimated_cost_micros)}, "
            f"active {view.format_duration(run.active_time)}",
        ),
    ]
    if run.result is not None:
        fields.append(("result", sanitize(clip(_json_literal(run.result), 2000))))
    if run.decode_error:
        fields.append(("unreadable", sanitize(run.decode_error)))
    _fields(out, fields)
    out.line()
    if not steps.steps:
        out.line("no steps")
        return EXIT_OK
    first, last = steps.offset, steps.offset + len(steps.steps) - 1
    out.line(f"steps {first}-{last} of {_number(steps.total)} (by index, from 0)")
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
            f"showing {len(steps.steps)} of {_number(steps.total)} steps; see others with "
            f"{_again(args, 'show', _arg(run.id), '--offset', 'N')} [--limit N] "
            f"(at most {view.STEP_PAGE_MAX})"
        )
    return EXIT_OK


def _fields(out: Output, fields: Sequence[tuple[str, str]], indent: str = "") -> None:
    width = max(display_width(k) for k, _ in fields)
    for key, value in fields:
        out.line(f"{indent}{key.ljust(width)}  {value}".rstrip())


def _waiting_block(
    out: Output, args: argparse.Namespace, run_id: str, approval: Approval, *, several: bool
) -> None:
    out.line(f"WAITING FOR APPROVAL {shown(approval.id)}")
    which = ("--approval", _arg(approval.id)) if several else ()
    decide = _again(args, "approve", _arg(run_id), *which)
    also = _again(args, "reject", _arg(run_id), *which)
    _fields(
        out,
        [
            ("kind", shown(approval.kind)),
            ("tool", sanitize(view.approval_tool(approval)) or "-"),
            ("hash", shown(approval.hash)),
            ("created", _time(approval.created_at)),
            ("expires", _time(approval.expires_at) if approval.expires_at else "never"),
            ("decide", f"{decide}   or   {also}"),
        ],
        indent="  ",
    )
    if approval.kind == INTERRUPTED_KIND:
        out.line(f"  {_INTERRUPTED_NOTICE}")


def cmd_events(args: argparse.Namespace, out: Output) -> int:
    path = _db_path(args)
    # Opened first for its checks and refusals (and to know the run exists); the follower
    # then opens its own read-only connection.
    with _open(args) as store:
        if args.run is not None:
            args.run = view.resolve_run_id(store, args.run)
    show_run = args.run is None
    if out.json:
        sink: Sink = JsonLinesObserver(out.stdout)
    else:
        limit = 300 if out.width is None else max(40, out.width - (ID_WIDTH + 70))
        sink = TextObserver(out.stdout, show_run=show_run, detail_limit=limit)
        out.line(events_header(show_run))
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
        raise _Refused(path, e) from e
    # SIGINT and SIGTERM stop between pages on both paths: the page being printed is
    # finished and acknowledged, so a cursor file never lags what was printed.
    with follower, _stop_on_signals() as stop:
        if not args.follow:
            follower.run(
                sink, follow=False, stop=stop, max_events=args.limit or EVENTS_PAGE_DEFAULT
            )
            if follower.poll(1):
                words = ["events"] if show_run else ["events", _arg(str(args.run))]
                more = _again(args, *words, "--after", str(follower.position))
                out.hint(f"more events after seq {follower.position}: {more}")
            return EXIT_OK
        follower.run(sink, stop=stop, max_events=args.limit, timeout=args.timeout)
    return EXIT_OK


def events_header(show_run: bool) -> str:
    """The column heads above `TextObserver` lines."""
    parts = ["   SEQ", "AT".ljust(27)]
    if show_run:
        parts.append("RUN".ljust(ID_WIDTH))
    parts += ["STEP".ljust(ID_WIDTH), "TYPE".ljust(TYPE_WIDTH), "PAYLOAD"]
    return "  ".join(parts)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM, so following stops cleanly between pages."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


_PROBLEMS = {
    "altered": "the event does not match its hash: its content or its hash was edited",
    "deleted": "an event is missing from the middle of the chain",
    "swapped": "events were moved out of their place in the chain",
    "truncated": "events after the last one present are missing",
    "unreadable": "the event's stored text, or the page holding it, cannot be read",
    "rewritten": (
        "the chain verifies, but the event at the kept head does not carry the kept hash: "
        "the chain was recomputed after an edit"
    ),
}


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    head = _parse_head(args.head) if args.head is not None else None
    if args.from_seq is not None and args.to_seq is not None and args.from_seq > args.to_seq:
        raise UsageError(f"--from {args.from_seq} is after --to {args.to_seq}: nothing to check")
    if head is not None and args.to_seq is not None and args.to_seq < head[0]:
        # A kept head vouches for the chain up to it; a range that stops short of
        # it checks nothing against it, and must not say that it matches.
        raise UsageError(
            f"--head {head[0]}:… lies beyond --to {args.to_seq}: the range must reach the kept head"
        )
    with _open(args) as store:
        report = store.verify_events(args.from_seq, args.to_seq, head=head)
        checked = store.check_file(full=not args.quick, max_problems=FILE_PROBLEMS_MAX)
    if out.json:
        out.document({**_verify_json(report), "file": _file_json(checked)})
    else:
        out.line(_verify_text(report, head))
        out.line(_file_text(checked))
    return EXIT_OK if report.intact and checked.ok else EXIT_ERROR


FILE_PROBLEMS_MAX = 100  # what SQLite is asked for; the text shows the first few
FILE_PROBLEMS_SHOWN = 5


def _file_json(checked: FileCheck) -> dict[str, Any]:
    return {"ok": checked.ok, "check": checked.check, "problems": list(checked.problems)}


def _file_text(checked: FileCheck) -> str:
    """The file check's line, apart from the chain's: SQLite's own words, escaped."""
    if checked.ok:
        return f"file: ok (PRAGMA {checked.check} found no damage)"
    shown = "; ".join(sanitize(p) for p in checked.problems[:FILE_PROBLEMS_SHOWN])
    more = len(checked.problems) - FILE_PROBLEMS_SHOWN
    if more > 0:
        shown += f"; and {more}{'+' if len(checked.problems) >= FILE_PROBLEMS_MAX else ''} more"
    return f"file: damaged (PRAGMA {checked.check}): {shown}"


def _verify_json(report: VerifyReport) -> dict[str, Any]:
    brk = report.first_break
    return {
        "intact": report.intact,
        "checked": report.checked,
        "head_seq": report.head_seq,
        "head_hash": report.head_hash,
        "head": f"{report.head_seq}:{report.head_hash}",
        "first_break": None if brk is None else _break_json(brk),
    }


def _break_json(brk: ChainBreak) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": brk.seq, "problem": brk.problem}
    if brk.detail:  # what is wrong, when the problem's name does not say it all
        out["detail"] = brk.detail
    return out


def _verify_text(report: VerifyReport, head: tuple[int, str] | None) -> str:
    verified = f"{report.head_seq}:{sanitize(report.head_hash)}" if report.head_seq else "none"
    brk = report.first_break
    if brk is None:
        if report.checked == 0 and report.head_seq == 0:
            return "intact: no events"
        text = f"intact: {_number(report.checked)} events checked; head {verified}"
        if head is not None:
            text += f"; the kept head {head[0]}:{sanitize(head[1])} matches"
        return text
    why = _PROBLEMS.get(brk.problem, "")
    problem = sanitize(brk.problem) + (f" ({why})" if why else "")
    if brk.detail:
        problem += f": {sanitize(brk.detail)}"
    return (
        f"broken at seq {brk.seq}: {problem}; {_number(report.checked)} events verified "
        f"before it, last verified {verified}"
    )


_HEAD = re.compile(r"([0-9]+):([0-9a-f]{64})")


def _parse_head(text: str) -> tuple[int, str]:
    match = _HEAD.fullmatch(text.strip())
    if match is None:
        raise UsageError(
            f"--head must be SEQ:HASH as verify prints it (a seq, a colon, 64 lowercase hex "
            f"characters), not {sanitize(text)!r}"
        )
    if int(match[1]) == 0:
        raise UsageError(
            "--head 0:… names no event: a kept head is the seq and hash verify printed"
        )
    return int(match[1]), match[2]


# --- commands: deciding -------------------------------------------------------------------------


_INTERRUPTED_NOTICE = (
    "NOTICE: this call had started when the process running it stopped, before its "
    "outcome was recorded, so whether it took effect is unknown. Approving runs it once "
    "more; rejecting ends the run without calling it again."
)


def default_user() -> str:
    """The OS user running the command: a label for the record, not a login.

    The name of the effective uid in the password database, not `LOGNAME` or
    `USER` (which anyone can set); `getpass.getuser()` only where there is no
    such database (Windows) or the uid has no entry.
    """
    try:
        import pwd
    except ImportError:  # not POSIX
        pass
    else:
        with contextlib.suppress(KeyError, OSError):
            return pwd.getpwuid(os.geteuid()).pw_name
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no name for this uid
        return f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "unknown"


def _check_label(name: str, value: str) -> str:
    if not value.strip():
        raise UsageError(f"{name} must not be empty")
    if sanitize(value) != value:
        raise UsageError(f"{name} must be one line of visible characters: {sanitize(value)}")
    return value


def _path_key(key: str) -> str:
    """A key in a field path; a long one as head, tail, length and a hash of the whole key,
    so that two keys differing only in the middle never print the same path."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f".{key}"
    if len(key) > LONG_KEY:
        half = LONG_KEY // 2
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_HASH]
        return (
            f"[{_quoted(key[:half])}…{_quoted(key[-half:])} "
            f"({_number(len(key))} chars, sha256 {digest})]"
        )
    return f"[{_quoted(key)}]"


def approval_fields(value: JSON, path: str = "") -> Iterator[tuple[str, str]]:
    """`(path, shown value)` for every node of a JSON value, in the order it is hashed.

    Objects and lists get a line with their size, then a line per member; strings
    are JSON literals with their length, long ones as head and tail; numbers are
    their exact literal.
    """
    if isinstance(value, dict):
        yield path, f"{{…}} (object, {_number(len(value))} {'key' if len(value) == 1 else 'keys'})"
        for key in sorted(value):
            yield from approval_fields(value[key], f"{path}{_path_key(key)}")
    elif isinstance(value, list):
        count = len(value)
        yield path, f"[…] (list, {_number(count)} {'item' if count == 1 else 'items'})"
        for i, item in enumerate(value):
            yield from approval_fields(item, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, f"{_head_tail(value)} (string, {_number(len(value))} chars)"
    else:
        yield path, sanitize(_json_literal(value))


def hashed_content(approval: Approval) -> dict[str, JSON]:
    """The object the approval hash covers, exactly as `approval_hash` builds it."""
    return {
        "kind": approval.kind,
        "capability": {} if approval.capability is None else approval.capability,
        "presentation": {} if approval.presentation is None else approval.presentation,
        "request": approval.request,
    }


def show_approval(out: Output, approval: Approval, reason: str, *, verb: str) -> None:
    """The whole request, one field a line, then the hash the decision will be bound to."""
    out.line(f"Run {sanitize(approval.run_id)} waits for approval {sanitize(approval.id)}.")
    _fields(
        out,
        [
            ("kind", sanitize(approval.kind)),
            ("tool", sanitize(view.approval_tool(approval)) or "-"),
            ("reason", _head_tail(reason, 400, 180) if reason else "-"),
            ("created", _time(approval.created_at)),
            ("expires", _time(approval.expires_at) if approval.expires_at else "never"),
        ],
        indent="  ",
    )
    if approval.kind == INTERRUPTED_KIND:
        out.line()
        out.line(_INTERRUPTED_NOTICE)
    out.line()
    out.line(f"What you {verb}, one field a line, exactly as the hash covers it:")
    # The first node is the hashed object itself; its members are the fields.
    rows = [(path.lstrip("."), value) for path, value in approval_fields(hashed_content(approval))]
    rows = rows[1:]
    width = min(max((display_width(p) for p, _ in rows), default=0), 48)
    for path, value in rows:
        out.line(f"  {path.ljust(width)}  {value}")
    out.line(f"hash  {sanitize(approval.hash)}")


def _arg(text: str) -> str:
    """A value inside a command the operator is told to run: quoted for the shell, escaped."""
    return sanitize(shlex.quote(text))


def _again(args: argparse.Namespace, *words: str) -> str:
    """A command the operator is told to run, on the database this one was given.

    Always `agentrt --db PATH ...` (the path as given, from --db or AGENTRT_DB),
    so it can be pasted into another shell as it is. `words` must already be
    quoted (`_arg`) where they hold values.
    """
    return " ".join(("agentrt", "--db", _arg(_db_path(args)), *words))


def _drop_typeahead(stream: TextIO) -> None:
    """Keys typed before the request was on the screen are no answer to it: drop them."""
    try:
        import termios
    except ImportError:  # not a POSIX terminal: nothing to flush
        return
    with contextlib.suppress(OSError, termios.error):
        termios.tcflush(stream.fileno(), termios.TCIFLUSH)


def _confirm(out: Output, approval: Approval, verb: str) -> None:
    """Ask at the terminal; anything but y (or yes) refuses, and so do EOF and no terminal."""
    stdin = sys.stdin
    done = "approved" if verb == "approve" else "rejected"
    if not (_isatty(stdin) and out.tty):
        raise Refusal(
            f"not {done}: there is no terminal to ask at, and nothing was decided; pass "
            f"--yes (or --approval ID) to {verb} without being asked"
        )
    _drop_typeahead(stdin)
    out.stdout.write(
        f"{verb.capitalize()} this request (hash {sanitize(approval.hash[:16])}…)? "
        f"Type y to {verb}, anything else refuses: "
    )
    out.stdout.flush()
    try:
        answer = stdin.readline()
    except KeyboardInterrupt:
        out.line()
        raise Refusal(f"not {done}: interrupted; nothing was decided") from None
    if answer == "":
        out.line()
        raise Refusal(f"not {done}: no answer (end of input); nothing was decided")
    if answer.strip().lower() not in ("y", "yes"):
        raise Refusal(f"not {done}: the answer was not y; nothing was decided")


def cmd_decide(args: argparse.Namespace, out: Output, *, approve: bool) -> int:
    verb = "approve" if approve else "reject"
    by = _check_label("--by", args.by if args.by is not None else default_user())
    if out.json and not (args.yes or args.approval):
        raise UsageError(
            f"{verb} --json does not ask at a terminal: pass --yes or --approval ID "
            "(use show --json to see the request first)"
        )
    with _open(args, write=True) as store:
        args.run = view.resolve_run_id(store, args.run)
        try:
            approval = view.choose_approval(store, args.run, args.approval)
        except view.AmbiguousApprovalError as e:
            which = _again(args, verb, _arg(args.run), "--approval", "ID")
            raise Refusal(f"{e} with {which}; nothing was decided") from e
        # A stored request that no longer matches its hash is refused before it is shown.
        verify_stored(approval)
        if args.hash is not None and args.hash != approval.hash:
            raise ApprovalChangedError(
                f"approval {approval.id} has hash {approval.hash}, not the {args.hash} "
                "given with --hash"
            )
        if not out.json:
            show_approval(out, approval, view.approval_reason(store, approval), verb=verb)
        if not (args.yes or args.approval):
            _confirm(out, approval, verb)
        operator = Operator(store)
        decide = operator.approve if approve else operator.reject
        decided = decide(args.run, approval.id, by, args.note, shown_hash=approval.hash)
        run = store.get_run(args.run, cap=view.LIST_TEXT_CAP)
    if out.json:
        out.document(
            {"decision": str(decided.status), "approval": view.approval_json(decided),
             "run": view.run_json(run)}
        )  # fmt: skip
        return EXIT_OK
    out.line(
        f"{decided.status}: approval {shown(decided.id)} of run {shown(run.id)} "
        f"(hash {sanitize(decided.hash)}), by {sanitize(by)}"
    )
    if approve:
        out.line(
            f"The run stays {run.status} until the program that owns it resumes it "
            "(Driver.resume, or Driver.recover at its next start; agentrt has no resume: "
            "that needs the program's agent, tools and policy)."
        )
    else:
        out.line(f"The run is now {run.status} ({run.reason}).")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace, out: Output) -> int:
    by = _check_label("--by", args.by if args.by is not None else default_user())
    with _open(args, write=True) as store:
        run = Operator(store).cancel(view.resolve_run_id(store, args.run), by, args.note)
    if out.json:
        out.document({"run": view.run_json(run)})
        return EXIT_OK
    out.line(
        f"cancelled: run {shown(run.id)} is now {run.status} ({run.reason}), by {sanitize(by)}"
    )
    return EXIT_OK


# --- parsing ------------------------------------------------------------------------------------


_MAX_INT64 = 2**63 - 1  # what SQLite can bind


def _bounded(low: int, high: int | None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        top = _MAX_INT64 if high is None else min(high, _MAX_INT64)
        if value < low or value > top:
            bound = f"between {low} and {top}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def _status(text: str) -> str:
    try:
        return str(RunStatus(text.upper()))
    except ValueError:
        names = ", ".join(s.value for s in RunStatus)
        raise argparse.ArgumentTypeError(f"{text!r} is not a status ({names})") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    # Global options are declared on the main parser and again on every command,
    # with SUPPRESS defaults, so they are accepted before or after the command.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the database file (default: $AGENTRT_DB)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="JSON output (JSON Lines for events)",
    )

    parser = argparse.ArgumentParser(
        prog="agentrt",
        description="See every run, decide every approval, verify the record, follow the log.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"agentrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common])

    runs = command("runs", "list runs, newest first, with totals and waiting approvals")
    runs.add_argument("--status", type=_status, help="only runs with this status")
    runs.add_argument(
        "--limit",
        type=_bounded(1, view.RUN_PAGE_MAX),
        default=view.RUN_PAGE_DEFAULT,
        help="runs per page (default %(default)s)",
    )
    runs.add_argument("--offset", type=_bounded(0, None), default=0, help="runs to skip")

    approvals = command(
        "approvals", "list the approvals waiting for a person, in every run, newest first"
    )
    approvals.add_argument(
        "--limit",
        type=_bounded(1, view.PENDING_PAGE_MAX),
        default=view.PENDING_PAGE_DEFAULT,
        help="approvals to list (default %(default)s)",
    )

    show = command("show", "show a run: its waiting approval first, then the run and its steps")
    show.add_argument("run", metavar="RUN")
    show.add_argument(
        "--limit",
        type=_bounded(1, view.STEP_PAGE_MAX),
        default=view.STEP_PAGE_DEFAULT,
        help="steps to show (default %(default)s)",
    )
    show.add_argument(
        "--offset",
        type=_bounded(0, None),
        default=None,
        help="index of the first step shown (default: the latest steps)",
    )

    events = command("events", "the audit log of a run (or of all runs), in commit order")
    events.add_argument(
        "run", metavar="RUN", nargs="?", default=None, help="the run (default: every run)"
    )
    events.add_argument(
        "--after",
        type=_bounded(0, None),
        default=0,
        metavar="SEQ",
        help="start after this seq (default 0)",
    )
    events.add_argument(
        "--follow",
        action="store_true",
        help="keep printing events as they commit, until interrupted",
    )
    events.add_argument(
        "--limit",
        type=_bounded(1, None),
        default=None,
        metavar="N",
        help=f"print at most N events (default {EVENTS_PAGE_DEFAULT}; unlimited with --follow)",
    )
    events.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="with --follow, stop after this long",
    )
    events.add_argument(
        "--interval",
        type=_seconds,
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

    for name, verb in (("approve", "approve"), ("reject", "reject")):
        p = command(name, f"{verb} the request a run waits on: shows it field by field, then asks")
        p.add_argument("run", metavar="RUN")
        p.add_argument(
            "--approval",
            metavar="ID",
            help=f"the approval to {verb} (needed when several wait); naming it also confirms",
        )
        p.add_argument("--by", metavar="NAME", help="who decides (default: the OS user)")
        p.add_argument("--note", metavar="TEXT", default="", help="recorded with the decision")
        p.add_argument("--yes", action="store_true", help=f"{verb} without asking")
        p.add_argument(
            "--hash", metavar="HASH", help="refuse unless the approval still has this hash"
        )

    cancel = command("cancel", "cancel a run that has not ended")
    cancel.add_argument("run", metavar="RUN")
    cancel.add_argument("--by", metavar="NAME", help="who cancels (default: the OS user)")
    cancel.add_argument("--note", metavar="TEXT", default="", help="recorded with the cancel")

    verify = command(
        "verify",
        "check the event hash chain and the file itself; prints the head or the first break, "
        "then what SQLite's integrity check found",
    )
    verify.add_argument(
        "--from",
        dest="from_seq",
        type=_bounded(1, None),
        default=None,
        metavar="SEQ",
        help="first seq to check",
    )
    verify.add_argument(
        "--to",
        dest="to_seq",
        type=_bounded(1, None),
        default=None,
        metavar="SEQ",
        help="last seq to check",
    )
    verify.add_argument(
        "--head",
        metavar="SEQ:HASH",
        help="a head kept from an earlier verify: catches a cut or rewritten tail",
    )
    verify.add_argument(
        "--quick",
        action="store_true",
        help="check the file with PRAGMA quick_check (pages and records, not indexes): "
        "about three times faster than the full integrity_check",
    )

    console = command("console", "serve the web approval console (the console extra)")
    console.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default %(default)s)"
    )
    console.add_argument("--port", type=_bounded(0, 65535), default=8765, help="0 picks a free one")
    console.add_argument("--by", metavar="NAME", help="who decides (default: the OS user)")
    console.add_argument("--token", help="required off loopback (default: generated and printed)")

    sub.add_parser("demo", help="run the demo (agentrt demo --help)", add_help=False)
    sub.add_parser("mcp", help="pin and check MCP servers (agentrt mcp --help)", add_help=False)
    return parser


def _command_index(argv: Sequence[str]) -> int | None:
    """Where the command word is, skipping global options before it; None if there is none."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return i + 1 if i + 1 < len(argv) else None
        if token in _GLOBAL_VALUE_OPTIONS:
            i += 2
            continue
        if token.startswith("-"):
            i += 1
            continue
        return i
    return None


def run_demo(args: Sequence[str], out: Output) -> int:
    try:
        demo = importlib.import_module("agentrt.demo")
    except ModuleNotFoundError as e:
        if e.name != "agentrt.demo":
            raise
        out.error("the demo is not part of this installation of agentrt")
        return EXIT_ERROR
    result = demo.run(list(args))
    return int(result) if isinstance(result, int) else EXIT_OK


def cmd_console(args: argparse.Namespace, out: Output) -> int:
    try:
        console = importlib.import_module("agentrt.console")
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("starlette", "uvicorn", "anyio"):
            raise
        out.error("the console needs its extra: pip install 'agentrt[console]'")
        return EXIT_ERROR
    by = _check_label("--by", args.by if args.by is not None else default_user())
    with _open(args):  # refused here, in one sentence, before anything is served
        pass
    return int(
        console.serve(_db_path(args), host=args.host, port=args.port, by=by, token=args.token)
    )


_COMMANDS = {
    "console": cmd_console,
    "runs": cmd_runs,
    "approvals": cmd_approvals,
    "show": cmd_show,
    "events": cmd_events,
    "verify": cmd_verify,
    "cancel": cmd_cancel,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _escape_unencodable_output()
    at = _command_index(argv)
    # The demo parses its own options, and `resume` deserves an answer, not a list of choices.
    if at is not None and argv[at] == "demo":
        return run_demo(argv[at + 1 :], Output(json_mode=False))
    if at is not None and argv[at] == "mcp":
        from .mcp._cli import main as mcp_main

        return mcp_main(argv[at + 1 :])
    if at is not None and argv[at] == "resume":
        Output(json_mode=False).error(_NO_RESUME)
        return EXIT_USAGE
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 after --help
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    out = Output(json_mode=bool(getattr(args, "json", False)))
    try:
        if args.command in ("approve", "reject"):
            return cmd_decide(args, out, approve=args.command == "approve")
        return _COMMANDS[args.command](args, out)
    except UsageError as e:
        parser.print_usage(out.stderr)
        out.error(sanitize(str(e)))
        return EXIT_USAGE
    except (Refusal, _Refused) as e:
        out.error(sanitize(str(e)))
        return EXIT_ERROR
    except (ApprovalChangedError, ApprovalHashError) as e:
        out.error(f"refused, nothing was decided: {sanitize(str(e))}")
        return EXIT_ERROR
    except (AgentrtError, sqlite3.Error) as e:
        out.error(sanitize(str(e)))
        return EXIT_ERROR
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_ERROR
    except KeyboardInterrupt:
        out.error("interrupted")
        return EXIT_ERROR
    except OverflowError:
        out.error("a number on the command line is too large (at most 2^63-1)")
        return EXIT_USAGE
    except OSError as e:
        # A cursor file or a directory the command could not use: one sentence.
        out.error(sanitize(f"{e.strerror or e}: {e.filename}" if e.filename else str(e)))
        return EXIT_ERROR


def _escape_unencodable_output() -> None:
    # Under an ASCII locale a goal in another script must print escaped, not crash the command.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    # The reader went away (`| head`): later writes, and the flush at exit, must not raise.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "render_table"]
