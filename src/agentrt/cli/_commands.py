"""The one list of the `agentrt` subcommands: name, help, options and what runs them.

To add a command, write its module (its `..._arguments(parser)` and
`cmd_...(args, out) -> exit status`) and add one `Command` here; the parser
(`_parser.build_parser`) and the dispatch (`agentrt.cli.main`) read this list
and nothing else. The order here is the order `agentrt --help` lists them.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ._output import Output

Run = Callable[[argparse.Namespace, Output], int]
Passthrough = Callable[[Sequence[str], Output], int]


class Lazy:
    """A command module's function, named here and imported the first time it is called.

    `agentrt --help` lists every command from this table without importing one command
    module, and `agentrt runs` imports the module of `runs` alone (decision 0090). Neither
    class here is a dataclass: `dataclasses` (with `inspect`) is more than `agentrt --help`
    needs."""

    __slots__ = ("module", "name", "options")

    def __init__(
        self, module: str, name: str, options: tuple[tuple[str, object], ...] = ()
    ) -> None:
        self.module = module
        """A module of `agentrt.cli`, relative (`._read`)."""
        self.name = name
        self.options = options
        """Keyword arguments given with every call (`verb="approve"`)."""

    def resolve(self) -> Callable[..., Any]:
        function: Callable[..., Any] = getattr(
            importlib.import_module(self.module, __package__), self.name
        )
        return function

    def __call__(self, *args: Any) -> Any:
        return self.resolve()(*args, **dict(self.options))


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _no_run(args: argparse.Namespace, out: Output) -> int:  # pragma: no cover - never parsed
    raise AssertionError("a passthrough command is dispatched before parsing")


class Command(NamedTuple):
    """One subcommand. A `passthrough` one gets the words after it unparsed (it parses its own);
    a global option given before it (`agentrt --db X demo`) is refused, with the reason in
    `unread`, rather than silently not read."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    run: Run = _no_run
    passthrough: Passthrough | None = None
    unread: tuple[tuple[str, str], ...] = ()
    """(global option, why this command does not read it), for a passthrough command."""
    changes_nothing: Callable[[Sequence[str]], bool] | None = None
    """For a passthrough command: whether the words given it ask for something that changes
    nothing (`agentrt mcp check`), so that a lost report says so, as for every other
    command; without it, the CLI does not know what the command did (decision 0215)."""


DEMO_MAKES_ITS_OWN_DATABASE = (
    "--db is not used by the demo: it makes its own database in --dir DIR"
    " (a new temporary directory by default)"
)


COMMANDS: tuple[Command, ...] = (
    Command(
        "runs",
        "list runs, newest first, with totals and waiting approvals",
        Lazy("._read", "runs_arguments"),
        Lazy("._read", "cmd_runs"),
    ),
    Command(
        "approvals",
        "list the approvals waiting for a person, in every run, newest first",
        Lazy("._read", "approvals_arguments"),
        Lazy("._read", "cmd_approvals"),
    ),
    Command(
        "show",
        "show a run: its waiting approval first, then the run and its steps",
        Lazy("._read", "show_arguments"),
        Lazy("._read", "cmd_show"),
    ),
    Command(
        "events",
        "the audit log of a run (or of all runs), in commit order",
        Lazy("._read", "events_arguments"),
        Lazy("._read", "cmd_events"),
    ),
    *(
        Command(
            verb,
            f"{verb} the request a run waits on: shows it field by field, then asks",
            Lazy("._decide", "decide_arguments", (("verb", verb),)),
            Lazy("._decide", "cmd_decide", (("approve", verb == "approve"),)),
        )
        for verb in ("approve", "reject")
    ),
    Command(
        "cancel",
        "cancel a run that has not ended",
        Lazy("._decide", "cancel_arguments"),
        Lazy("._decide", "cmd_cancel"),
    ),
    Command(
        "verify",
        "check the event hash chain and the file itself; prints the head or the first break, "
        "then what SQLite's integrity check found",
        Lazy("._verify", "verify_arguments"),
        Lazy("._verify", "cmd_verify"),
    ),
    Command(
        "migrate",
        "create the database, or apply its pending migrations (and, with --proxy, the MCP "
        "proxy's tables); no other command does",
        Lazy("._migrate", "migrate_arguments"),
        Lazy("._migrate", "cmd_migrate"),
    ),
    Command(
        "recheck",
        "ask a policy given now about a run's recorded policy decisions; differences first",
        Lazy("._recheck", "recheck_arguments"),
        Lazy("._recheck", "cmd_recheck"),
    ),
    Command(
        "export",
        "export the audit log as OpenTelemetry spans, beside the program (the otel extra)",
        Lazy("._export", "export_arguments"),
        Lazy("._export", "cmd_export"),
    ),
    Command(
        "bench",
        "compare outcome benchmark result files (agentrt bench compare A.json B.json)",
        Lazy("._bench", "bench_arguments"),
        Lazy("._bench", "cmd_bench"),
    ),
    Command(
        "console",
        "serve the web approval console (the console extra)",
        Lazy("._launch", "console_arguments"),
        Lazy("._launch", "cmd_console"),
    ),
    Command(
        "demo",
        "run the demo in a directory of its own, not --db (agentrt demo --help)",
        passthrough=Lazy("._launch", "run_demo"),
        unread=(
            ("--db", DEMO_MAKES_ITS_OWN_DATABASE),
            ("--json", "--json is not used by the demo: it has no JSON output"),
        ),
    ),
    Command(
        "mcp",
        "pin and check MCP servers (agentrt mcp --help)",
        passthrough=Lazy("._launch", "run_mcp"),
        changes_nothing=Lazy("._launch", "mcp_changes_nothing"),
        unread=(
            ("--db", "--db is not used by agentrt mcp: it reads no database"),
            (
                "--json",
                "--json before mcp is not read: give it after the command"
                " (agentrt mcp pin|check NAME --json ...)",
            ),
        ),
    ),
)

BY_NAME = {command.name: command for command in COMMANDS}

__all__ = ["BY_NAME", "COMMANDS", "DEMO_MAKES_ITS_OWN_DATABASE", "Command", "Lazy"]
