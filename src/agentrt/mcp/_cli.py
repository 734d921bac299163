"""`agentrt mcp pin` and `agentrt mcp check`: the operator's two commands for one MCP server.

`pin` connects, reads what the server offers and writes the manifest (0600;
an existing manifest is replaced only with `--force`, since it is what the
operator reviewed). `check` connects and prints the report a load would give.
Everything a server wrote is escaped (`trace.sanitize`) before it reaches the
terminal. Exit status, for scripts:

- 0: pinned; or checked and clean (every pinned tool classified and unchanged,
  nothing new on the server)
- 1: an error: the server unreachable or broken, a file refused
- 2: usage
- 3: `check` only: a tool is refused (changed, dropped, contradicting its rule)
- 4: `check` only: nothing refused, but the server offers tools the manifest
  does not pin, or pinned tools have no rule

A Ctrl-C (SIGINT) ends either command at once, whichever of the process's
threads the kernel hands it to (`_interrupt.run_interruptible`, decision 0213): exit 1
with `agentrt mcp: interrupted`, a stdio server's whole group stopped, no manifest written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .._errors import AgentrtError, ConfigError
from ..trace import sanitize
from ._config import Manifest, Report, Server, parse_duration, read_manifest, read_rules
from ._interrupt import run_interruptible

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_REVIEW = 4

_EPILOG = """\
The server is NAME plus either --url URL (streamable HTTP) or its command after
`--` (stdio), for example:

  agentrt mcp pin notes --out notes.manifest.json -- python examples/mcp/notes_server.py
  agentrt mcp check notes --manifest notes.manifest.json --rules notes.rules.json \\
      -- python examples/mcp/notes_server.py

