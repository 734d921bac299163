"""Where to draw the line: the file's size per step for values of each size, by inline limit.

Each run makes `--steps` allowed tool calls whose argument and observation are
`size` characters, with the store's `INLINE_LIMIT` set to each limit given
(`0` stores nothing once: every value in its row, as before migration 4), and
prints the file's bytes per step (checkpointed) over the content's, and the
process's CPU per step. Decision 0084 chose the limit from this table.

    python benchmarks/stored_values.py --steps 200 --sizes 256 512 1024 2048 8192
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time

import agentrt
from agentrt import Decision, StepInput
from agentrt._store.sqlite import _values


class Caller:
    def __init__(self, steps: int, size: int) -> None:
        self.steps, self.size, self.n = steps, size, 0

    def decide(self, input: StepInput) -> Decision:
        n, self.n = self.n, self.n + 1
        if n >= self.steps:
            return Decision.complete({"steps": n})
        return Decision.tool_call("echo", {"n": n, "pad": (str(n) * self.size)[: self.size]})


def _tool() -> agentrt.Tool:
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def echo(n: int, pad: str) -> dict[str, object]:
        """Echo the argument back reversed."""
        return {"n": n, "seen": pad[::-1]}

    return echo


def _size(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return os.path.getsize(path)


def measure(directory: str, steps: int, size: int, limit: int) -> tuple[float, float]:
    path = os.path.join(directory, f"v-{size}-{limit}.db")
    agentrt.open_store(path).close()
    before = _size(path)
    old = _values.INLINE_LIMIT
    _values.INLINE_LIMIT = limit if limit > 0 else 10**12
    driver = agentrt.Driver(
        store=agentrt.open_store(path),
        agent=Caller(steps, size),
        policy=agentrt.default_policy(),
        tools=[_tool()],
    )
    try:
        cpu = time.process_time()
        run = driver.start_sync("values of one size", agentrt.Limits(max_steps=steps + 10))
        cpu = time.process_time() - cpu
        assert run.status == agentrt.RunStatus.COMPLETED, run
    finally:
        driver.store.close()
        _values.INLINE_LIMIT = old
    grown = _size(path) - before
    return grown / (2 * steps * size), cpu / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 8192])
    parser.add_argument("--limits", type=int, nargs="+", default=[0, 256, 1024, 4096])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {args.steps} steps a run")
    print("file growth / content (argument + observation), and CPU us per step, by inline limit")
    head = "".join(f"{'limit ' + str(n) if n else 'in rows':>22}" for n in args.limits)
    print(f"{'size':>6}{head}")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for size in args.sizes:
            cells = []
            for limit in args.limits:
                ratio, cpu = measure(directory, args.steps, size, limit)
                cells.append(f"{ratio:8.2f}x {cpu:8.0f} us")
            print(f"{size:>6}" + "".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
