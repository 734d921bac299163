"""`agentrt bench compare A.json B.json`: outcome benchmark result files side by side.

Prints the Markdown comparison (`agentrt.bench.compare_markdown`); `--svg FILE`
also writes the plot. A file that is not `agent-runtime/bench/v1` is refused
with the reason (exit 1), as is a comparison that mixes taxonomies or commits
without `--mixed-taxonomies` / `--across-commits`.
"""

from __future__ import annotations

import argparse
import os

from ..trace import sanitize
from ._output import EXIT_OK, Output, Refusal, UsageError


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    compare = sub.add_parser(
        "compare",
        help="compare result files (agent-runtime/bench/v1) as a Markdown table",
        description="Compare outcome benchmark result files as a Markdown table; "
        "one unsafe trial disqualifies a mode.",
    )
    compare.add_argument("files", metavar="FILE", nargs="+", help="result files")
    compare.add_argument(
        "--across-commits",
        action="store_true",
        help="compare files from different commits (refused otherwise)",
    )
    compare.add_argument(
        "--mixed-taxonomies",
        action="store_true",
        help="compare files whose taxonomies differ (refused otherwise)",
    )
    compare.add_argument("--svg", metavar="FILE", default=None, help="also write the plot here")


def cmd_bench(args: argparse.Namespace, out: Output) -> int:
    if getattr(args, "bench_command", None) != "compare":
        raise UsageError("say what to do: agentrt bench compare A.json [B.json ...]")
    from ..bench import BenchError, compare_markdown, comparison_svg, load_result

    try:
        results = [load_result(path) for path in args.files]
        options = {
            "mixed_taxonomies": args.mixed_taxonomies,
            "across_commits": args.across_commits,
        }
        markdown = compare_markdown(results, **options)
        svg = comparison_svg(results, **options) if args.svg else None
    except BenchError as e:
        raise Refusal(str(e)) from e
    if svg is not None:
        tmp = f"{args.svg}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(svg)
        os.replace(tmp, args.svg)
        out.done = f"the plot was written to {sanitize(args.svg)}"
    out.stdout.write(markdown)
    return EXIT_OK


__all__ = ["bench_arguments", "cmd_bench"]