Exit status: 0 pinned, or checked and clean; 1 error; 2 usage; 3 (check) a tool
is refused; 4 (check) nothing refused, but tools are unpinned or unclassified.
"""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its help written as the report is: argparse's own `print_help`
    swallows a failed write, so `agentrt mcp --help > /dev/full` (unbuffered) exited 0
    having printed nothing. Here the failure reaches the command line, which says it in its
    one line (a full stdout) or ends quietly (a closed pipe), as for every command.

    Help and usage go to the `out` and `err` that `main` was given (decision 0215);
    argparse's own write to `sys.stdout` and `sys.stderr`."""

    out: TextIO | None = None
    err: TextIO | None = None

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        (file if file is not None else self.out or sys.stdout).write(self.format_help())

    def error(self, message: str) -> NoReturn:
        err = self.err or sys.stderr
        self.print_usage(err)
        err.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _parser(out: TextIO | None = None, err: TextIO | None = None) -> _Parser:
    parser = _Parser(
        prog="agentrt mcp",
        description="Pin an MCP server's tools, and check the server against the pin.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    pin = sub.add_parser("pin", help="write the manifest of what the server offers now")
    check = sub.add_parser("check", help="compare the server with a manifest and rules")
    for p in (pin, check):
        p.add_argument("name", metavar="NAME", help="the server's name (prefixes its tool names)")
        p.add_argument("--url", help="a streamable HTTP endpoint instead of a command")
        p.add_argument(
            "--env", action="append", default=[], metavar="NAME=VALUE", help="set in its env"
        )
        p.add_argument(
            "--inherit-env",
            action="append",
            default=[],
            metavar="NAME",
            help="pass this variable through from this environment",
        )
        p.add_argument("--timeout", default="30s", help="default tool timeout (default 30s)")
        p.add_argument("--json", action="store_true", help="JSON output")
    pin.add_argument("--out", required=True, metavar="FILE", help="the manifest to write")
    pin.add_argument("--force", action="store_true", help="replace an existing manifest")
    check.add_argument("--manifest", required=True, metavar="FILE")
    check.add_argument("--rules", required=True, metavar="FILE")
    for p in (parser, pin, check):
        p.out, p.err = out, err
    return parser


def main(argv: Sequence[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    try:
        args = _parser(out, err).parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        server = _server(args, command)
    except ValueError as exc:
        err.write(f"agentrt mcp: {sanitize(str(exc))}\n")
        return EXIT_USAGE
    try:
        code, report = _pin(server, args, err) if args.command == "pin" else _check(server, args)
    except (AgentrtError, OSError) as exc:
        err.write(f"agentrt mcp: {sanitize(str(exc))}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        # As every `agentrt` command: one line. A stdio server was already stopped
        # (its whole group) by the connection's shielded close.
        err.write("agentrt mcp: interrupted\n")
        return EXIT_ERROR
    # Written outside the above: a failed write of the report is not the server's error, and
    # is said by the command line as for every command (decision 0205).
    out.write(report)
    return code


def changes_nothing(argv: Sequence[str]) -> bool:
    """Whether `agentrt mcp ARGV` changes nothing whatever happens: `check`, help, and a
    line naming no command (a usage error).

    Read by the `agentrt` command line when the report is lost (a full standard output),
    so that it says nothing was changed rather than that nothing was undone (decision
    0215). Only `pin` writes (its manifest), never with `-h`/`--help`; anything this does
    not recognise for sure (`pin ... --he`, abbreviated) counts as perhaps changing something.
    """
    words = list(argv)
    if "--" in words:
        words = words[: words.index("--")]
    if "-h" in words or "--help" in words:
        return True
    command = next((word for word in words if not word.startswith("-")), None)
    return command in (None, "check")


def _server(args: argparse.Namespace, command: list[str]) -> Server:
    if bool(command) == bool(args.url):
        raise ValueError("give the server's command after `--`, or --url, not both")
    env: dict[str, str] = {}
    for item in args.env:
        name, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"--env {item!r} is not NAME=VALUE")
        env[name] = value
    timeout: timedelta = parse_duration(args.timeout, "--timeout")
    return Server(
        args.name,
        command=command or None,
        url=args.url,
        env=env,
        inherit_env=args.inherit_env,
        default_timeout=timeout,
    )


def _no_sdk(exc: ImportError) -> ConfigError:
    """`mcp/_client.py` imports the MCP SDK: without the `mcp` extra, said in one line."""
    return ConfigError(f"the MCP SDK is not installed: pip install 'agentrt[mcp]' ({exc})")


def _pin(server: Server, args: argparse.Namespace, err: TextIO) -> tuple[int, str]:
    """Pin the server: the exit status and the report to print. What it was given is
    judged before the MCP SDK is imported (about a second of CPU) or the server started."""
    if os.path.lexists(args.out) and not args.force:
        err.write(
            f"agentrt mcp: {sanitize(args.out)} exists; it is what was reviewed. "
            "Pass --force to replace it\n"
        )
        return EXIT_ERROR, ""
    try:
        from ._client import pin
    except ImportError as exc:
        raise _no_sdk(exc) from exc
    manifest: Manifest = run_interruptible(pin(server))
    from ._config import write_manifest

    try:
        # Without --force, a manifest that appeared meanwhile is not replaced either.
        write_manifest(manifest, args.out, replace=args.force)
    except FileExistsError:
        err.write(
            f"agentrt mcp: {sanitize(args.out)} exists; it is what was reviewed. "
            "Pass --force to replace it\n"
        )
        return EXIT_ERROR, ""
    if args.json:
        return EXIT_OK, json.dumps({"manifest": args.out, "tools": sorted(manifest.tools)}) + "\n"
    lines = [f"pinned {len(manifest.tools)} tools of {server.name} to {sanitize(args.out)}:"]
    for name, tool in sorted(manifest.tools.items()):
        hints = _hints(tool.annotations)
        lines.append(f"  {sanitize(name)}  schema {tool.schema_hash[:12]}{hints}")
    lines.append(
        "Review each description and schema in the manifest, then classify the tools "
        "you allow in a rules file."
    )
    return EXIT_OK, "".join(line + "\n" for line in lines)


def _hints(annotations: Any) -> str:
    if not isinstance(annotations, dict):
        return ""
    shown = [
        f"{key}={json.dumps(annotations[key])}"
        for key in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
        if key in annotations
    ]
    return f"  ({sanitize(', '.join(shown))})" if shown else ""


def _check(server: Server, args: argparse.Namespace) -> tuple[int, str]:
    """Check the server against the manifest and rules: the exit status and the report.
    Both are read before the MCP SDK is imported or the server started."""
    manifest = read_manifest(args.manifest)
    rules = read_rules(args.rules)
    try:
        from ._client import check
    except ImportError as exc:
        raise _no_sdk(exc) from exc
    report: Report = run_interruptible(check(server, manifest, rules))
    if args.json:
        text = json.dumps(report.to_json(), sort_keys=True) + "\n"
    else:
        text = "".join(sanitize(line) + "\n" for line in report.lines())
    if report.refused:
        return EXIT_REFUSED, text
    if report.unpinned or report.unclassified:
        return EXIT_REVIEW, text
    return EXIT_OK, text
