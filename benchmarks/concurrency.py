"""Many runs at once on one SQLite file: transactions per fsync, CPU, latency, processes.

Issue 20's concurrency targets, each printed as met or missed from ratios
measured in this one invocation (never a figure written into the script):

(a) **64 runs in flight in one process** (`asyncio.gather` of `await
    driver.start(...)`, one Driver, one store file, `--runs` runs of `--steps`
    allowed steps of a read-only plain-function tool, then a completing step):

    - transactions per fsync (target >= 8): the same workload run again in a
      child process under `strace -f -c -e trace=fsync,fdatasync` (every thread's
      calls counted by the kernel's view, not estimated), whose COMMITs are
      counted by a `sqlite3` trace callback on every connection the store opens
      (in the child only: the timed run has no tracer);
    - aggregate steps/s, CPU seconds per step, and their product, the share of
      the wall time the process was on a CPU (target >= 0.85: CPU-bound, not
      waiting on fsyncs);
    - p50 and p99 step latency (the time between the agent being asked for two
      consecutive steps of a run) beside those of one run alone, measured first
      in the same process;
    - event-loop lag: a task that sleeps 1 ms at a time records how late it
      wakes; the maximum beside one plain fsynced commit's time (target: never
      above it). Beside it, from the counting child: how many COMMITs ran on the
      event loop's own thread (the loop waiting on a commit) and the longest single
      callback the loop ran, which tell a loop blocked by commits from one that is
      busy with the steps of the runs that are ready (a CPU-bound process's timer
      waits behind every ready run's next piece of work); and, from the timed run,
      the interpreter's garbage collections (`gc.callbacks`): the longest one, which
      holds the loop as long as it runs, and the worst lag less the collections that
      fell inside its tick: what the runs woken together cost.

(b) **`--procs` processes x `--proc-runs` runs on one file** (8 x 50 by
    default), each process a child running its runs in flight as in (a), all
    started together: every exception that reached the caller of `start`
    (target: no `database is locked`, or any other); nothing lost (every run
    whose `start` returned it COMPLETED is in the file so, with the steps and
    events one process's runs write, each; what a start that raised left
    behind is counted apart); aggregate throughput over that
    of one process running `--proc-runs` runs alone on a file of its own
    (target >= 1.5x), taken in each of `--proc-rounds` rounds (one process
    alone, then the processes, so that both see the same minutes of a machine
    whose speed moves) and the median round's shown; the slowest process's
    throughput over the mean (target >= 0.5x).

(c) **With `--postgres URL`, the same processes on one PostgreSQL schema** (issue
    21 item 7): one process alone, then `--pg-procs` (8 and 32 by default), each
    running `--pg-runs` runs in flight, in a fresh schema each, dropped after:
    exceptions, nothing lost (counted through the store's interface), and the
    aggregate throughput over one process's (target >= 4x at 8: the server commits
    concurrently). On a machine whose cores the server shares with the processes,
    the cores, not the server, bound it: the CPU count is printed.

(b) and (c) also print the machine's ceiling, measured in the same run: the CPU
time every process on the machine used (`/proc/stat`, the server's included)
per step made, and so the most steps per second its cores could make at that
cost, as a multiple of one process alone. A target above that ceiling is out
of this machine's reach whatever the runtime does (run it with nothing else on
the machine: other work's CPU counts too).

agentrt commits two fsynced transactions per allowed step (decision 0088); on the
async path the transactions of runs in one process are committed in groups, one
fsync for each group (decision 0089). Processes do not share commits: each
process's group waits for the file's write lock. This script's job is to measure
what that gives, honestly.

    python benchmarks/concurrency.py [--runs 64] [--steps 20] [--procs 8]
                                     [--proc-runs 50] [--proc-steps 10] [--proc-rounds 3]
                                     [--dir PATH]
                                     [--postgres URL [--pg-procs 8,32] [--pg-runs 10]
                                      [--only-postgres]]

Needs only the package, and `strace` for the fsync count (`apt-get install -y
strace`; without it that figure is reported as not counted). About a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import agentrt
from agentrt import Decision, StepInput

TX_PER_FSYNC_TARGET = 8.0
PG_PROCS_TARGET = 4.0  # at 8 processes, issue 21 item 7
CPU_BOUND_TARGET = 0.85
PROCS_THROUGHPUT_TARGET = 1.5
SLOWEST_TARGET = 0.5
LAG_TICK_S = 0.001


# --- the workload -------------------------------------------------------------------------------


@agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
def read_page(page: int) -> agentrt.ToolResult:
    """Read one page (a different small observation every step)."""
    return agentrt.ToolResult({"page": page, "text": ""}, summary=f"page {page}")


class Agent:
    """`steps` calls of `read_page`, then completing; notes when each run's steps were asked for.

    Shared by every run of a Driver: which call comes next is read from the
    step input (its steps, the current one included), never from a script.
    """

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.asked: dict[str, list[float]] = {}

    def decide(self, input: StepInput) -> Decision:
        self.asked.setdefault(input.run.id, []).append(time.perf_counter())
        done = len(input.steps) - 1
        if done >= self.steps:
            return Decision.complete({"pages": done})
        return Decision.tool_call("read_page", {"page": done})

    def latencies(self) -> list[float]:
        return [b - a for marks in self.asked.values() for a, b in itertools.pairwise(marks)]


def limits(steps: int) -> agentrt.Limits:
    return agentrt.Limits(max_steps=steps + 1, loop_threshold=steps + 1)


async def in_flight(
    store: agentrt.Store, runs: int, steps: int, tag: str = "run"
) -> tuple[Agent, list[Any]]:
    """`runs` runs of one Driver at once; the runs or the exceptions that reached the caller."""
    agent = Agent(steps)
    driver = agentrt.Driver(
        store=store, agent=agent, policy=agentrt.default_policy(), tools=[read_page]
    )
    outcomes = await asyncio.gather(
        *(driver.start(f"{tag} {i}", limits=limits(steps)) for i in range(runs)),
        return_exceptions=True,
    )
    return agent, list(outcomes)


def completed(outcomes: Sequence[Any], steps: int) -> int:
    return sum(
        1
        for r in outcomes
        if isinstance(r, agentrt.Run)
        and r.status == agentrt.RunStatus.COMPLETED
        and r.step_count == steps + 1
    )


def failures(outcomes: Sequence[Any]) -> list[str]:
    return [f"{type(r).__name__}: {r}" for r in outcomes if isinstance(r, BaseException)]


class GcPauses:
    """The interpreter's garbage collections while installed (`with`): how many, how many
    of them full (generation 2), the longest single one and their sum, in seconds. A
    collection runs on the thread whose allocation crossed the collector's threshold (or
    that called `gc.collect()`), holding the interpreter's lock, so the event loop waits
    for it: a lag the runtime's own scheduling cannot remove."""

    def __init__(self) -> None:
        self.count = 0
        self.full = 0
        self.longest = 0.0
        self.total = 0.0
        self._began = 0.0

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        if not self._began:  # installed while a collection ran: its start was not seen
            return
        took, self._began = time.perf_counter() - self._began, 0.0
        self.count += 1
        self.full += info["generation"] == 2
        self.longest = max(self.longest, took)
        self.total += took

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._seen)


