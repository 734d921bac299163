"""Where a step's time goes: the Driver's phases and its SQL, timed per step.

Runs the same Driver as `benchmarks/driver.py` (file-backed store, warmed up,
`start_sync`, one read-only plain-function tool, a scripted agent) with light
timers wrapped around the session's phases and around every statement on the
store's connection, and prints microseconds per step for each:

- each phase of a step (`begin_step` and `record_decision`, which keep the
  claim and the decision for the next commit; `start_tool` and `finish_tool`,
  the step's two transactions), the whole of `propose` and `execute`, the tool call alone
  (`invoke`), the policy (`ask_policy`) and the agent (`_decide`);
- `COMMIT` and every other statement, summed over the run.

The phases overlap (a transaction's time includes its SQL); the timers add
about 50 us per step. It patches the package's internals on purpose: it is a
measuring tool, not an example.

    python benchmarks/step_phases.py [--steps 400] [--runs 5] [--observation 0]
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import agentrt
from agentrt import _driver as driver_module
from agentrt import _session as session_module
from agentrt import _step as step_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver import make_tool, run_once  # the benchmark next to this file

spent: collections.defaultdict[str, float] = collections.defaultdict(float)


def timed(owner: Any, name: str, label: str) -> None:
    """Wrap the coroutine method `owner.name` so that its wall time adds up under `label`."""
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start

    setattr(owner, name, wrapper)


class TimedConnection:
    """Stands in for the store's connection; times `COMMIT` and the other statements."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        start = time.perf_counter()
        try:
            return self._conn.execute(sql, params)
        finally:
            label = "SQL: COMMIT" if sql == "COMMIT" else "SQL: every other statement"
            spent[label] += time.perf_counter() - start


PHASES = (
    (step_module, "begin_step", "    step started: read, limits, claim kept (begin_step)"),
    (step_module, "_record_decision", "    decided: kept (record_decision)"),
    (step_module, "_start_tool", "tx  claim, decision, tool started (start_tool)"),
    (step_module, "_finish_tool", "tx  tool finished (finish_tool)"),
    (step_module, "propose", "    propose: decided, validation, policy"),
    (session_module.RunSession, "ask_policy", "    the policy (ask_policy)"),
    (step_module, "run_tool", "    execute: tool started, the call, tool finished"),
    (driver_module.Driver, "_decide", "    the agent (_decide)"),
)


def patch() -> None:
    for owner, name, label in PHASES:
        timed(owner, name, label)
    invoke = step_module.invoke

    async def timed_invoke(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await invoke(*args, **kwargs)
        finally:
            spent["    the tool call (invoke)"] += time.perf_counter() - start

    step_module.invoke = timed_invoke  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=400, help="tool steps per run")
    parser.add_argument("--runs", type=int, default=5, help="runs; figures are their medians")
    parser.add_argument("--observation", type=int, default=0, help="characters of padding")
    parser.add_argument("--dir", default=None, help="where to put the database")
    args = parser.parse_args(argv)
    patch()
    with tempfile.TemporaryDirectory(prefix="agentrt-phases-", dir=args.dir) as directory:
        store = agentrt.open_store(os.path.join(directory, "runs.db"))
        tool = make_tool("x" * args.observation)
        run_once(store, tool, 60)  # warm up, and grow the WAL to its checkpoint size
        store._conn = TimedConnection(store._conn)  # type: ignore[assignment]
        per_run: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
        walls: list[float] = []
        for _ in range(args.runs):
            spent.clear()
            sample = run_once(store, tool, args.steps)
            walls.append(sample.loop / args.steps * 1e6)
            for label, seconds in spent.items():
                per_run[label].append(seconds / args.steps * 1e6)
        store.close()
    print(f"{args.runs} runs of {args.steps} steps, medians, microseconds per step")
    print(f"{statistics.median(walls):8.0f}  in-loop wall time per step (timers included)")
    order = ["SQL: COMMIT", "SQL: every other statement", *(label for *_, label in PHASES)]
    order.append("    the tool call (invoke)")
    for label in order:
        if label in per_run:
            print(f"{statistics.median(per_run[label]):8.0f}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
