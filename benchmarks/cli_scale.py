"""Scale benchmark of the operator command: `runs` over 100,000 runs, `show` of a 10,000-step run.

It builds the database directly with SQL inside one store transaction (a driven
run takes four fsynced transactions a step, far too slow for this size), with
events appended through `Tx.append_event` so the hash chain is real, then runs
each reading command in-process and prints its time, its peak Python memory
(tracemalloc) and how many lines it printed. Reading commands read only the
page they print, so their peak memory stays flat however big the database is;
the last line loads all steps of the big run at once, for comparison.

    python benchmarks/cli_scale.py [--runs N] [--steps N] [--db PATH] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import agentrt
from agentrt._approval import approval_hash, approval_request
from agentrt._canonical import content_hash, to_text
from agentrt._clock import format_time
from agentrt._records import Limits, SideEffect, ToolSpec
from agentrt.cli import main as cli_main

START = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
TOOL = ToolSpec(
    name="send",
    description="send a message",
    input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
    side_effect=SideEffect.REMOTE_MUTATION,
    timeout=timedelta(seconds=5),
)
_RUN_STATUSES = ("COMPLETED", "FAILED", "CANCELLED", "WAITING_FOR_APPROVAL")
_REASONS = {
    "COMPLETED": "goal_completed",
    "FAILED": "goal_failed",
    "CANCELLED": "operator_cancelled",
}


def run_id(i: int) -> str:
    return f"{i:032x}"


def _at(ms: int) -> str:
    return format_time(START + timedelta(milliseconds=ms))


def build(path: str, *, runs: int = 100_000, steps: int = 10_000) -> tuple[str, list[str]]:
    """Write `runs` small runs plus one run of `steps` steps; returns the big run's id and the
    ids of the runs waiting for approval (one pending approval each).

    The big run is the newest. Every fourth small run is waiting.
    """
    limits = to_text(Limits().to_json())
    big = run_id(runs + 1)
    waiting: list[str] = []
    store = agentrt.open_store(path)
    try:
        with store.transaction() as tx:
            rows = []
            for i in range(1, runs + 1):
                status = _RUN_STATUSES[i % len(_RUN_STATUSES)]
                rows.append(
                    (run_id(i), f"goal number {i}", status, _REASONS.get(status, ""), limits,
                     1, _at(i), _at(i), "" if status == "WAITING_FOR_APPROVAL" else _at(i + 1),
                     i % 7, i * 10, i * 3, i * 11)
                )  # fmt: skip
                if status == "WAITING_FOR_APPROVAL":
                    waiting.append(run_id(i))
            tx.conn.executemany(
                "INSERT INTO runs (id, goal, status, reason, limits_json, step_count, created_at, "
                "started_at, finished_at, model_calls, input_tokens, output_tokens, "
                "estimated_cost_micros) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            tx.conn.executemany(
                "INSERT INTO steps (id, run_id, idx, status, decision_json, policy_json, "
                "started_at, finished_at) VALUES (?, ?, 0, 'awaiting_approval', ?, ?, ?, '')",
                [(f"e{i:031x}", rid, to_text({"kind": "tool_call", "tool": "send",
                  "args": {"x": i}}), to_text({"outcome": "require_approval",
                  "kind": "remote_mutation"}), _at(i)) for i, rid in enumerate(waiting)],
            )  # fmt: skip
            approvals = []
            for i, rid in enumerate(waiting):
                step_id = f"e{i:031x}"
                request = approval_request(rid, step_id, TOOL, {"x": i})
                shown = {"tool": "send", "args": {"x": i}}
                approvals.append(
                    (f"f{i:031x}", rid, step_id, "remote_mutation", to_text(shown),
                     to_text(shown), to_text(request),
                     approval_hash("remote_mutation", shown, shown, request), _at(i))
                )  # fmt: skip
            tx.conn.executemany(
                "INSERT INTO approvals (id, run_id, step_id, kind, capability_json, "
                "presentation_json, request_json, hash, status, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
                approvals,
            )
            _big_run(tx, big, steps, limits)
    finally:
        store.close()
    return big, waiting


def _big_run(tx: Any, big: str, steps: int, limits: str) -> None:
    at = START + timedelta(days=1)
    tx.conn.execute(
        "INSERT INTO runs (id, goal, status, reason, limits_json, step_count, created_at, "
        "started_at, finished_at) VALUES (?, 'the long run', 'COMPLETED', 'goal_completed', ?, "
        "?, ?, ?, ?)",
        (big, limits, steps, format_time(at), format_time(at), format_time(at)),
    )
    tx.append_event(big, "", at, "run.created", {"goal": "the long run"})
    tx.append_event(big, "", at, "run.started", {})
    rows = []
    for i in range(steps):
        step_id = f"d{i:031x}"
        content = {"echo": {"x": i}, "text": "result " * 20}
        decision = {"kind": "tool_call", "tool": "lookup", "args": {"x": i}}
        observation = {"kind": "tool_result", "content": content, "summary": f"lookup {i} ok",
                       "content_hash": content_hash(content)}  # fmt: skip
        when = at + timedelta(milliseconds=i)
        rows.append(
            (step_id, big, i, to_text(decision), to_text({"outcome": "allow"}),
             to_text(observation), format_time(when), format_time(when))
        )  # fmt: skip
        tx.append_event(big, step_id, when, "step.started", {"index": i})
        tx.append_event(big, step_id, when, "step.tool_finished", {"tool": "lookup"})
    tx.conn.executemany(
        "INSERT INTO steps (id, run_id, idx, status, decision_json, policy_json, "
        "observation_json, started_at, finished_at) VALUES (?, ?, ?, 'done', ?, ?, ?, ?, ?)",
        rows,
    )


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    old = sys.stdout
    sys.stdout = buffer
    try:
        yield buffer
    finally:
        sys.stdout = old


def measure(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """Seconds, peak traced bytes, and the result of `fn()`."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    started = time.perf_counter()
    try:
        result = fn()
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return elapsed, peak, result