class LagProbe:
    """How late a task sleeping `LAG_TICK_S` at a time wakes: the event loop's worst stall,
    and (given `pauses`) the worst less the garbage collections that ended inside its tick."""

    def __init__(self, pauses: GcPauses | None = None) -> None:
        self.worst = 0.0
        self.worst_without_gc = 0.0
        self.ticks = 0
        self.ticks_with_gc = 0
        self._pauses = pauses
        self._task: asyncio.Task[None] | None = None

    def note(self, late: float, collecting: float) -> None:
        """One tick `late` seconds late, `collecting` seconds of it in garbage collections."""
        self.worst = max(self.worst, late)
        self.worst_without_gc = max(self.worst_without_gc, late - collecting)
        self.ticks += 1
        self.ticks_with_gc += collecting > 0

    def _collected(self) -> float:
        return self._pauses.total if self._pauses is not None else 0.0

    async def _tick(self) -> None:
        while True:
            collected, before = self._collected(), time.perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            late = time.perf_counter() - before - LAG_TICK_S
            self.note(late, self._collected() - collected)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def one_commit_us(directory: str, commits: int = 50) -> float:
    """One plain fsynced commit (WAL, synchronous=FULL): `BEGIN IMMEDIATE`, INSERT, `COMMIT`."""
    path = os.path.join(directory, "floor.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        for warm in range(20):
            conn.execute("INSERT INTO t (v) VALUES (?)", (f"warm {warm}",))
        start = time.perf_counter()
        for i in range(commits):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (f"commit {i}",))
            conn.execute("COMMIT")
        return (time.perf_counter() - start) / commits * 1e6
    finally:
        conn.close()


# --- (a) one process, many runs -----------------------------------------------------------------


@dataclass
class InFlight:
    runs: int
    steps: int
    wall: float = 0.0
    cpu: float = 0.0
    done: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    alone: list[float] = field(default_factory=list)  # step latencies of one run alone
    lag: float = 0.0
    lag_alone: float = 0.0
    lag_without_gc: float = 0.0  # each tick's lag less the collections inside it
    gc_pauses: GcPauses = field(default_factory=GcPauses)  # during the timed runs
    commit_us: float = 0.0

    @property
    def total_steps(self) -> int:
        return self.done * self.steps

    def steps_per_s(self) -> float:
        return self.total_steps / self.wall

    def cpu_per_step(self) -> float:
        return self.cpu / self.total_steps


