"""Where the command writes, and the pieces every command's output shares.

Owns `Output` (stdout for results, stderr for errors, hints on stderr in JSON
mode so that stdout stays one JSON document), aligned tables (`render_table`:
clipped to a terminal's width, complete when piped), the exit codes, the two
exceptions a command raises to end itself (`UsageError`: exit 2; `Refusal`:
exit 1, nothing changed), and the commands printed for the operator to run
(`again`), which always carry the `--db` this command was given, quoted for a
shell and escaped. Cells and lines must be sanitized by the caller.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO, cast

from .._db_url import is_db_url, redact_db, shown_db
from ..trace import clip, display_width, json_line, sanitize

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """The command line asks for something malformed: exit 2."""


class Refusal(Exception):
    """The operator did not confirm, or the command refuses to go on: exit 1, nothing changed."""


class StdoutFailed(OSError):
    """A write to the standard output failed for another reason than a reader that went
    away (a full device, `> /dev/full`): what the command printed is incomplete."""


@contextlib.contextmanager
def _failed_as_stdout() -> Iterator[None]:
    """An OSError of the standard output raised as `StdoutFailed` (a broken pipe as it is)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        raise StdoutFailed(e.errno, e.strerror or str(e)) from e


class _GuardedStdout:
    """A standard output whose failed writes and flushes (but a broken pipe, which ends the
    command quietly) raise `StdoutFailed`: told apart from a failure of any other file."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _failed_as_stdout():
            return self._stream.write(text)

    def flush(self) -> None:
        with _failed_as_stdout():
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guarded(stream: TextIO) -> TextIO:
    """`stream` (the standard output), its failed writes raised as `StdoutFailed`."""
    return cast(TextIO, _GuardedStdout(stream))


def output_lost(e: OSError, done: str | None, *, command: str | None = None) -> str:
    """The one line for a standard output that could not be written: what was `done` (a
    change already committed) and that its report was lost, or that nothing was changed;
    for a passthrough `command`, whose changes the CLI does not know, neither."""
    why = e.strerror or str(e)
    if done is not None:
        return f"{done}, but its report could not be written to the standard output ({why})"
    if command is not None:
        return (
            f"the standard output could not be written ({why}), so what {command} printed "
            "is incomplete; what it had done by then is not undone"
        )
    return (
        f"the standard output could not be written ({why}), so what was printed is "
        "incomplete; nothing was changed"
    )


class Output:
    """Where the command writes: stdout for results, stderr for errors (and hints in JSON mode)."""

    def __init__(self, *, json_mode: bool) -> None:
        self.stdout: TextIO = guarded(sys.stdout)
        self.done: str | None = None
        """What this command changed, said once committed (`the migration was done (...)`):
        said again on stderr if its report on stdout is lost (decision 0205)."""
        self.stderr: TextIO = sys.stderr
        self.json = json_mode
        self.tty = isatty(self.stdout)
        self.width = shutil.get_terminal_size().columns if self.tty else None

    @staticmethod
    def closed_stdout(stderr: TextIO) -> None:
        """Say that there is no standard output to print to (it was closed)."""
        stderr.write("agentrt: the standard output is closed: nothing to print to\n")

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def lines(self, texts: Sequence[str]) -> None:
        for text in texts:
            self.line(text)

    def hint(self, text: str) -> None:
        """A note about the output (more pages...): never mixed into JSON on stdout."""
        (self.stderr if self.json else self.stdout).write(text + "\n")

    def document(self, value: Any) -> None:
        self.line(json_line(value))

    def error(self, text: str) -> None:
        self.stderr.write(f"agentrt: {text}\n")

    def fields(self, fields: Sequence[tuple[str, str]], indent: str = "") -> None:
        from .._render_approval import field_lines  # here: it reads records and the store

        self.lines(field_lines(fields, indent))

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        right: frozenset[int] = frozenset(),
        flex: int | None = None,
    ) -> None:
        self.lines(render_table(headers, rows, right=right, flex=flex, width=self.width))


def isatty(stream: TextIO) -> bool:
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


def db_path(args: argparse.Namespace) -> str:
    """The database this command was given: --db, else $AGENTRT_DB; neither is a usage error.

    A SQLite file's path, or a `postgresql://` (`postgres://`) URL naming a server's
    schema; a URL may hold a password, so it is printed only as `shown_db` gives it.
    """
    path = getattr(args, "db", None) or os.environ.get("AGENTRT_DB", "")
    if not path:
        raise UsageError("no database given: pass --db PATH or set AGENTRT_DB")
    return str(path)


def arg(text: str) -> str:
    """A value inside a command the operator is told to run: quoted for the shell, escaped."""
    return sanitize(shlex.quote(text))


def again(args: argparse.Namespace, *words: str) -> str:
    """A command the operator is told to run, on the database this one was given.

    Always `agentrt --db PATH ...` (the path as given, from --db or AGENTRT_DB),
    so it can be pasted into another shell as it is; a URL's password is printed
    `***` (docs/decisions/0082: keep it in PGPASSWORD or ~/.pgpass, and the command
    pastes as it is). `words` must already be quoted (`arg`) where they hold values.
    """
    return " ".join(("agentrt", "--db", arg(shown_db(db_path(args))), *words))


__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "Output",
    "Refusal",
    "StdoutFailed",
    "UsageError",
    "again",
    "arg",
    "db_path",
    "guarded",
    "is_db_url",
    "isatty",
    "output_lost",
    "redact_db",
    "render_table",
    "shown_db",
]
