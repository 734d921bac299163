"""`agentrt export --otel`: the audit log as OpenTelemetry spans, from a process beside the program.

It follows the database read-only with a persisted cursor (`agentrt.export.Follower`)
and hands each page to `agentrt.otel.OtelSink`, configured by the standard
`OTEL_*` variables. The cursor moves only after the exporter took the page's
spans; an export that fails is retried after `--retry` seconds, the page
rebuilt from the record. A refusal the same page would get again (an HTTP 4xx
other than 408 and 429: `OtelRefusedError`) is not retried: the command stops
with one line naming the status and exit 1, the cursor before that page. SIGINT
and SIGTERM stop it between pages; a second one at once.
"""

from __future__ import annotations

import argparse
import threading

from .._errors import AgentrtError
from ..export import DEFAULT_INTERVAL, CursorError, Follower
from ..trace import sanitize
from ._args import bounded, seconds
from ._opening import Refused, open_db
from ._output import EXIT_OK, Output, UsageError, db_path
from ._read import _stop_on_signals

RETRY_DEFAULT = 5.0


def export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--otel",
        action="store_true",
        help="export spans with OpenTelemetry (the otel extra), configured by OTEL_* variables",
    )
    parser.add_argument(
        "--run", metavar="RUN", default=None, help="only this run (default: every run)"
    )
    parser.add_argument(
        "--cursor",
        metavar="FILE",
        required=False,
        default=None,
        help="the cursor file that makes a restart continue where this one stopped (required)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="export what the database holds now and stop, instead of following it",
    )
    parser.add_argument(
        "--interval",
        type=seconds,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help="how often to look for new events (default %(default)s)",
    )
    parser.add_argument(
        "--retry",
        type=seconds,
        default=RETRY_DEFAULT,
        metavar="SECONDS",
        help="after a failed export, wait this long before trying again (default %(default)s)",
    )
    parser.add_argument(
        "--page",
        type=bounded(1, 500),
        default=100,
        metavar="N",
        help="events per page, the unit acknowledged at once (default %(default)s)",
    )


def cmd_export(args: argparse.Namespace, out: Output) -> int:
    if not args.otel:
        raise UsageError("say where to export: --otel (the only exporter so far)")
    if not args.cursor:
        raise UsageError(
            "--cursor FILE is required: without it a restart would export every span again"
        )
    path = db_path(args)
    from .. import view

    with open_db(args) as store:
        if args.run is not None:
            args.run = view.resolve_run_id(store, args.run)
    from ..otel import OtelExportError, OtelRefusedError, OtelSink

    try:
        sink = OtelSink(path)
    except AgentrtError as e:
        if isinstance(e, CursorError) or type(e).__module__.startswith("agentrt.otel"):
            raise
        raise Refused(path, e) from e
    try:
        follower = Follower(
            path,
            run_id=args.run,
            cursor=args.cursor,
            interval=args.interval,
            page_size=args.page,
        )
    except BaseException:
        sink.close()
        raise
    with sink, follower, _stop_on_signals() as stop:
        while not stop.is_set():
            try:
                follower.run(sink, follow=not args.once, stop=stop)
            except OtelRefusedError as e:  # the same page would be refused for ever
                out.error(sanitize(_refused(e, args.page)))
                return 1
            except OtelExportError as e:
                if args.once:  # one pass: nothing is tried again; the cursor stays where it was
                    out.error(sanitize(f"{e}; run this command again to deliver the page"))
                    return 1
                out.error(sanitize(f"{e}; trying again in {args.retry:g}s"))
                _wait(stop, args.retry)
                continue
            break
    return EXIT_OK


def _refused(e: AgentrtError, page: int) -> str:
    why = f"{e}; export stopped, the cursor before that page"
    if getattr(e, "status", None) == 413:  # too large: fewer events a page may pass
        return f"{why}; a smaller --page (now {page}) may pass, then run this command again"
    return f"{why}: fix what the collector objects to, then run this command again"


def _wait(stop: threading.Event, seconds_: float) -> None:
    stop.wait(seconds_)


__all__ = ["cmd_export", "export_arguments"]