async def measure_in_flight(path: str, runs: int, steps: int, alone_runs: int) -> InFlight:
    store = agentrt.open_store(path)
    result = InFlight(runs, steps)
    try:
        await in_flight(store, 4, 10, tag="warm")  # imports, thread pools, the WAL's first growth
        probe = LagProbe()
        probe.start()
        for i in range(alone_runs):
            agent, outcomes = await in_flight(store, 1, steps, tag=f"alone {i}")
            if completed(outcomes, steps) != 1:
                raise SystemExit(f"a run alone did not complete: {outcomes!r:.300}")
            result.alone += agent.latencies()
        await probe.stop()
        result.lag_alone = probe.worst
        probe = LagProbe(result.gc_pauses)
        with result.gc_pauses:
            probe.start()
            cpu, start = time.process_time(), time.perf_counter()
            agent, outcomes = await in_flight(store, runs, steps, tag="flight")
            result.wall, result.cpu = time.perf_counter() - start, time.process_time() - cpu
            await probe.stop()
        result.lag, result.lag_without_gc = probe.worst, probe.worst_without_gc
        result.done = completed(outcomes, steps)
        result.errors = failures(outcomes)
        result.latencies = agent.latencies()
    finally:
        store.close()
    return result


def count_worker(path: str, runs: int, steps: int) -> None:
    """The counting child: warm up, say "ready", wait for "go" (strace attached by then), run
    the in-flight runs counting every COMMIT, print the counts, wait for "quit"."""
    counts = {"commits": 0, "begins": 0, "transactions": 0, "loop_commits": 0}
    connect = sqlite3.connect
    loop_thread = threading.get_ident()  # `asyncio.run` runs the loop on this thread

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        # A write transaction (`BEGIN IMMEDIATE`) holds one transaction of the step
        # machine, or a group of them, one `SAVEPOINT` each (group commit, decision 0089).
        state = {"writing": False, "works": 0}

        def seen(statement: str) -> None:
            words = statement.split(None, 1)
            word = words[0].upper() if words else ""
            if word in ("COMMIT", "END"):
                counts["commits"] += 1
                if threading.get_ident() == loop_thread:
                    counts["loop_commits"] += 1
                if state["writing"]:
                    counts["transactions"] += max(1, state["works"])
                state["writing"] = False
            elif word == "ROLLBACK" and len(words) == 1:
                state["writing"] = False
            elif word == "BEGIN":
                counts["begins"] += 1
                state["writing"] = "IMMEDIATE" in statement.upper()
                state["works"] = 0
            elif word == "SAVEPOINT":
                state["works"] += 1

        conn.set_trace_callback(seen)
        return conn

    # The longest callback the event loop runs (a task's step is one): how long the loop
    # is held at once. Timed here only, never in the timed run.
    longest = [0.0]
    run_callback = asyncio.events.Handle._run

    def timed_callback(handle: asyncio.events.Handle) -> None:
        began = time.perf_counter()
        try:
            run_callback(handle)
        finally:
            longest[0] = max(longest[0], time.perf_counter() - began)

    sqlite3.connect = traced  # type: ignore[assignment]
    store = agentrt.open_store(path)
    try:
        asyncio.run(in_flight(store, 4, 10, tag="warm"))
        print("ready", flush=True)
        sys.stdin.readline()
        before = dict(counts)
        asyncio.events.Handle._run = timed_callback  # type: ignore[method-assign]
        _, outcomes = asyncio.run(in_flight(store, runs, steps, tag="flight"))
        asyncio.events.Handle._run = run_callback  # type: ignore[method-assign]
        after = dict(counts)
        print(
            json.dumps(
                {
                    "commits": after["commits"] - before["commits"],
                    "begins": after["begins"] - before["begins"],
                    "transactions": after["transactions"] - before["transactions"],
                    "loop_commits": after["loop_commits"] - before["loop_commits"],
                    "longest_callback": longest[0],
                    "done": completed(outcomes, steps),
                }
            ),
            flush=True,
        )
        sys.stdin.readline()
    finally:
        store.close()


@dataclass
class FsyncCount:
    fsyncs: int | None  # None: not counted
    commits: int
    steps: int
    why: str = ""
    transactions: int = 0  # the step machine's, grouped or not (one per SAVEPOINT in a group)
    loop_commits: int | None = None  # COMMITs run on the event loop's thread (None: not run)
    longest_callback: float = 0.0  # seconds: the longest one callback held the loop


STRACE_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$")


def parse_strace_summary(text: str) -> int:
    """fsync + fdatasync calls in `strace -c` output (its `calls` column)."""
    total = 0
    for line in text.splitlines():
        match = STRACE_LINE.match(line)
        if match:
            total += int(match.group(1))
    return total


