"""The `agentrt` command: see every run, decide every approval, verify the record, follow the log.

This package owns the command line: parsing (stdlib `argparse`; options before
or after the command), opening the database the way each command needs it,
rendering (aligned tables at a terminal, the same columns unclipped when piped,
JSON with `--json`), the approval display and confirmation, and exit codes:
0 ok, 1 error or refusal, 2 usage.

Rules it keeps: it opens an existing database only and never creates or
migrates one, except `migrate`, which does that when asked and nothing else;
`runs`, `approvals`, `show`, `events` and `verify` open it read-only and read
bounded pages; `approve`/`reject` print the request field by
field, then decide bound to the hash they printed, and need `--approval`,
`--yes` or a `y` typed at a terminal; every text from the database is escaped by
`trace.sanitize` before it reaches the terminal. A RUN may be given by a unique
prefix of its id (at least 8 characters); an ambiguous one is refused naming
its candidates. Every command it prints for the operator to run carries the
`--db` it was given, quoted for a shell; the next page of every run's events
starts after one seq per chain partition (`--after SEQ,SEQ,...`, decision 0095).
There is no `resume` (see `--help`).

Its modules: `_output` (Output, tables, exit codes, the commands printed for
the operator with their `--db`), `_opening` (opening the database, refusals in
one sentence), `_args` (option value types), one module per group of commands
(`_read`, `_verify`, `_decide`, `_launch`, `_migrate`), `_commands` (the one list of
commands) and `_parser`. The approval display is `agentrt._render_approval`,
shared with the approver, the console and the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from .._db_url import shown_db
from .._errors import AgentrtError, ApprovalChangedError, ApprovalHashError, NotFoundError
from ..trace import sanitize
from ._commands import BY_NAME
from ._opening import Refused
from ._output import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Output,
    Refusal,
    StdoutFailed,
    UsageError,
    db_path,
    guarded,
    output_lost,
    render_table,
)
from ._parser import NO_RESUME, build_parser, command_index


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`); returns the exit status.

    A reader that went away (`agentrt runs | head -1`) ends it quietly with status 1
    (decision 0196): met while the command writes, or at the flush after it, which is
    made here so that the interpreter's own flush at exit has nothing left to fail on."""
    try:
        code = _main(argv)
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_ERROR
    except OSError as e:
        # A full standard output (`> /dev/full`, decision 0205): met at this flush (after
        # `--version` or `--help`), or in a passthrough command's (the demo's) own write.
        if not isinstance(e, StdoutFailed) and not _stdout_fails():
            raise
        return _lost(output_lost(e, None))


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if sys.stderr is None:  # started with its stderr closed: errors go nowhere, not a crash
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    if sys.stdout is None:  # started with its stdout closed: Python leaves it None
        Output.closed_stdout(sys.stderr)
        return EXIT_ERROR
    _escape_unencodable_output()
    at = command_index(argv)
    # The demo parses its own options, and `resume` deserves an answer, not a list of choices.
    command = BY_NAME.get(argv[at]) if at is not None else None
    passthrough = command.passthrough if command is not None else None
    if at is not None and command is not None and passthrough is not None:
        unread = _unread_global(argv[:at], command.unread)
        if unread is not None:
            Output(json_mode=False).error(unread)
            return EXIT_USAGE
        words = argv[at + 1 :]
        unchanged = command.changes_nothing
        return _passthrough(
            command.name,
            lambda: passthrough(words, Output(json_mode=False)),
            changes_nothing=lambda: unchanged is not None and unchanged(words),
        )
    if at is not None and argv[at] == "resume":
        Output(json_mode=False).error(NO_RESUME)
        return EXIT_USAGE
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 after --help
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    out = Output(json_mode=bool(getattr(args, "json", False)))
    try:
        code = BY_NAME[args.command].run(args, out)
        out.stdout.flush()  # its report's last bytes: lost here, said as lost in the command
        return code
    except StdoutFailed as e:
        return _lost(output_lost(e, out.done))
    except UsageError as e:
        parser.print_usage(out.stderr)
        out.error(sanitize(str(e)))
        return EXIT_USAGE
    except (Refusal, Refused) as e:
        out.error(sanitize(str(e)))
        return EXIT_ERROR
    except (ApprovalChangedError, ApprovalHashError) as e:
        out.error(f"refused, nothing was decided: {sanitize(str(e))}")
        return EXIT_ERROR
    except NotFoundError as e:
        out.error(sanitize(_looked_in(args, e)))
        return EXIT_ERROR
    except AgentrtError as e:
        out.error(sanitize(str(e)))
        return EXIT_ERROR
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_ERROR
    except KeyboardInterrupt:
        # Perhaps a second SIGINT/SIGTERM ending a write its reader never took: what is
        # left of that write must not block the exit's flush.
        _silence_stdout()
        out.error("interrupted")
        return EXIT_ERROR
    except OverflowError:
        out.error("a number on the command line is too large (at most 2^63-1)")
        return EXIT_USAGE
    except OSError as e:
        # A cursor file or a directory the command could not use: one sentence.
        out.error(sanitize(f"{e.strerror or e}: {e.filename}" if e.filename else str(e)))
        return EXIT_ERROR


def _passthrough(name: str, run: Callable[[], int], *, changes_nothing: Callable[[], bool]) -> int:
    """Run a passthrough command (the demo, `mcp`), its `sys.stdout` guarded and flushed here:
    a full stdout is one line, unbuffered too (its `print` raised a traceback), and does not
    say that nothing was changed, as the CLI does not know what the command did (the demo
    made its directory; `mcp pin` wrote its manifest) (decision 0205, Review), unless the
    command declares that what it was asked changes nothing (`mcp check`, decision 0215)."""
    try:
        with contextlib.redirect_stdout(guarded(sys.stdout)):
            code = run()
            sys.stdout.flush()
        return code
    except StdoutFailed as e:
        return _lost(output_lost(e, None, command=None if changes_nothing() else f"agentrt {name}"))


def _lost(said: str) -> int:
    """Say that the standard output could not be written (on stderr: if that fails too,
    nothing more can be said); later writes, and the flush at exit, go nowhere."""
    _silence_stdout()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"agentrt: {sanitize(said)}\n")
    return EXIT_ERROR


def _stdout_fails() -> bool:
    """Whether flushing the standard output fails: the OSError just met was its own (a
    passthrough command writes to `sys.stdout` itself)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError:
        return True
    return False


def _looked_in(args: argparse.Namespace, e: NotFoundError) -> str:
    """A run or approval not found, said with the database it was looked for in (its
    password `***`), as `grep` names its file: `DB: no run 'X'` (decision 0203); so is a
    run id prefix too short or matching several runs."""
    try:
        where = shown_db(db_path(args))
    except UsageError:  # no database given: nothing was looked in
        return str(e)
    return f"{where}: {e}"


def _unread_global(before: Sequence[str], unread: Sequence[tuple[str, str]]) -> str | None:
    """Why a global option given before a passthrough command is not read by it, if one is."""
    reasons = dict(unread)
    for token in before:
        reason = reasons.get(token.split("=", 1)[0])
        if reason is not None:
            return reason
    return None


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
