"""The one list of the `agentrt` subcommands: name, help, options and what runs them.

To add a command, write its module (its `..._arguments(parser)` and
`cmd_...(args, out) -> exit status`) and add one `Command` here; the parser
(`_parser.build_parser`) and the dispatch (`agentrt.cli.main`) read this list
and nothing else. The order here is the order `agentrt --help` lists them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from ._bench import bench_arguments, cmd_bench
from ._decide import cancel_arguments, cmd_cancel, cmd_decide, decide_arguments
from ._export import cmd_export, export_arguments
from ._launch import cmd_console, console_arguments, run_demo, run_mcp
from ._output import Output
from ._read import (
    approvals_arguments,
    cmd_approvals,
    cmd_events,
    cmd_runs,
    cmd_show,
    events_arguments,
    runs_arguments,
    show_arguments,
)
from ._recheck import cmd_recheck, recheck_arguments
from ._verify import cmd_verify, verify_arguments

Run = Callable[[argparse.Namespace, Output], int]
Passthrough = Callable[[Sequence[str], Output], int]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _no_run(args: argparse.Namespace, out: Output) -> int:  # pragma: no cover - never parsed
    raise AssertionError("a passthrough command is dispatched before parsing")


@dataclass(frozen=True)
class Command:
    """One subcommand. A `passthrough` one gets the words after it unparsed (it parses its own)."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    run: Run = _no_run
    passthrough: Passthrough | None = None


COMMANDS: tuple[Command, ...] = (
    Command(
        "runs",
        "list runs, newest first, with totals and waiting approvals",
        runs_arguments,
        cmd_runs,
    ),
    Command(
        "approvals",
        "list the approvals waiting for a person, in every run, newest first",
        approvals_arguments,
        cmd_approvals,
    ),
    Command(
        "show",
        "show a run: its waiting approval first, then the run and its steps",
        show_arguments,
        cmd_show,
    ),
    Command(
        "events",
        "the audit log of a run (or of all runs), in commit order",
        events_arguments,
        cmd_events,
    ),
    *(
        Command(
            verb,
            f"{verb} the request a run waits on: shows it field by field, then asks",
            partial(decide_arguments, verb=verb),
            partial(cmd_decide, approve=verb == "approve"),
        )
        for verb in ("approve", "reject")
    ),
    Command("cancel", "cancel a run that has not ended", cancel_arguments, cmd_cancel),
    Command(
        "verify",
        "check the event hash chain and the file itself; prints the head or the first break, "
        "then what SQLite's integrity check found",
        verify_arguments,
        cmd_verify,
    ),
    Command(
        "recheck",
        "ask a policy given now about a run's recorded policy decisions; differences first",
        recheck_arguments,
        cmd_recheck,
    ),
    Command(
        "export",
        "export the audit log as OpenTelemetry spans, beside the program (the otel extra)",
        export_arguments,
        cmd_export,
    ),
    Command(
        "bench",
        "compare outcome benchmark result files (agentrt bench compare A.json B.json)",
        bench_arguments,
        cmd_bench,
    ),
    Command(
        "console",
        "serve the web approval console (the console extra)",
        console_arguments,
        cmd_console,
    ),
    Command("demo", "run the demo (agentrt demo --help)", passthrough=run_demo),
    Command("mcp", "pin and check MCP servers (agentrt mcp --help)", passthrough=run_mcp),
)

BY_NAME = {command.name: command for command in COMMANDS}

__all__ = ["BY_NAME", "COMMANDS", "Command"]
