"""Microseconds per step of the Driver, beside this machine's cost of two fsynced commits.

An allowed step commits two fsynced SQLite transactions (the step's claim and
decision with the tool's start, then the tool's outcome: decision 0088), and
the seed's durability needs both (the intent durable before the tool, the
outcome durable before anything depends on it), so two plain commits are the
floor no runtime can go under on this disk. This script measures, in one process and interleaved
so that both see the same machine:

- the Driver on a file-backed store (`agentrt.open_store` in a temp dir: WAL,
  synchronous=FULL) with a scripted agent, `default_policy()` and one read-only
  plain-function tool, for runs of 10, 100 and 400 tool steps whose observations
  are small (`{"page": i, "text": ""}`) or 8 KiB (8192 characters of text), each
  different so that loop detection never fires; the last decision is `complete`;
- the floor: plain `sqlite3` in the same directory, WAL + synchronous=FULL,
  `BEGIN IMMEDIATE`, one small INSERT, `COMMIT`, times two;
- the schema's own SQL (`SchemaReplay`): the statements of a step's two
  transactions with the texts a real run wrote, and nothing else, on a store
  file of its own: what the file format and the two transactions cost this
  disk before the runtime does anything.

The runs share one store, warmed up first, as an application's store would be:
its WAL file has reached its checkpoint size and is reused, so a commit does
not also grow the file. The floor is measured the same way; the floor on a new
file (every commit growing the WAL, which costs ext4 a journal commit) is
printed beside it. `--fresh` gives each run a new store file instead, and then
compares with that second floor.

Each figure is the median of several rounds, each round running every figure
once in a shuffled order. "Per step" is the wall time of the whole
`start_sync` (creating the run and completing it included) over the number of
tool steps; "in-loop" is the time from the agent being asked for the first step
to it being asked for the completing step, over the same number: the steady
cost of a step, without the fixed costs of starting (a new event loop, the
heartbeat thread, the creating transaction) and finishing a run. "CPU" is the
process's CPU time (all its threads, the kernel's share of the fsyncs
included) over the same number: less disturbed by other processes than wall
time, it shows what the runtime itself spends.

Both entry points are measured (`--entry` narrows it to one): `start_sync`,
whose transactions run inline on the Driver's own loop, and `await start()` in
`asyncio.run`, whose transactions go to the group committer's thread. Each
figure's two runs, one per entry, go one after the other in a random order, so
that the async entry's cost over the sync one is taken pair by pair: the
median over the rounds of each pair's ratio, which a machine whose speed moves
between minutes disturbs far less than two separate medians would.

Targets (issue 20): 400 steps within 1.2x of 10 steps per step, and the
in-loop cost per step no more than 2.0x the two-commit floor, for `start_sync`
and `await start()`; the async entry's in-loop cost within 1.15x of the sync
one. (Issue 2's target was 1.5x a four-commit floor, when a step made four
commits.)

    python benchmarks/driver.py [--quick] [--repeats N] [--dir PATH] [--fresh] [--check]
                                [--entry both|sync|async] [--steps 10,100,400]
                                [--commits N] [--warm N]

`--steps`, `--commits` (of each floor measurement, and a replay's steps) and
`--warm` (steps of each entry's warm-up run) only size the work: every figure and
verdict is printed whatever they are, so the tests run the smallest sizes
(tests/test_benchmarks.py), whose figures mean nothing.

Needs only the package (`pip install -e .`). About 60 s; `--quick` about 12 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import agentrt
from agentrt.scripted import ScriptedAgent, ScriptEntry

STEP_COUNTS = (10, 100, 400)
SIZES = {"small": 0, "8 KiB": 8192}
FLAT_TARGET = 1.2
FLOOR_TARGET = 2.0
ASYNC_TARGET = 1.15
ENTRIES = {"sync": "start_sync", "async": "await start"}
COMMITS_PER_STEP = 2
"""Fsynced commits an allowed tool step makes (decision 0088)."""


@dataclass
class Sample:
    """One run, and the two-commit floor measured just before and just after it."""

    wall: float  # seconds of the whole `start_sync`
    loop: float  # seconds between the in-loop marks
    cpu: float  # CPU seconds of the process during `start_sync`
    floor_us: float  # microseconds of two commits, mean of the two beside the run
    growth: float  # median step time of the run's last quarter over its first quarter
    schema_us: float = 0.0  # microseconds per step of the schema's own SQL, right after the run


@dataclass
class Series:
    steps: int
    size: str
    entry: str = "sync"
    samples: list[Sample] = field(default_factory=list)

    def _median(self, values: list[float]) -> float:
        return statistics.median(values) / self.steps * 1e6

    def per_step_us(self) -> float:
        return self._median([s.wall for s in self.samples])

    def loop_us(self) -> float:
        return self._median([s.loop for s in self.samples])

    def cpu_us(self) -> float:
        return self._median([s.cpu for s in self.samples])

    def per_step_ratio(self) -> float:
        """Median over the runs of (per-step cost / the floor measured beside that run)."""
        return self._median([s.wall / s.floor_us for s in self.samples])

    def loop_ratio(self) -> float:
        return self._median([s.loop / s.floor_us for s in self.samples])

    def schema_us(self) -> float:
        return statistics.median(s.schema_us for s in self.samples)

    def schema_ratio(self) -> float:
        """Median over the runs of (the schema's own SQL per step / the floor beside it)."""
        return statistics.median(s.schema_us / s.floor_us for s in self.samples)

    def loop_over_schema(self) -> float:
        """Median over the runs of (in-loop cost per step / the schema's own SQL per step)."""
        return self._median([s.loop / s.schema_us for s in self.samples])

    def growth(self) -> float:
        return statistics.median(s.growth for s in self.samples)


def remove_database(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


# --- the floor ----------------------------------------------------------------------------------


class Floor:
    """Plain sqlite3 commits in the benchmark's directory: WAL, synchronous=FULL.

    `measure` times `commits` transactions of `BEGIN IMMEDIATE`, one small INSERT,
    `COMMIT`, on a database whose WAL file has already grown and been
    checkpointed, so that each commit overwrites WAL space the file already has:
    the regime a store in use is in (its WAL is reused after every checkpoint).
    `measure(fresh=True)` does the same on a new file, whose every commit also grows
    the WAL and so costs the file system more.
    """

    def __init__(self, directory: str, grow: int = 500) -> None:
        self.directory = directory
        self.conn = self._open(os.path.join(directory, "floor.db"))
        self._commits(self.conn, grow)  # grow the WAL past what a measurement writes

    @staticmethod
    def _open(path: str) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        return conn

    @staticmethod
    def _commits(conn: sqlite3.Connection, commits: int) -> float:
        start = time.perf_counter()
        for i in range(commits):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (f"commit {i}",))
            conn.execute("COMMIT")
        return time.perf_counter() - start

    def measure(self, commits: int, fresh: bool = False) -> float:
        """Microseconds of a step's fsynced commits: reusing WAL space, or on a new file."""
        if fresh:
            return self._measure_fresh(commits)
        self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return self._commits(self.conn, commits) / commits * COMMITS_PER_STEP * 1e6

    def _measure_fresh(self, commits: int) -> float:
        path = os.path.join(self.directory, f"floor-{time.monotonic_ns()}.db")
        conn = self._open(path)
        try:
            return self._commits(conn, commits) / commits * COMMITS_PER_STEP * 1e6
        finally:
            conn.close()
            remove_database(path)

    def close(self) -> None:
        self.conn.close()


# --- the schema's own SQL ------------------------------------------------------------------------

# The statements of the SQLite store the replay runs as the Driver's transactions do (the
# store's own texts, written out here so that the replay stands on its own).
_PARTITION_HEAD = "SELECT seq, hash FROM chain_head WHERE part = ?"
_MOVE_HEAD = "UPDATE chain_head SET seq = ?, hash = ? WHERE part = ?"
_INSERT_EVENT = (
    "INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_LEASE_COLUMNS = (
    "SELECT status, lease_owner, lease_expires_at, lease_holder, lease_epoch FROM runs WHERE id = ?"
)


class SchemaReplay:
    """The statements of an allowed step's two transactions, with no runtime around them.

    What a step costs the disk and SQLite alone, given the file format `store.md`
    pins (its tables, indexes, the events and the chain's head row) and the two
    transactions of the commit plan (decision 0088): the same statements the Driver runs
    (the run locked, the step's writes, the events in one statement and the head moved
    once a transaction, as `write_events` does), with the
    texts a real run wrote (so the rows and pages have their real sizes), on a
    file-backed store opened by `agentrt.open_store` (same pragmas), warmed up
    the same way. No agent, no policy, no JSON work, no hashing: every event
    gets the same placeholder hash, so this file's chain is deliberately broken.
    The Driver's per-step time over this one is what the runtime adds.
    """

    def __init__(self, directory: str, tool: agentrt.Tool, name: str) -> None:
        path = os.path.join(directory, f"replay-{name}.db")
        self.store = agentrt.open_store(path)
        run_once(self.store, tool, 2)  # a real run (checked complete) supplies a step's texts
        self.step_texts = self.store.query(
            "SELECT decision_json, policy_json, observation_json, observation_hash, spec_hash, "
            "policy_id FROM steps WHERE idx = 0 ORDER BY rowid DESC LIMIT 1"
        )[0]
        self.event_texts = [
            (str(row["type"]), str(row["payload_json"]))
            for row in self.store.query(
                "SELECT type, payload_json FROM events WHERE step_id = "
                "(SELECT id FROM steps WHERE idx = 0 ORDER BY rowid DESC LIMIT 1) ORDER BY seq"
            )
        ]
        self.conn = self.store._open_connection()  # the SQLite backend's own, as the heartbeat's
        self.run_id = "f" * 32
        self.index = 0
        # Random step ids, as the Driver's are: each lands somewhere in the steps'
        # primary-key index, not always on its last page. Seeded, so repeatable.
        self.ids = random.Random(0)
        self.head: tuple[int, str] | None = None
        self.rows: list[tuple[int, str, str, str, str, str, str]] = []
        self.conn.execute(
            "INSERT INTO runs (id, goal, status, limits_json, lease_owner) "
            "VALUES (?, 'replay', 'RUNNING', '{}', 'replay')",
            (self.run_id,),
        )
        self.measure(60)  # grow the WAL to its checkpoint size, as for the runs

    def _event(self, step_id: str, kind: str, payload: str) -> None:
        if self.head is None:  # once per transaction, as the Driver reads it
            seq, digest = self.conn.execute(_PARTITION_HEAD, (0,)).fetchone()
            self.head = (int(seq) + 1, str(digest))
        seq = self.head[0]
        # Written together when the transaction is about to commit, as the Driver's are.
        self.rows.append(
            (seq, self.run_id, step_id, "2026-11-30T09:00:00.000000Z", kind, payload, "0" * 64)
        )
        self.head = (seq + 1, "0" * 64)

    def _tx(self, body: Callable[[], None], run_read: str) -> None:
        self.head, self.rows = None, []
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(run_read, (self.run_id,)).fetchone()
        body()
        self.conn.executemany(_INSERT_EVENT, self.rows)
        assert self.head is not None
        self.conn.execute(_MOVE_HEAD, (self.head[0] - 1, self.head[1], 0))
        self.conn.execute("COMMIT")

    def step(self) -> None:
        conn, run_id, index = self.conn, self.run_id, self.index
        step_id = f"{self.ids.getrandbits(128):032x}"
        decision, policy, observation, observation_hash, spec_hash, policy_id = self.step_texts
        events = dict(self.event_texts)
        at = "2026-11-30T09:00:00.000000Z"

        def started() -> None:
            conn.execute(
                "UPDATE runs SET step_count = step_count + 1 WHERE id = ? AND status = 'RUNNING' "
                "AND step_count = ? AND lease_owner = ? AND lease_epoch = ?",
                (run_id, index, "replay", 0),
            )
            conn.execute(
                "INSERT INTO steps (id, run_id, idx, status, started_at) VALUES (?, ?, ?, ?, ?)",
                (step_id, run_id, index, "deciding", at),
            )
            self._event(step_id, "step.started", events["step.started"])

        def decided() -> None:
            conn.execute(
                "UPDATE steps SET decision_json = ?, reason_key = ? "
                "WHERE id = ? AND status = 'deciding' AND decision_json = ''",
                (decision, "", step_id),
            )
            self._event(step_id, "step.decided", events["step.decided"])

        def tool_started() -> None:
            conn.execute(
                "UPDATE steps SET status = 'executing', policy_json = ?, spec_hash = ?, "
                "policy_id = ? WHERE id = ? AND status IN (?)",
                (policy, spec_hash, policy_id, step_id, "deciding"),
            )
            self._event(step_id, "step.policy", events["step.policy"])
            self._event(step_id, "step.tool_started", events["step.tool_started"])

        def tool_finished() -> None:
            conn.execute(
                "UPDATE steps SET status = ?, observation_json = ?, observation_hash = ?, "
                "finished_at = ? WHERE id = ? AND status = 'executing'",
                ("done", observation, observation_hash, at, step_id),
            )
            self._event(step_id, "step.tool_finished", events["step.tool_finished"])
            conn.execute(
                "UPDATE runs SET active_ms = active_ms + ? "
                "WHERE id = ? AND status = 'RUNNING' AND lease_owner = ? AND lease_epoch = ?",
                (1, run_id, "replay", 0),
            )

        def intent() -> None:
            started()
            decided()
            tool_started()

        # The first commit locks the run whole; the outcome's, its lease's five columns.
        self._tx(intent, "SELECT * FROM runs WHERE id = ?")
        self._tx(tool_finished, _LEASE_COLUMNS)
        self.index += 1

    def measure(self, steps: int) -> float:
        """Microseconds per replayed step."""
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        return (time.perf_counter() - start) / steps * 1e6

    def close(self) -> None:
        self.conn.close()
        self.store.close()


# --- the driver ---------------------------------------------------------------------------------


def page_text(pad: str, page: int) -> str:
    """`pad` with the page number at its head: the same length, a different text each
    step (a store that keeps each value once must still store every step's)."""
    return (f"{page:08d}" + pad[8:])[: len(pad)] if pad else pad


def make_tool(pad: str) -> agentrt.Tool:
    calls = itertools.count()  # each call's text differs, across runs of one tool too

    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def read_page(page: int) -> agentrt.ToolResult:
        """Read one page (a different observation every step)."""
        return agentrt.ToolResult(
            {"page": page, "text": page_text(pad, next(calls))}, summary=f"page {page}"
        )

    return read_page


def run_once(
    store: agentrt.Store, tool: agentrt.Tool, steps: int, *, entry: str = "sync"
) -> Sample:
    """One run of `steps` tool steps and a completing step.

    `entry` "sync" drives it with `start_sync` (the store calls inline on the
    Driver's own loop); "async" with `asyncio.run(driver.start(...))`, as an
    application's event loop would: each transaction then hops to an I/O thread.
    """
    marks: list[float] = []

    def marked(decision: agentrt.Decision) -> ScriptEntry:
        # The agent is asked right after each step's `step.started` commit: the
        # time between the first and the completing step's question covers
        # exactly `steps` whole steps, without an observer to pay for.
        def entry(_: agentrt.StepInput) -> agentrt.Decision:
            marks.append(time.perf_counter())
            return decision

        return entry

    decisions = [marked(agentrt.Decision.tool_call("read_page", {"page": i})) for i in range(steps)]
    decisions.append(marked(agentrt.Decision.complete({"pages": steps})))
    driver = agentrt.Driver(
        store=store, agent=ScriptedAgent(decisions), policy=agentrt.default_policy(), tools=[tool]
    )
    limits = agentrt.Limits(max_steps=steps + 1, loop_threshold=steps + 1)
    cpu_start, start = time.process_time(), time.perf_counter()
    goal = f"read {steps} pages"
    if entry == "sync":
        run = driver.start_sync(goal, limits=limits)
    else:
        run = asyncio.run(driver.start(goal, limits=limits))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if run.status != agentrt.RunStatus.COMPLETED or run.step_count != steps + 1:
        raise SystemExit(
            f"benchmark run did not complete as scripted: {run.status} {run.reason} "
            f"{run.reason_detail!r} after {run.step_count} steps"
        )
    if len(marks) != steps + 1:
        raise SystemExit(f"expected the agent to be asked {steps + 1} times, not {len(marks)}")
    # Growth within the run: the median step of its last quarter over that of its first.
    durations = [b - a for a, b in itertools.pairwise(marks)]
    quarter = max(1, steps // 4)
    growth = statistics.median(durations[-quarter:]) / statistics.median(durations[:quarter])
    return Sample(wall, marks[-1] - marks[0], cpu, floor_us=0.0, growth=growth)


class Stores:
    """The file-backed store the runs use: one, kept warm, or a new file per run (`--fresh`)."""

    def __init__(self, directory: str, fresh: bool) -> None:
        self.directory = directory
        self.fresh = fresh
        self.shared = None if fresh else agentrt.open_store(os.path.join(directory, "runs.db"))

    def run(self, tool: agentrt.Tool, steps: int, entry: str = "sync") -> Sample:
        if self.shared is not None:
            return run_once(self.shared, tool, steps, entry=entry)
        path = os.path.join(self.directory, f"run-{time.monotonic_ns()}.db")
        store = agentrt.open_store(path)
        try:
            return run_once(store, tool, steps, entry=entry)
        finally:
            store.close()
            remove_database(path)

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()


def store_settings(directory: str) -> str:
    """The journal mode and synchronous level of a store as agentrt opens it (a sanity check)."""
    path = os.path.join(directory, "settings.db")
    store = agentrt.open_store(path)
    try:
        conn = getattr(store, "_conn", None)
        if not isinstance(conn, sqlite3.Connection):
            return "unknown (the store's connection is not reachable)"
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        store.close()
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return f"journal_mode={journal}, synchronous={names.get(level, level)}"


def filesystem_of(directory: str) -> str:
    """The mount type holding `directory` (best effort, Linux only)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            entries = [line.split() for line in mounts]
    except OSError:
        return "unknown"
    real = os.path.realpath(directory)
    best = ("", "unknown")
    for entry in entries:
        if len(entry) >= 3:
            mount_point = entry[1]
            inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) > len(best[0]):
                best = (mount_point, entry[2])
    return f"{best[1]} at {best[0]}" if best[0] else "unknown"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


# --- reporting ----------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def spread(values: Sequence[float]) -> str:
    return f"median of {len(values)}, range {min(values):.0f}..{max(values):.0f}"


def report(
    series: Sequence[Series],
    warm: Sequence[float],
    fresh: Sequence[float],
    *,
    fresh_runs: bool,
    step_counts: Sequence[int] = STEP_COUNTS,
) -> bool:
    """Print the table and the verdicts; True when every target is met."""
    print()
    for label, values in (("WAL space reused", warm), ("WAL growing     ", fresh)):
        median = statistics.median(values)
        print(f"two fsynced commits, {label}: {median:6.0f} us ({spread(values)})")
    which = "growing" if fresh_runs else "reused"
    print(f"x floor: each run over the floor (WAL {which}, like the runs' store)")
    print("         measured just before and after it; median over the runs")
    print()
    header = (
        f"{'steps':>5}  {'observation':<11}  {'entry':<5}  {'us/step':>8}  {'x floor':>7}  "
        f"{'in-loop us/step':>15}  {'x floor':>7}  {'CPU us/step':>11}  {'runs':>4}  "
        f"{'schema us/step':>14}  {'x floor':>7}  {'in-loop x schema':>16}"
    )
    print(header)
    print("-" * len(header))
    for s in series:
        print(
            f"{s.steps:>5}  {s.size:<11}  {s.entry:<5}  {s.per_step_us():>8.0f}  "
            f"{s.per_step_ratio():>6.2f}x  "
            f"{s.loop_us():>15.0f}  {s.loop_ratio():>6.2f}x  {s.cpu_us():>11.0f}  "
            f"{len(s.samples):>4}  {s.schema_us():>14.0f}  {s.schema_ratio():>6.2f}x  "
            f"{s.loop_over_schema():>15.2f}x"
        )
    print()
    print("schema: the same statements as a step's two transactions, with the texts a real")
    print("        run wrote, and nothing else (SchemaReplay): what the file format and the")
    print("        two transactions cost this disk before the runtime does anything")
    print()
    ok = True
    entries = list(dict.fromkeys(s.entry for s in series))
    by_key = {(s.steps, s.size, s.entry): s for s in series}
    shortest, longest = min(step_counts), max(step_counts)
    for entry in entries:
        for size in SIZES:
            short = by_key.get((shortest, size, entry))
            long = by_key.get((longest, size, entry))
            if short is None or long is None:
                continue
            flat = long.per_step_us() / short.per_step_us()
            flat_loop = long.loop_us() / short.loop_us()
            met = flat <= FLAT_TARGET and flat_loop <= FLAT_TARGET
            ok = ok and met
            print(
                f"flat, {size:<6} ({ENTRIES[entry]}): per step, {longest} steps / {shortest} "
                f"steps = {flat:.2f}x (in-loop {flat_loop:.2f}x); target <= {FLAT_TARGET}x: "
                f"{verdict(met)}"
            )
            print(
                f"              within the {longest}-step runs: median step of the last quarter "
                f"/ of the first quarter = {long.growth():.2f}x"
            )
    if len(series[0].samples) < 5:
        print("(fewer than 5 repetitions: the verdicts are only indicative)")
    for entry in entries:
        mine = [s for s in series if s.entry == entry]
        worst = max(s.per_step_ratio() for s in mine)
        worst_loop = max(s.loop_ratio() for s in mine)
        met = worst_loop <= FLOOR_TARGET
        ok = ok and met
        print(
            f"vs floor ({ENTRIES[entry]}): worst in-loop per step = {worst_loop:.2f}x the "
            f"two-commit floor (whole run {worst:.2f}x); target <= {FLOOR_TARGET}x: {verdict(met)}"
        )
    schema = max(s.schema_ratio() for s in series)
    over = max(s.loop_over_schema() for s in series)
    print(
        f"               the schema's own SQL alone = {schema:.2f}x the floor (worst); "
        f"the runtime on top: in-loop {over:.2f}x the schema's SQL (worst)"
    )
    if len(entries) == 2:
        ratios = {
            (n, size): async_over_sync(by_key[n, size, "sync"], by_key[n, size, "async"])
            for n in step_counts
            for size in SIZES
            if (n, size, "sync") in by_key and (n, size, "async") in by_key
        }
        (n, size), worst = max(ratios.items(), key=lambda kv: kv[1])
        met = worst <= ASYNC_TARGET
        ok = ok and met
        every = ", ".join(f"{r:.2f}x" for r in ratios.values())
        print(
            f"async / sync : in-loop per step, each pair's ratio, median over the rounds: "
            f"{every}; worst {worst:.2f}x ({n} steps, {size}); target <= {ASYNC_TARGET}x: "
            f"{verdict(met)}"
        )
    return ok


def async_over_sync(sync: Series, async_: Series) -> float:
    """The median over the rounds of the async run's in-loop time over its paired sync run's."""
    return statistics.median(
        a.loop / s.loop for s, a in zip(sync.samples, async_.samples, strict=True)
    )


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 repetitions (about 6 s)")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions (default 11)")
    parser.add_argument(
        "--dir", default=None, help="where to put the databases (default: a new temp dir)"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="a new store file per run (its WAL grows throughout)"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a target is missed (noisy machines!)"
    )
    parser.add_argument(
        "--entry",
        choices=("both", "sync", "async"),
        default="both",
        help="drive the runs with start_sync, with await start() in asyncio.run, or both, "
        "paired (the default)",
    )
    parser.add_argument(
        "--steps",
        default=",".join(map(str, STEP_COUNTS)),
        help="tool steps per run, comma-separated, at least two counts (default 10,100,400)",
    )
    parser.add_argument(
        "--commits",
        type=int,
        default=None,
        help="commits a floor measurement, steps a replay (default 50, --quick 30)",
    )
    parser.add_argument(
        "--warm", type=int, default=60, help="steps of each entry's warm-up run (default 60)"
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 11
    if args.commits is None:
        args.commits = 30 if args.quick else 50
    try:
        args.steps = tuple(sorted({int(n) for n in args.steps.split(",")}))
    except ValueError:
        parser.error("--steps takes numbers separated by commas")
    if args.repeats < 1 or args.commits < 1 or args.warm < 1:
        parser.error("--repeats, --commits and --warm must be at least 1")
    if len(args.steps) < 2 or args.steps[0] < 1:
        parser.error("--steps takes at least two different counts, each at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    floor_commits = args.commits
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-", dir=args.dir) as directory:
        now = datetime.now(UTC)
        print(f"agentrt {agentrt.__version__} driver benchmark, {now:%Y-%m-%d %H:%M}Z")
        print(
            f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
            f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"
        )
        fs = filesystem_of(directory)
        print(f"databases in {directory} ({fs}); store: {store_settings(directory)}")
        if fs.startswith("tmpfs") or fs.startswith("ramfs"):
            print("WARNING: a memory filesystem makes fsync free; pass --dir on a real disk")
        print(f"load average at start: {load_average()}")
        kind = "a new store file per run" if args.fresh else "one store, warmed up, for all runs"
        entries = list(ENTRIES) if args.entry == "both" else [args.entry]
        kind += "; runs driven by " + " and ".join(ENTRIES[e] for e in entries)
        print(f"{args.repeats} repetitions, medians; tool steps per run: {args.steps}; {kind}")
        sys.stdout.flush()

        tools = {size: make_tool("x" * length) for size, length in SIZES.items()}
        # grow the WAL past what a measurement writes: 500 commits, or 10 of them if fewer
        floor = Floor(directory, grow=500 if floor_commits >= 50 else 10 * floor_commits)
        stores = Stores(directory, args.fresh)
        replays = {
            size: SchemaReplay(directory, tool, str(i))
            for i, (size, tool) in enumerate(tools.items())
        }
        try:
            # Warm up imports, the thread pools and the disk; grow the shared store's
            # WAL to its checkpoint size, as in a store that has been in use.
            for entry in entries:
                stores.run(tools["small"], args.warm, entry)
            floor.measure(10, fresh=True)

            figures = [(n, size) for n in args.steps for size in SIZES]
            series = {
                (n, size, entry): Series(n, size, entry) for n, size in figures for entry in entries
            }
            warm: list[float] = []
            fresh: list[float] = []
            paired, other = (fresh, warm) if args.fresh else (warm, fresh)
            for round_ in range(args.repeats):
                # Every figure once per round, in a different order each round, each
                # run between two measurements of the floor: a noisy neighbour or a
                # slow minute of the disk then weighs on both sides of each ratio.
                # A figure's runs through each entry go one after the other, in a
                # random order, so that their ratio is taken on the same minute.
                other.append(floor.measure(floor_commits, fresh=not args.fresh))
                shuffle = random.Random(round_)
                for n, size in shuffle.sample(figures, len(figures)):
                    for entry in shuffle.sample(entries, len(entries)):
                        s = series[n, size, entry]
                        before = floor.measure(floor_commits, fresh=args.fresh)
                        sample = stores.run(tools[s.size], s.steps, entry)
                        after = floor.measure(floor_commits, fresh=args.fresh)
                        paired.extend((before, after))
                        sample.floor_us = (before + after) / 2
                        sample.schema_us = replays[s.size].measure(floor_commits)
                        s.samples.append(sample)
                print(f"  round {round_ + 1}/{args.repeats} done", file=sys.stderr, flush=True)
        finally:
            stores.close()
            floor.close()
            for replay in replays.values():
                replay.close()
        ok = report(
            list(series.values()), warm, fresh, fresh_runs=args.fresh, step_counts=args.steps
        )
    print(f"\nload average at end: {load_average()} (other processes make every figure noisier)")
    print(f"(took {time.perf_counter() - began:.0f} s)")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
