"""The deciding commands: `approve`, `reject` and `cancel`.

`approve`/`reject` show what a person decides on (the tool, its arguments
exactly as hashed, why a person is asked, what approving and rejecting do, the
hash), with `--full` every hashed field after it, one a line, and whole every
value shown there in part (`agentrt._render_approval`, the same text every
channel shows), then decide bound to the hash they printed, and need
`--approval`, `--yes` or a `y` typed at a terminal (keys typed before the
request was shown are dropped). A stored
request that no longer matches its hash is refused before it is shown. `--by`
defaults to the OS user of the effective uid, a label for the record. A
`--note` or `--by` no store can keep (a byte that is not UTF-8, which argv carries as a
lone surrogate, or a NUL) is refused in one line before anything is read; UTF-8 bytes
that an ASCII locale could not decode are read as UTF-8 (`as_typed`, decision 0211).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys
from typing import TextIO

from .. import view
from .._approval import verify_stored
from .._errors import ApprovalChangedError
from .._operator import Operator, storable_problem
from .._records import Approval
from .._render_approval import approval_lines, number, whole_values
from ..trace import sanitize, shown
from ._opening import open_db
from ._output import EXIT_OK, Output, Refusal, UsageError, again, arg, isatty


def decide_arguments(p: argparse.ArgumentParser, *, verb: str) -> None:
    p.add_argument("run", metavar="RUN")
    p.add_argument(
        "--approval",
        metavar="ID",
        help=f"the approval to {verb} (needed when several wait); naming it also confirms",
    )
    p.add_argument("--by", metavar="NAME", help="who decides (default: the OS user)")
    p.add_argument("--note", metavar="TEXT", default="", help="recorded with the decision")
    p.add_argument("--yes", action="store_true", help=f"{verb} without asking")
    p.add_argument("--hash", metavar="HASH", help="refuse unless the approval still has this hash")
    p.add_argument(
        "--full",
        action="store_true",
        help="also print every field of the request exactly as it is hashed, one a line",
    )


def cancel_arguments(cancel: argparse.ArgumentParser) -> None:
    cancel.add_argument("run", metavar="RUN")
    cancel.add_argument("--by", metavar="NAME", help="who cancels (default: the OS user)")
    cancel.add_argument("--note", metavar="TEXT", default="", help="recorded with the cancel")


FULL_HINT = "Every field exactly as it is hashed, one a line: add --full."


def show_approval(
    out: Output, approval: Approval, reason: str, *, verb: str, full: bool = False
) -> None:
    """What a person decides on; with `full`, every hashed field, every value shown in part
    whole, and the hash after them; without, a line saying how to see them."""
    out.lines(approval_lines(approval, reason, verb=verb, full=full, more=full_hint(approval)))


def full_hint(approval: Approval) -> str:
    """The last line without `--full`; it counts the values shown only in part."""
    count = len(whole_values(approval))
    if not count:
        return FULL_HINT
    values = f"{number(count)} value{'' if count == 1 else 's'}"
    return (
        f"Every field exactly as it is hashed, one a line, and the {values} shown here in part "
        "whole: add --full."
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


def as_typed(value: str) -> str:
    """A text from the command line (or the OS user's name) as the bytes the person typed,
    read as UTF-8 (decision 0211).

    Python decodes argv with the locale's encoding; bytes it cannot decode (any byte above
    127 in an ASCII locale: `LC_ALL=C` with `PYTHONUTF8=0`) arrive as lone surrogates, which
    no store can keep. Those bytes, given back (`os.fsencode`), are read as UTF-8, as
    Python's own UTF-8 mode (its default in that locale) reads them: the name recorded is
    byte for byte what the terminal sent. Bytes that are not UTF-8 stay lone surrogates,
    to be refused in one line (`storable_problem`) that names the first of them, not a byte
    of a character around it that is valid UTF-8; never guessed in another encoding."""
    if not storable_problem(value):
        return value
    try:
        return os.fsencode(value).decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # not argv's bytes (a surrogate argv never holds)
        return value


def check_label(name: str, value: str) -> str:
    """A name for the record (`--by`), as typed (`as_typed`), one visible line; else
    `UsageError`, one sentence."""
    value = as_typed(value)
    if not value.strip():
        raise UsageError(f"{name} must not be empty")
    problem = storable_problem(value)
    if problem:
        raise UsageError(f"{name} must be text: {problem}")
    if sanitize(value) != value:
        raise UsageError(f"{name} must be one line of visible characters: {sanitize(value)}")
    return value


def decided_by(by: str | None) -> str:
    """Who decides, for the record: `--by` as given (`check_label`), else the OS user's
    name (`default_user`). A name no store can keep that came from the OS, not from the
    command line, is refused naming where it came from, and how to give one instead
    (decision 0215): `--by must be text` was said of an option nobody passed."""
    if by is not None:
        return check_label("--by", by)
    try:
        return check_label("the OS user's name (the default for --by)", default_user())
    except UsageError as e:
        raise UsageError(f"{e}; pass --by NAME to record another name") from None


def check_note(value: str) -> str:
    """`--note` as typed (`as_typed`), unless no store could keep it (`UsageError`, one
    sentence)."""
    value = as_typed(value)
    problem = storable_problem(value)
    if problem:
        raise UsageError(f"--note must be text: {problem}")
    return value


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
    if not (isatty(stdin) and out.tty):
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
    by = decided_by(args.by)
    note = check_note(args.note)
    if out.json and not (args.yes or args.approval):
        raise UsageError(
            f"{verb} --json does not ask at a terminal: pass --yes or --approval ID "
            "(use show --json to see the request first)"
        )
    with open_db(args, write=True) as store:
        args.run = view.resolve_run_id(store, args.run)
        try:
            approval = view.choose_approval(store, args.run, args.approval)
        except view.AmbiguousApprovalError as e:
            which = again(args, verb, arg(args.run), "--approval", "ID")
            raise Refusal(f"{e} with {which}; nothing was decided") from e
        # A stored request that no longer matches its hash is refused before it is shown.
        verify_stored(approval)
        if args.hash is not None and args.hash != approval.hash:
            raise ApprovalChangedError(
                f"approval {approval.id} has hash {approval.hash}, not the {args.hash} "
                "given with --hash"
            )
        if not out.json:
            show_approval(
                out, approval, view.approval_reason(store, approval), verb=verb, full=args.full
            )
        if not (args.yes or args.approval):
            _confirm(out, approval, verb)
        operator = Operator(store)
        decide = operator.approve if approve else operator.reject
        decided = decide(args.run, approval.id, by, note, shown_hash=approval.hash)
        out.done = (
            f"approval {shown(decided.id)} of run {shown(args.run)} was "
            f"{'approved' if approve else 'rejected'} by {sanitize(by)}"
        )
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
        out.line(f"The run stays {run.status} until {sanitize(view.what_continues(run.origin))}")
    else:
        out.line(f"The run is now {run.status} ({run.reason}).")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace, out: Output) -> int:
    by = decided_by(args.by)
    note = check_note(args.note)
    with open_db(args, write=True) as store:
        run = Operator(store).cancel(view.resolve_run_id(store, args.run), by, note)
        out.done = f"run {shown(run.id)} was cancelled by {sanitize(by)}"
    if out.json:
        out.document({"run": view.run_json(run)})
        return EXIT_OK
    out.line(
        f"cancelled: run {shown(run.id)} is now {run.status} ({run.reason}), by {sanitize(by)}"
    )
    return EXIT_OK


__all__ = [
    "check_label",
    "check_note",
    "cmd_cancel",
    "cmd_decide",
    "decided_by",
    "default_user",
]
