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
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit, urlunsplit

from .._render_approval import field_lines
from ..trace import clip, display_width, json_line, sanitize

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """The command line asks for something malformed: exit 2."""


class Refusal(Exception):
    """The operator did not confirm, or the command refuses to go on: exit 1, nothing changed."""


class Output:
    """Where the command writes: stdout for results, stderr for errors (and hints in JSON mode)."""

    def __init__(self, *, json_mode: bool) -> None:
        self.stdout: TextIO = sys.stdout
        self.stderr: TextIO = sys.stderr
        self.json = json_mode
        self.tty = isatty(self.stdout)
        self.width = shutil.get_terminal_size().columns if self.tty else None

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


_URL_SCHEMES = ("postgresql://", "postgres://")
HIDDEN = "***"
"""What a password is printed as."""


def is_db_url(path: str) -> bool:
    """Whether the database given is a PostgreSQL URL (not a SQLite file's path)."""
    return path.startswith(_URL_SCHEMES)


def _passwords(path: str) -> list[str]:
    """The passwords a URL holds (its user's and a `password=` parameter's), as written
    and percent-decoded, longest first; none for a path or a URL too broken to split."""
    if not is_db_url(path):
        return []
    _, _, rest = path.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    found = []
    if "@" in authority:
        user = authority.rsplit("@", 1)[0]
        if ":" in user:
            found.append(user.split(":", 1)[1])
    query = path.split("?", 1)[1] if "?" in path else ""
    found.extend(part.partition("=")[2] for part in query.split("&") if _is_password(part))
    every = {
        form for word in found for form in (word, unquote(word), unquote(word.replace("+", " ")))
    }
    return sorted((w for w in every if w), key=len, reverse=True)


def _is_password(parameter: str) -> bool:
    return unquote(parameter.partition("=")[0]).strip().lower() == "password"


def shown_db(path: str) -> str:
    """The database as it may be printed: a path as it is, a URL with its password(s) `***`."""
    if not is_db_url(path):
        return path
    try:
        parts = urlsplit(path)
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            if ":" in user:
                user = user.split(":", 1)[0] + ":" + HIDDEN
            netloc = f"{user}@{host}"
        query = "&".join(
            f"{part.partition('=')[0]}={HIDDEN}" if _is_password(part) else part
            for part in parts.query.split("&")
        )
        return redact_db(
            urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), path
        )
    except ValueError:  # too broken to split: every password it holds, hidden where it stands
        return redact_db(path, path)


def redact_db(text: str, path: str) -> str:
    """`text` with every password the database URL `path` holds replaced by `***`."""
    for word in _passwords(path):
        text = text.replace(word, HIDDEN)
    return text


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
    "UsageError",
    "again",
    "arg",
    "db_path",
    "is_db_url",
    "isatty",
    "redact_db",
    "render_table",
    "shown_db",
]
