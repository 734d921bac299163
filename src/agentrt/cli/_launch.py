"""The commands that hand over to something else: `console` (the web console), `demo`
and `mcp`.

Each is loaded only when asked for, so the command line imports neither the
console's web stack, the demo nor the MCP tooling: `console` needs its extra (a
missing one is one sentence naming the pip command), and refuses an unusable
database in one sentence before anything is served; `demo` and `mcp` parse their
own options.
"""

from __future__ import annotations

import argparse
import importlib
import threading
from collections.abc import Sequence

from ._args import bounded
from ._decide import decided_by
from ._opening import open_db
from ._output import EXIT_ERROR, EXIT_OK, Output, db_path


def console_arguments(console: argparse.ArgumentParser) -> None:
    console.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default %(default)s)"
    )
    console.add_argument("--port", type=bounded(0, 65535), default=8765, help="0 picks a free one")
    console.add_argument("--by", metavar="NAME", help="who decides (default: the OS user)")
    console.add_argument("--token", help="required off loopback (default: generated and printed)")


def cmd_console(args: argparse.Namespace, out: Output) -> int:
    try:
        console = importlib.import_module("agentrt.console")
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("starlette", "uvicorn", "anyio"):
            raise
        out.error("the console needs its extra: pip install 'agentrt[console]'")
        return EXIT_ERROR
    by = decided_by(args.by)
    with open_db(args):  # refused here, in one sentence, before anything is served
        pass
    return int(
        # Its address is printed to the command's stdout: one that cannot be written is
        # said in one line (`StdoutFailed`), and nothing is served. Its last line ("stopped")
        # lost after a person decided through it says what the console recorded.
        console.serve(
            db_path(args),
            host=args.host,
            port=args.port,
            by=by,
            token=args.token,
            stdout=out.stdout,
            recorded=_Recorded(out),
        )
    )


class _Recorded:
    """The decisions a console committed, said as `Output.done` (decision 0205): the one, or
    how many and the last; those whose commit's outcome is unknown said as perhaps made.
    Told on the console's worker threads."""

    def __init__(self, out: Output) -> None:
        self._out = out
        self._made = 0
        self._perhaps = 0
        self._lock = threading.Lock()

    def __call__(self, said: str, made: bool) -> None:
        with self._lock:
            if made:
                self._made += 1
            else:
                self._perhaps += 1
            if self._made + self._perhaps == 1:
                self._out.done = f"{said} through the console"
                return
            counted = f"{self._made} decision{'' if self._made == 1 else 's'}"
            if self._perhaps:
                counted += f" (and perhaps {self._perhaps} more, their commits' outcome unknown)"
            self._out.done = f"the console recorded {counted} (the last: {said})"


def run_demo(args: Sequence[str], out: Output) -> int:
    try:
        demo = importlib.import_module("agentrt._demo")
    except ModuleNotFoundError as e:
        if e.name != "agentrt._demo":
            raise
        out.error("the demo is not part of this installation of agentrt")
        return EXIT_ERROR
    result = demo.run(list(args))
    return int(result) if isinstance(result, int) else EXIT_OK


def run_mcp(args: Sequence[str], out: Output) -> int:
    """`agentrt mcp pin|check`: parsed by `agentrt.mcp`, loaded only when asked for."""
    from ..mcp._cli import main as mcp_main

    return mcp_main(list(args))


def mcp_changes_nothing(args: Sequence[str]) -> bool:
    """Whether `agentrt mcp ARGS` changes nothing (`check`, help): asked only when its report
    is lost (decision 0215)."""
    from ..mcp._cli import changes_nothing

    return changes_nothing(args)


__all__ = ["cmd_console", "console_arguments", "mcp_changes_nothing", "run_demo", "run_mcp"]