def attach_strace(pid: int, summary: str, log: str) -> tuple[subprocess.Popen[bytes] | None, str]:
    """`strace -f -c` attached to every thread of `pid`; (None, why) when it cannot be."""
    strace = shutil.which("strace")
    if strace is None:
        return None, "strace is not installed (apt-get install -y strace)"
    with open(log, "wb") as err:
        tracer = subprocess.Popen(
            [strace, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", summary, "-p", str(pid)],
            stderr=err,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # strace says "Process N attached" once it holds pid
        said = Path(log).read_text(encoding="utf-8", errors="replace")
        if "attached" in said:
            time.sleep(0.2)
            return tracer, "strace -f -c -p, attached for the in-flight runs only"
        if tracer.poll() is not None:
            break
        time.sleep(0.05)
    if tracer.poll() is None:
        tracer.kill()
        tracer.wait()
    said = Path(log).read_text(encoding="utf-8", errors="replace").strip()
    return None, f"strace could not attach: {said[-200:] or 'no answer'}"


def count_fsyncs(directory: str, runs: int, steps: int) -> FsyncCount:
    """(a)'s runs again in a child: its COMMITs counted by a trace callback, its fsyncs by
    `strace -f -c -p`, attached to every thread after the child's warm-up and detached
    after its runs, so that exactly the in-flight runs are counted."""
    path = os.path.join(directory, "counted.db")
    child = subprocess.Popen(
        [sys.executable, __file__, "--count-worker", path, str(runs), str(steps)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    tracer: subprocess.Popen[bytes] | None = None
    summary = os.path.join(directory, "strace.txt")
    try:
        if child.stdout.readline().strip() != "ready":
            raise SystemExit("the counting child did not start")
        tracer, why = attach_strace(child.pid, summary, os.path.join(directory, "strace.log"))
        child.stdin.write("go\n")
        child.stdin.flush()
        counted = json.loads(child.stdout.readline())
        fsyncs: int | None = None
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)  # detach: strace writes its summary
            tracer.wait(timeout=60)
            fsyncs = parse_strace_summary(Path(summary).read_text(encoding="utf-8"))
        child.stdin.write("quit\n")
        child.stdin.flush()
        child.wait(timeout=60)
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.kill()
        if child.poll() is None:
            child.kill()
    return FsyncCount(
        fsyncs,
        counted["commits"],
        counted["done"] * steps,
        why=why,
        transactions=counted["transactions"],
        loop_commits=counted["loop_commits"],
        longest_callback=counted["longest_callback"],
    )


# --- (b) several processes ------------------------------------------------------------------------


def commits_of(store: agentrt.Store) -> tuple[int, int]:
    """The group commits this process made on `store`, and the transactions they held
    (the step machine's committer counts both)."""
    from agentrt._group_commit import _COMMITTERS

    committer = _COMMITTERS.get(store)
    return (committer.groups, committer.works) if committer is not None else (0, 0)


class TurnClock:
    """How long a SQLite store's connection held its writer's turn (decision 0106), by the
    clock and by its thread's CPU: the part of the work no other process can do meanwhile."""

    def __init__(self, store: agentrt.Store) -> None:
        self.held = 0.0
        self.cpu = 0.0
        turns = getattr(store, "_turns", None)
        if turns is None:
            return
        take, give = turns.take, turns.give
        since: list[float] = []

        def timed_take(*args: Any, **kwargs: Any) -> None:
            take(*args, **kwargs)
            since[:] = [time.perf_counter(), time.thread_time()]

        def timed_give() -> None:
            if since:
                self.held += time.perf_counter() - since[0]
                self.cpu += time.thread_time() - since[1]
                since.clear()
            give()

        turns.take, turns.give = timed_take, timed_give


def proc_worker(path: str, runs: int, steps: int, tag: str, start_at: float) -> None:
    """One of (b)'s processes: open the shared file, wait for the common start, run in flight."""
    failed_open: str | None = None
    try:
        store = agentrt.open_store(path)
        turn = TurnClock(store)
    except Exception as e:
        failed_open = f"{type(e).__name__}: {e}"
    if failed_open is not None:
        print(json.dumps({"tag": tag, "errors": [failed_open], "done": 0}), flush=True)
        return
    try:
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        cpu, start = time.process_time(), time.perf_counter()
        began = time.time()
        _, outcomes = asyncio.run(in_flight(store, runs, steps, tag=tag))
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        groups, works = commits_of(store)
    finally:
        store.close()
    print(
        json.dumps(
            {
                "tag": tag,
                "done": completed(outcomes, steps),
                "errors": failures(outcomes),
                "wall": wall,
                "cpu": used,
                "began": began,
                "ended": began + wall,
                "commits": groups,
                "transactions": works,
                "turn_held": turn.held,
                "turn_cpu": turn.cpu,
            }
        ),
        flush=True,
    )


@dataclass
class Procs:
    procs: int
    runs: int
    steps: int
    results: list[dict[str, Any]]
    wall: float  # first start to last end
    runs_completed: int = 0  # runs in the file COMPLETED with all their steps
    steps_rows: int = 0  # of those runs
    events_rows: int = 0
    other_runs: int = 0  # runs in the file not COMPLETED (a start that raised may leave one)
    busy_s: float | None = None  # CPU seconds every process on the machine used meanwhile
    other_steps: int = 0
    other_events: int = 0

    def errors(self) -> list[str]:
        return [e for r in self.results for e in r.get("errors", [])]

    def done(self) -> int:
        return sum(int(r.get("done", 0)) for r in self.results)

    def steps_per_s(self) -> float:
        return self.done() * self.steps / self.wall if self.wall > 0 else 0.0

    def each_per_s(self) -> list[float]:
        return [r["done"] * self.steps / r["wall"] for r in self.results if r.get("wall")]

    def ceiling_per_s(self) -> float | None:
        """The most steps/s the machine's cores could make at the CPU a step took here."""
        steps = self.done() * self.steps
        if self.busy_s is None or steps == 0 or self.busy_s <= 0:
            return None
        return (os.cpu_count() or 1) / (self.busy_s / steps)


def machine_busy_s() -> float | None:
    """CPU seconds every process on the machine has used since boot (`/proc/stat`: all
    but idle and I/O wait), or None where there is no such file."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_procs(path: str, procs: int, runs: int, steps: int) -> Procs:
    """`procs` children on the file at `path`, started together; then the file's rows counted."""
    agentrt.open_store(path).close()  # created and migrated before the children open it
    start_at = time.time() + 1.0 + 0.3 * procs  # time for every child to import and open
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--proc-worker",
                path,
                str(runs),
                str(steps),
                f"p{k}",
                repr(start_at),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(procs)
    ]
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    busy_before = machine_busy_s()
    results: list[dict[str, Any]] = []
    for child in children:
        out, err = child.communicate(timeout=1800)
        lines = out.strip().splitlines()
        if child.returncode != 0 or not lines:
            results.append(
                {
                    "tag": "?",
                    "done": 0,
                    "errors": [f"child exit {child.returncode}: {err.strip()[-500:]}"],
                }
            )
            continue
        results.append(json.loads(lines[-1]))
    timed = [r for r in results if "began" in r]
    wall = max(r["ended"] for r in timed) - min(r["began"] for r in timed) if timed else 0.0
    busy_after = machine_busy_s()
    result = Procs(procs, runs, steps, results, wall)
    if busy_before is not None and busy_after is not None:
        result.busy_s = busy_after - busy_before
    count_rows(result, path)
    return result


def count_rows(result: Procs, target: str) -> None:
    """The record's runs, steps and events, through the store's interface (any backend):
    those of runs COMPLETED with all their steps apart from the rest."""
    store = agentrt.open_existing(target, read_only=True)
    try:
        for run in store.list_runs(limit=1_000_000, cap=64):
            steps = len(store.list_steps(run.id, cap=64))
            events = len(store.list_events(run.id, limit=1_000_000, cap=64))
            if run.status == "COMPLETED" and run.step_count == result.steps + 1:
                result.runs_completed += 1
                result.steps_rows += steps
                result.events_rows += events
            else:
                result.other_runs += 1
                result.other_steps += steps
                result.other_events += events
    finally:
        store.close()


# --- (c) several processes on PostgreSQL -------------------------------------------------------


def schema_url(url: str, schema: str) -> str:
    """`url` naming `schema` (`?schema=`), whatever query it had."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def shown_url(url: str) -> str:
    """`url` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
    return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


def postgres_fleet(url: str, counts: Sequence[int], runs: int, steps: int) -> list[Procs]:
    """One process alone, then each of `counts`, on a fresh schema each (dropped after)."""
    import psycopg

    tag = f"concurrency_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    made: list[str] = []
    fleets: list[Procs] = []
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as admin:
        try:
            for procs in (1, *counts):
                schema = f"{tag}_{procs}"
                made.append(schema)
                fleets.append(run_procs(schema_url(url, schema), procs, runs, steps))
                print(f"  (c) {procs} process(es) done", file=sys.stderr, flush=True)
        finally:
            for schema in made:
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return fleets


def report_postgres(url: str, fleets: Sequence[Procs]) -> list[bool]:
    verdicts: list[bool] = []
    alone, many = fleets[0], fleets[1:]
    print()
    print(
        f"(c) PostgreSQL ({shown_url(url)}): processes x {alone.runs} runs in flight, "
        f"{alone.steps} steps each, one schema; {os.cpu_count()} cores shared with the server"
    )
    for p in fleets:
        errors = p.errors()
        acknowledged = p.done()
        steps_each = alone.steps_rows / max(alone.runs_completed, 1)
        events_each = alone.events_rows / max(alone.runs_completed, 1)
        lost = not (
            p.runs_completed == acknowledged
            and p.steps_rows == round(acknowledged * steps_each)
            and p.events_rows == round(acknowledged * events_each)
        )
        met = not errors and not lost
        verdicts.append(met)
        ratio = p.steps_per_s() / alone.steps_per_s() if alone.steps_per_s() else 0.0
        line = (
            f"    {p.procs:>2} process(es): {p.steps_per_s():,.0f} steps/s, {ratio:.2f}x one "
            f"process; exceptions {len(errors)}; {p.runs_completed} of {acknowledged} runs "
            f"returned COMPLETED in the record with their steps and events: {verdict(met)}"
        )
        print(line)
        for error in sorted(set(errors))[:3]:
            print(f"      {error[:200]}")
    for p in many:
        print_ceiling(p, alone)
    at_8 = [p for p in many if p.procs == 8]
    if at_8 and alone.steps_per_s():
        ratio = at_8[0].steps_per_s() / alone.steps_per_s()
        met = ratio >= PG_PROCS_TARGET
        verdicts.append(met)
        print(
            f"    8 processes over one: {ratio:.2f}x (target >= {PG_PROCS_TARGET:g}x): "
            f"{verdict(met)}"
        )
    return verdicts


# --- reporting ----------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def print_ceiling(p: Procs, alone: Procs) -> None:
    """The machine's ceiling for `p`'s workload (see the module's docstring)."""
    ceiling = p.ceiling_per_s()
    if ceiling is None or not alone.steps_per_s() or p.busy_s is None:
        print(f"    {p.procs} processes: the machine's CPU was not read (no /proc/stat)")
        return
    per_step_ms = 1000 * p.busy_s / (p.done() * p.steps)
    print(
        f"    {p.procs} processes: the machine's CPU per step {per_step_ms:.2f} ms (every "
        f"process, the server's included); {os.cpu_count()} cores make at most "
        f"{ceiling:,.0f} steps/s at that cost: {ceiling / alone.steps_per_s():.2f}x one process"
    )


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def report_in_flight(a: InFlight, counted: FsyncCount) -> list[bool]:
    verdicts: list[bool] = []
    print()
    print(
        f"(a) {a.runs} runs in flight in one process (await start), {a.steps} steps each, one file"
    )
    print(
        f"    runs completed: {a.done} of {a.runs}; exceptions reaching the caller: {len(a.errors)}"
    )
    for error in sorted(set(a.errors))[:5]:
        print(f"      {error[:200]}")
    if counted.fsyncs is None:
        print(
            f"    transactions per fsync: not counted ({counted.why}); "
            f"{counted.commits} commits for {counted.steps} steps"
        )
    else:
        per = counted.transactions / counted.fsyncs if counted.fsyncs else float("inf")
        met = per >= TX_PER_FSYNC_TARGET
        verdicts.append(met)
        print(
            f"    transactions per fsync: {counted.transactions} transactions (in "
            f"{counted.commits} commits) / {counted.fsyncs} fsyncs = "
            f"{per:.2f} (target >= {TX_PER_FSYNC_TARGET:g}): {verdict(met)}"
        )
        print(
            f"      per allowed step: {counted.transactions / max(counted.steps, 1):.2f} "
            f"transactions, {counted.commits / max(counted.steps, 1):.2f} commits, "
            f"{counted.fsyncs / max(counted.steps, 1):.2f} fsyncs ({counted.why})"
        )
    rate, per_step = a.steps_per_s(), a.cpu_per_step()
    busy = rate * per_step
    met = busy >= CPU_BOUND_TARGET
    verdicts.append(met)
    print(f"    aggregate: {rate:,.0f} steps/s; CPU {per_step * 1e6:,.0f} µs per step")
    print(
        f"    steps/s x CPU s per step = {busy:.2f} (target >= {CPU_BOUND_TARGET:g}, CPU-bound): "
        f"{verdict(met)}"
    )
    p50, p99 = percentile(a.latencies, 50), percentile(a.latencies, 99)
    a50, a99 = percentile(a.alone, 50), percentile(a.alone, 99)
    print(
        f"    step latency: p50 {p50 * 1e3:,.1f} ms, p99 {p99 * 1e3:,.1f} ms; one run alone: "
        f"p50 {a50 * 1e3:,.1f} ms, p99 {a99 * 1e3:,.1f} ms (p50 {p50 / a50:.1f}x, "
        f"p99 {p99 / a99:.1f}x)"
    )
    met = a.lag * 1e6 <= a.commit_us
    verdicts.append(met)
    print(
        f"    event-loop lag: max {a.lag * 1e6:,.0f} µs "
        f"(one run alone: {a.lag_alone * 1e6:,.0f} µs); one fsynced commit "
        f"{a.commit_us:,.0f} µs; target lag <= one commit: {verdict(met)}"
    )
    if counted.loop_commits is not None:
        print(
            f"      why: COMMITs run on the event loop's thread: {counted.loop_commits} of "
            f"{counted.commits}; the longest single callback held the loop "
            f"{counted.longest_callback * 1e6:,.0f} µs; a waking timer waits behind every "
            "ready run's next callback"
        )
    pauses = a.gc_pauses
    print(
        f"      the interpreter's garbage collections: {pauses.count} ({pauses.full} full), "
        f"{pauses.total * 1e3:,.1f} ms in all, the longest {pauses.longest * 1e6:,.0f} µs; "
        f"the lag less the collections inside its tick: max {a.lag_without_gc * 1e6:,.0f} µs"
    )
    return verdicts


def throughput_ratio(alone: Procs, p: Procs) -> float:
    return p.steps_per_s() / alone.steps_per_s() if alone.steps_per_s() else 0.0


def nothing_lost(p: Procs, alone: Procs) -> tuple[bool, str]:
    """Whether every run `p`'s starts returned COMPLETED is in its file so, with the rows one
    process's runs write; and the line that says so."""
    acknowledged = p.done()  # runs whose `start` returned them COMPLETED to the caller
    steps_each = alone.steps_rows / max(alone.runs_completed, 1)
    events_each = alone.events_rows / max(alone.runs_completed, 1)
    expected_steps = round(acknowledged * steps_each)
    expected_events = round(acknowledged * events_each)
    met = (
        p.runs_completed == acknowledged
        and p.steps_rows == expected_steps
        and p.events_rows == expected_events
    )
    return met, (
        f"nothing lost: of {acknowledged} runs returned COMPLETED ({p.procs * p.runs} "
        f"started), {p.runs_completed} are in the file so, with step rows "
        f"{p.steps_rows}/{expected_steps} and events {p.events_rows}/{expected_events} "
        "(as one process's runs)"
    )


def report_procs(rounds: Sequence[tuple[Procs, Procs]]) -> list[bool]:
    """(b)'s verdicts: no error and nothing lost in any round; the median round's ratio."""
    ratios = [throughput_ratio(alone, p) for alone, p in rounds]
    median = sorted(range(len(rounds)), key=lambda i: ratios[i])[len(rounds) // 2]
    alone, p = rounds[median]
    verdicts: list[bool] = []
    print()
    print(
        f"(b) {p.procs} processes x {p.runs} runs in flight, {p.steps} steps each, one file; "
        f"{len(rounds)} round{'s' if len(rounds) > 1 else ''}"
    )
    errors = [e for _, each in rounds for e in each.errors()]
    locked = [e for e in errors if "locked" in e or "busy" in e.lower()]
    met = not locked and not errors
    verdicts.append(met)
    print(
        f"    exceptions reaching a caller: {len(errors)}, of which 'database is locked' or "
        f"busy: {len(locked)} (target: none): {verdict(met)}"
    )
    for error in sorted(set(errors))[:5]:
        print(f"      {error[:200]}")
    checked = [nothing_lost(each, first) for first, each in rounds]
    met = all(ok for ok, _ in checked)
    verdicts.append(met)
    shown = checked[median][1]
    print(f"    {shown}: {verdict(met)}")
    for i, (ok, line) in enumerate(checked):
        if not ok:
            print(f"      round {i + 1}: {line}: MISSED")
    if p.other_runs or p.other_steps or p.other_events or errors:
        print(
            f"      left by the starts that raised: {p.other_runs} runs, {p.other_steps} "
            f"steps, {p.other_events} events (not COMPLETED)"
        )
    ratio = ratios[median]
    met = ratio >= PROCS_THROUGHPUT_TARGET
    verdicts.append(met)
    print(
        f"    aggregate: {p.steps_per_s():,.0f} steps/s; one process alone: "
        f"{alone.steps_per_s():,.0f} steps/s; {ratio:.2f}x (target >= "
        f"{PROCS_THROUGHPUT_TARGET:g}x): {verdict(met)}"
    )
    print(
        "    each round (one process alone, then the processes): "
        + ", ".join(f"{r:.2f}x" for r in ratios)
        + "; the median round is the one shown"
    )
    print_ceiling(p, alone)
    for run in (alone, p):
        commits = sum(int(r.get("commits", 0)) for r in run.results)
        held = sum(int(r.get("transactions", 0)) for r in run.results)
        if commits:
            print(
                f"    {run.procs} process{'es' if run.procs > 1 else ''}: {held:,} transactions "
                f"in {commits:,} commits, {held / commits:.1f} a commit"
            )
        turn_held = sum(float(r.get("turn_held", 0.0)) for r in run.results)
        turn_cpu = sum(float(r.get("turn_cpu", 0.0)) for r in run.results)
        if turn_held and run.wall and run.done():
            steps = run.done() * run.steps
            print(
                f"    {run.procs} process{'es' if run.procs > 1 else ''}: the write turn held "
                f"{turn_held / run.wall:.0%} of the time, {1e6 * turn_held / steps:,.0f} µs a "
                f"step, of which the holding thread's CPU {1e6 * turn_cpu / steps:,.0f} µs"
            )
    each = p.each_per_s()
    if each:
        slowest = min(each) / statistics.mean(each)
        met = slowest >= SLOWEST_TARGET
        verdicts.append(met)
        print(
            f"    per process: {', '.join(f'{x:,.0f}' for x in each)} steps/s; slowest / mean = "
            f"{slowest:.2f} (target >= {SLOWEST_TARGET:g}): {verdict(met)}"
        )
    return verdicts


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=64, help="(a) runs in flight (default 64)")
    parser.add_argument("--steps", type=int, default=20, help="(a) steps per run (default 20)")
    parser.add_argument("--alone", type=int, default=3, help="(a) runs alone first (default 3)")
    parser.add_argument("--procs", type=int, default=8, help="(b) processes (default 8)")
    parser.add_argument("--proc-runs", type=int, default=50, help="(b) runs each (default 50)")
    parser.add_argument("--proc-steps", type=int, default=10, help="(b) steps per run (10)")
    parser.add_argument(
        "--proc-rounds",
        type=int,
        default=3,
        help="(b) rounds of one process alone then the processes; the median ratio (3)",
    )
    parser.add_argument("--dir", default=None, help="where the files go (a new temp dir)")
    parser.add_argument("--no-strace", action="store_true", help="do not count fsyncs")
    parser.add_argument(
        "--postgres", metavar="URL", default=None, help="(c) also on this PostgreSQL server"
    )
    parser.add_argument(
        "--pg-procs", default="8,32", help="(c) process counts, comma-separated (8,32)"
    )
    parser.add_argument("--pg-runs", type=int, default=10, help="(c) runs each (default 10)")
    parser.add_argument(
        "--only-postgres", action="store_true", help="(c) alone: skip (a) and (b) on SQLite"
    )
    args = parser.parse_args(argv)
    try:
        args.pg_procs = [int(n) for n in args.pg_procs.split(",")]
    except ValueError:
        parser.error("--pg-procs must be whole numbers separated by commas")
    if any(n < 1 for n in args.pg_procs):
        parser.error("--pg-procs must be at least 1 each")
    for name in (
        "runs",
        "steps",
        "alone",
        "procs",
        "proc_runs",
        "proc_steps",
        "proc_rounds",
        "pg_runs",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def on_sqlite(args: argparse.Namespace) -> list[bool]:
    """(a) and (b): many runs in one process, then several processes, on SQLite files."""
    verdicts: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="agentrt-concurrency-", dir=args.dir) as directory:
        commit_us = one_commit_us(directory)
        a = asyncio.run(
            measure_in_flight(
                os.path.join(directory, "flight.db"), args.runs, args.steps, args.alone
            )
        )
        a.commit_us = commit_us
        print("  (a) timed", file=sys.stderr, flush=True)
        if args.no_strace:
            counted = FsyncCount(None, 0, 0, why="--no-strace")
        else:
            counted = count_fsyncs(directory, args.runs, args.steps)
        print("  (a) counted", file=sys.stderr, flush=True)
        verdicts += report_in_flight(a, counted)
        sys.stdout.flush()
        # One process alone, then the processes, in each round, each on a file of its own:
        # the ratio is taken round by round, on the same minutes of a machine whose speed
        # moves, and the round of the median ratio is the one shown.
        rounds: list[tuple[Procs, Procs]] = []
        for i in range(args.proc_rounds):
            alone = run_procs(
                os.path.join(directory, f"alone{i}.db"), 1, args.proc_runs, args.proc_steps
            )
            procs = run_procs(
                os.path.join(directory, f"procs{i}.db"), args.procs, args.proc_runs, args.proc_steps
            )
            rounds.append((alone, procs))
            print(f"  (b) round {i + 1} done", file=sys.stderr, flush=True)
        verdicts += report_procs(rounds)
        sys.stdout.flush()
    return verdicts


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--count-worker"]:
        count_worker(argv[1], int(argv[2]), int(argv[3]))
        return 0
    if argv[:1] == ["--proc-worker"]:
        proc_worker(argv[1], int(argv[2]), int(argv[3]), argv[4], float(argv[5]))
        return 0
    args = parse_args(argv)
    began = time.perf_counter()
    print(
        f"agentrt {agentrt.__version__} concurrency benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M}Z"
    )
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"
    )
    print(f"load average at start: {load_average()}")
    sys.stdout.flush()
    verdicts: list[bool] = []
    if args.only_postgres and not args.postgres:
        print("--only-postgres needs --postgres URL", file=sys.stderr)
        return 2
    if not args.only_postgres:
        verdicts += on_sqlite(args)
    if args.postgres:
        fleets = postgres_fleet(args.postgres, args.pg_procs, args.pg_runs, args.proc_steps)
        verdicts += report_postgres(args.postgres, fleets)
    print()
    print(f"targets: {sum(verdicts)} of {len(verdicts)} met")
    print(f"load average at end: {load_average()} (other processes make every figure noisier)")
    print(f"(took {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