def time_command(argv: Sequence[str]) -> tuple[float, int, int, int]:
    """Seconds, peak bytes, exit status and lines printed by `agentrt argv`, in-process."""

    def run() -> tuple[int, int]:
        with _captured() as out:
            status = cli_main(list(argv))
        return status, out.getvalue().count("\n")

    elapsed, peak, (status, lines) = measure(run)
    return elapsed, peak, status, lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--db", help="where to build the database (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or os.path.join(tmp, "scale.db")
        started = time.perf_counter()
        big, waiting = build(path, runs=args.runs, steps=args.steps)
        built = time.perf_counter() - started
        size = os.path.getsize(path) + (
            os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
        )
        print(
            f"built {args.runs:,} runs ({len(waiting):,} waiting) and a run of {args.steps:,} "
            f"steps in {built:.1f}s; {size / 2**20:.1f} MiB"
        )
        commands = [
            ["runs"],
            ["runs", "--offset", str(max(args.runs - 50, 0))],
            ["runs", "--status", "WAITING_FOR_APPROVAL", "--limit", "1000"],
            ["--json", "runs", "--limit", "1000"],
            ["show", big],
            ["show", big, "--offset", "0"],
            ["--json", "show", big, "--limit", "1000"],
            ["events", big, "--limit", "1000"],
            ["verify"],
        ]
        print(f"{'command':<52} {'seconds':>8} {'peak MiB':>9} {'lines':>6}")
        for command in commands:
            elapsed, peak, status, lines = time_command(["--db", path, *command])
            shown = " ".join("BIG" if c == big else c for c in command)
            flag = "" if status == 0 else f"  (exit {status})"
            print(f"{shown:<52} {elapsed:>8.3f} {peak / 2**20:>9.2f} {lines:>6}{flag}")
        with agentrt.open_existing(path, read_only=True) as store:
            elapsed, peak, steps = measure(lambda: store.list_steps(big))
        label = f"(for comparison: list_steps of all {len(steps):,} steps)"
        print(f"{label:<52} {elapsed:>8.3f} {peak / 2**20:>9.2f}")
        if args.keep and args.db is None:
            kept = os.path.abspath("cli_scale.db")
            os.replace(path, kept)
            print(f"kept {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
