"""Microseconds per step through a hand-written loop over a Gate, beside the Driver's.

The Driver is a Gate plus an agent, so a step through the Gate should cost what
a Driver step costs. This script measures both in one process, interleaved so
that both see the same machine: runs of `--steps` allowed steps of one
read-only plain-function tool (a different small observation every step) and a
completing step, under `default_policy()`, on one warmed file-backed store
(`agentrt.open_store` in a temp dir: WAL, synchronous=FULL), from blocking code
(`start_sync`; the gate loop runs under the same `run_sync` the `_sync` twins
use, so store calls are inline in both).

"in-loop" is the time from the first step's decision being asked for to the
completing step's, over the number of tool steps: the steady cost of a step.
Each figure is the median of `--rounds` rounds, each round running both once in
a shuffled order.

    python benchmarks/gate.py [--steps N] [--rounds N] [--dir PATH]

Needs only the package. About 10 s with the defaults.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

import agentrt
from agentrt._session import run_sync
from agentrt.scripted import ScriptedAgent


def make_tool() -> agentrt.Tool:
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def read_page(page: int) -> agentrt.ToolResult:
        """Read one page (a different observation every step)."""
        return agentrt.ToolResult({"page": page, "text": ""}, summary=f"page {page}")

    return read_page


def decisions(steps: int) -> list[agentrt.Decision]:
    out = [agentrt.Decision.tool_call("read_page", {"page": i}) for i in range(steps)]
    return [*out, agentrt.Decision.complete({"pages": steps})]


def limits(steps: int) -> agentrt.Limits:
    return agentrt.Limits(max_steps=steps + 1, loop_threshold=steps + 1)


def by_driver(store: agentrt.Store, tool: agentrt.Tool, steps: int) -> float:
    marks: list[float] = []
    script = decisions(steps)

    def agent(step_input: agentrt.StepInput) -> agentrt.Decision:
        marks.append(time.perf_counter())
        return script[len(marks) - 1]

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([agent] * (steps + 1)),
        policy=agentrt.default_policy(),
        tools=[tool],
    )
    run = driver.start_sync(f"read {steps} pages", limits=limits(steps))
    check(run, steps, marks)
    return (marks[-1] - marks[0]) / steps * 1e6


def by_gate(store: agentrt.Store, tool: agentrt.Tool, steps: int) -> float:
    marks: list[float] = []
    script = decisions(steps)
    gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), tools=[tool])

    async def loop() -> agentrt.Run:
        session = await gate.begin(f"read {steps} pages", limits=limits(steps))
        while True:
            step = await session.step()
            if step is None:
                break
            session.input()  # what an agent would be shown, as the Driver builds it
            marks.append(time.perf_counter())
            verdict = await step.propose(script[len(marks) - 1])
            if verdict.outcome == agentrt.VerdictOutcome.ALLOWED:
                await step.execute()
            elif verdict.outcome != agentrt.VerdictOutcome.DENIED:
                break
        await session.close()
        return session.run

    run = run_sync(loop())
    check(run, steps, marks)
    return (marks[-1] - marks[0]) / steps * 1e6


def check(run: agentrt.Run, steps: int, marks: list[float]) -> None:
    if run.status != agentrt.RunStatus.COMPLETED or run.step_count != steps + 1:
        raise SystemExit(f"benchmark run did not complete: {run.status} {run.reason}")
    if len(marks) != steps + 1:
        raise SystemExit(f"expected {steps + 1} decisions, not {len(marks)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the store goes (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        store = agentrt.open_store(os.path.join(directory, "runs.db"))
        tool = make_tool()
        try:
            by_driver(store, tool, 50)  # warm the store (its WAL reaches its size)
            by_gate(store, tool, 50)
            figures: dict[str, list[float]] = {"driver": [], "gate": []}
            for _ in range(args.rounds):
                order = [("driver", by_driver), ("gate", by_gate)]
                random.shuffle(order)
                for name, fn in order:
                    figures[name].append(fn(store, tool, args.steps))
        finally:
            store.close()
    driver_us = statistics.median(figures["driver"])
    gate_us = statistics.median(figures["gate"])
    print(
        f"in-loop µs per step, {args.steps} steps, median of {args.rounds} rounds "
        f"({platform.python_version()}, {sys.platform})"
    )
    print(f"driver      {driver_us:9.1f}")
    print(f"gate loop   {gate_us:9.1f}")
    print(f"gate/driver {gate_us / driver_us:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
