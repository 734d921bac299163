"""The `agentrt` argument parser, built from the one list of commands (`_commands.COMMANDS`).

Global options (`--db`, `--json`) are accepted before or after the command: they
are declared on the main parser and again on every command, with SUPPRESS
defaults. `command_index` finds the command word without parsing, for the
commands answered before parsing (`demo` parses its own options; `resume`,
which does not exist, gets a sentence instead of a list of choices).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from ._commands import BY_NAME, COMMANDS
from ._output import guarded

NO_RESUME = (
    "There is no `resume` command. Resuming a run executes its tools, and that needs the "
    "agent, the tools, the policy and the reconciliation of the program that owns the "
    "run; none of them is in the database. Decide here (approve, reject, cancel); the "
    "program that owns the run resumes it: Driver.resume(run_id) (or Driver.recover() "
    "when it starts), Gate.attach(run_id), or the identical re-call through agentrt-proxy."
)

_EPILOG = f"""\
The database is --db PATH or the AGENTRT_DB environment variable (demo makes
its own in its --dir, mcp reads none: --db before either is refused). agentrt
opens an existing database only: it never creates or migrates one, except `agentrt
migrate`, which does that when asked and nothing else. runs, approvals, show, events
and verify open it read-only and read one bounded page at a time.
RUN may be a unique prefix of a run id, at least 8 characters long.

{textwrap.fill(NO_RESUME, 79)}

Text from models and servers (goals, arguments, results) is shown with control,
bidi, zero-width and other invisible characters escaped (\\x1b, \\u202e, ...).

Exit status: 0 ok, 1 error or refusal, 2 usage.
"""

_GLOBAL_VALUE_OPTIONS = ("--db",)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its help written as every report is: argparse's own `print_help`
    swallows a failed write, so `--help > /dev/full` (unbuffered) exited 0 having printed
    nothing (decision 0205, Review); here a full stdout is `StdoutFailed`, a closed pipe
    `BrokenPipeError`, said as for every command."""

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        (file if file is not None else guarded(sys.stdout)).write(self.format_help())


class _Version(argparse.Action):
    """`--version`: prints `agentrt VERSION` and exits 0, as argparse's own action does; the
    version is read when asked for (`agentrt.__version__` imports the store's module)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from .. import __version__

        guarded(sys.stdout).write(f"agentrt {__version__}\n")  # a full stdout: StdoutFailed
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `agentrt` command's argument parser: every command, with every command's options,
    or, given the command line `argv`, only the options of the command it names.

    Every command is listed either way (`agentrt --help`); its options come from its own
    module, which is imported only to add them, so `agentrt --help` and `agentrt runs`
    import no other command's module (decision 0090)."""
    wanted: set[str] | None = None
    if argv is not None:
        at = command_index(argv)
        word = argv[at] if at is not None else None
        # No command, or a word that is none: argparse refuses it before any command's
        # options are read. A command: only its options are needed.
        wanted = {word} if word in BY_NAME else set()
    common = _Parser(add_help=False)
    common.add_argument(
        "--db",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the database file or postgresql:// URL (default: $AGENTRT_DB)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="JSON output (JSON Lines for events)",
    )

    parser = _Parser(
        prog="agentrt",
        description="See every run, decide every approval, verify the record, follow the log.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        if command.passthrough is not None:
            sub.add_parser(command.name, help=command.help, add_help=False)
            continue
        p = sub.add_parser(
            command.name, help=command.help, description=command.help, parents=[common]
        )
        if wanted is None or command.name in wanted:
            command.arguments(p)
    return parser


def command_index(argv: Sequence[str]) -> int | None:
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


__all__ = ["NO_RESUME", "build_parser", "command_index"]
