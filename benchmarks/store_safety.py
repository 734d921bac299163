"""What the store's safety checks cost, and how many times a large argument is stored.

Four measurements, each printed as a small table (best of `--repeats`):

- `schema`: the schema re-check at the start of every write transaction. With
  the schema unchanged it is one `PRAGMA schema_version`; after a change it reads
  all of `sqlite_master`. Both are set against a minimal fsynced write
  transaction (`BEGIN IMMEDIATE`, one UPDATE, `COMMIT`) on a file store.
- `text`: decoding TEXT through the connections' `text_factory` (which reads
  text that is not UTF-8 as bytes instead of raising) against Python's built-in
  decoding, for a page of 100 runs (`list_runs`), one run (`get_run`) and a page
  of 1,000 events (`list_events`), on a database of 2,000 runs, one of them with
  2,000 steps (fewer when `--runs` or `--steps` says fewer).
- `integrity`: `PRAGMA quick_check` and `PRAGMA integrity_check` against the
  chain verification, on a database built like `benchmarks/cli_scale.py`'s
  (`--runs` runs, one of them with `--steps` steps).
- `large`: one argument of `--mb` MB, through real Driver runs, each in a new
  database: a read-only tool the policy allows (with a small result, and with a
  result that echoes the argument), and a tool that waits for an approval,
  approved and resumed. For each: the bytes of the large columns by table and
  column, how much the file grew (checkpointed) as a multiple of the argument,
  and how much of that growth is free pages (left by updates that rewrite a
  whole row).

    python benchmarks/store_safety.py [--part schema|text|integrity|large] [--repeats 5]
        [--runs 100000] [--steps 10000] [--mb 10] [--dir DIR]

It reaches into the store's connection on purpose (to swap the text factory or
time one pragma): it is a measuring tool, not an example.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import agentrt
from agentrt import Decision, SideEffect, ToolCall, ToolResult, ToolSpec
from agentrt._store import Store, open_existing, open_store
from agentrt._store.sqlite._connection import check_schema
from agentrt._stored_text import decode_text
from agentrt.scripted import ScriptedAgent

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_scale  # the scale database builder next to this file


def best(fn: Callable[[], Any], repeats: int, loops: int = 1) -> float:
    """The best wall time of `loops` calls of `fn`, over `repeats` tries, per call (seconds)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops)
    return min(times)


@contextmanager
def workdir(base: str | None) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="agentrt-safety-", dir=base)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def _conn(store: Store) -> sqlite3.Connection:
    conn: sqlite3.Connection = store._conn  # measuring the store's own connection
    return conn


def part_schema(directory: str, repeats: int) -> None:
    store = open_store(os.path.join(directory, "schema.db"))
    try:
        with store.transaction() as tx:
            tx.execute("INSERT INTO runs (id, goal, status) VALUES ('r', 'g', 'RUNNING')")
        conn = _conn(store)
        known = check_schema(conn)
        unchanged = best(lambda: check_schema(conn, known), repeats, 2000)
        changed = best(lambda: check_schema(conn, None), repeats, 200)

        def write() -> None:  # a real change each time, so every commit is fsynced
            with store.transaction() as tx:
                tx.execute("UPDATE runs SET step_count = step_count + 1 WHERE id = 'r'")

        transaction = best(write, repeats, 50)
    finally:
        store.close()
    print("schema re-check per write transaction (file store, synchronous=FULL)")
    print(f"  unchanged schema (one PRAGMA schema_version)   {unchanged * 1e6:9.1f} us")
    print(f"  changed schema (all of sqlite_master read)      {changed * 1e6:9.1f} us")
    print(f"  a minimal write transaction, check included     {transaction * 1e6:9.1f} us")
    print(f"  share of that transaction (unchanged)           {unchanged / transaction:9.2%}")


def part_text(directory: str, repeats: int, runs: int = 2_000, steps: int = 2_000) -> None:
    path = os.path.join(directory, "text.db")
    cli_scale.build(path, runs=min(runs, 2_000), steps=min(steps, 2_000))
    store = open_existing(path, read_only=True)
    try:
        conn = _conn(store)
        big = store.list_runs(1, 0)[0].id
        reads: list[tuple[str, Callable[[], Any]]] = [
            ("list_runs(100)", lambda: store.list_runs(100)),
            ("get_run (one run)", lambda: store.get_run(big)),
            ("list_events(1000)", lambda: store.list_events(None, 0, 1000)),
        ]
        print("decoding TEXT: the strict text_factory against Python's built-in decoding")
        print(f"  {'read':<22}{'built-in':>12}{'agentrt':>12}{'added':>10}")
        for name, read in reads:
            # Interleaved, best of each: the machine's noise hits both alike.
            builtin = ours = float("inf")
            for _ in range(repeats):
                conn.text_factory = str
                builtin = min(builtin, best(read, 1, 20))
                conn.text_factory = decode_text
                ours = min(ours, best(read, 1, 20))
            print(
                f"  {name:<22}{builtin * 1e6:10.0f}us{ours * 1e6:10.0f}us"
                f"{(ours - builtin) / builtin:10.0%}"
            )
    finally:
        store.close()
    per_value = _per_value_cost(repeats)
    per_step = _values_per_driver_step(directory)
    print(f"  added per TEXT value (100,000 short values)  {per_value * 1e9:8.0f} ns")
    print(f"  TEXT values a driver step reads              {per_step:8.1f}")
    print(f"  added per driver step                        {per_value * per_step * 1e6:8.1f} us")


def _per_value_cost(repeats: int) -> float:
    """Seconds the strict factory adds to one short TEXT value, against the built-in decoding."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE t (a TEXT, b TEXT, c TEXT, d TEXT, e TEXT)")
        conn.executemany(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?)",
            [tuple(f"value {i} {k} of some text" for k in range(5)) for i in range(20_000)],
        )
        builtin = ours = float("inf")
        for _ in range(repeats):
            conn.text_factory = str
            builtin = min(builtin, best(lambda: conn.execute("SELECT * FROM t").fetchall(), 1))
            conn.text_factory = decode_text
            ours = min(ours, best(lambda: conn.execute("SELECT * FROM t").fetchall(), 1))
        return (ours - builtin) / 100_000
    finally:
        conn.close()


def _values_per_driver_step(directory: str) -> float:
    """How many TEXT values the Driver reads per step (the `driver.py` benchmark's run)."""
    import driver as driver_bench  # the benchmark next to this file

    from agentrt._store.sqlite import _connection as store_module

    counted = 0

    def counting(data: bytes) -> str | bytes:
        nonlocal counted
        counted += 1
        return decode_text(data)

    tool = driver_bench.make_tool("x" * 100)
    # Every connection the store opens reads this name from the module.
    store_module.decode_text = counting  # type: ignore[attr-defined]
    try:
        store = open_store(os.path.join(directory, "steps.db"))
        try:
            driver_bench.run_once(store, tool, 10)  # warm-up
            counted = 0
            driver_bench.run_once(store, tool, 100)
        finally:
            store.close()
    finally:
        store_module.decode_text = decode_text  # type: ignore[attr-defined]
    return counted / 101


def part_integrity(directory: str, repeats: int, runs: int, steps: int) -> None:
    path = os.path.join(directory, "scale.db")
    cli_scale.build(path, runs=runs, steps=steps)
    store = open_existing(path, read_only=True)
    try:
        events = store.chain_head()[0]
        pages = _conn(store).execute("PRAGMA page_count").fetchone()[0]
        quick = best(lambda: store.check_file(full=False), repeats)
        full = best(lambda: store.check_file(full=True), repeats)
        chain = best(store.verify_events, repeats)
        assert store.check_file(full=True).ok and store.verify_events().intact
    finally:
        store.close()
    size = os.path.getsize(path) / 1e6
    print(f"checking the file: {runs:,} runs, {events:,} events, {pages:,} pages ({size:.0f} MB)")
    print(f"  PRAGMA quick_check                              {quick * 1e3:9.1f} ms")
    print(f"  PRAGMA integrity_check                          {full * 1e3:9.1f} ms")
    print(f"  verify_events (the chain, for comparison)       {chain * 1e3:9.1f} ms")


class BigArgTool:
    """A tool taking one string argument, returning a small result."""

    def __init__(self, name: str, side_effect: SideEffect, *, echo: bool = False) -> None:
        self.echo = echo
        self.spec = ToolSpec(
            name=name,
            description=f"the {name} tool",
            input_schema={"type": "object", "properties": {"body": {"type": "string"}}},
            side_effect=side_effect,
            timeout=timedelta(seconds=60),
        )

    def call(self, call: ToolCall) -> ToolResult:
        if self.echo:  # a result that carries the argument back (a write that returns it)
            return ToolResult(content={"body": call.args["body"]})
        return ToolResult(content={"received": len(call.args["body"])})


def _checkpointed_size(path: str) -> tuple[int, int]:
    """The file's size after a checkpoint, and the bytes of its free pages."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return os.path.getsize(path), int(free) * int(page)


def _large_columns(path: str, run_id: str, threshold: int) -> list[tuple[str, int]]:
    """`table.column[ (event type)]` and length, for every value of the run over `threshold`."""
    conn = sqlite3.connect(path)
    found: list[tuple[str, int]] = []
    try:
        for table, key in (("steps", "run_id"), ("events", "run_id"), ("approvals", "run_id")):
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[2] == "TEXT"]
            for column in columns:
                label = "type" if table == "events" else "''"
                for what, length in conn.execute(
                    f"SELECT {label}, length({column}) FROM {table} "
                    f"WHERE {key} = ? AND length({column}) > ? ORDER BY rowid",
                    (run_id, threshold),
                ):
                    name = f"{table}.{column}" + (f" ({what})" if what else "")
                    found.append((name, int(length)))
        # Each large part stored once (migration 4, decision 0084), referred to from the rows.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'stored_values'").fetchone():
            for (length,) in conn.execute(
                "SELECT length(body) FROM stored_values WHERE length(body) > ? ORDER BY rowid",
                (threshold,),
            ):
                found.append(("stored_values.body", int(length)))
    finally:
        conn.close()
    return found


def part_large(directory: str, megabytes: int) -> None:
    size = megabytes * 1_000_000
    body = "x" * size
    for n, (label, side_effect, echo) in enumerate(
        (
            ("read-only tool, allowed", SideEffect.READ_ONLY, False),
            ("read-only tool, allowed, result echoes it", SideEffect.READ_ONLY, True),
            ("approved tool (paused, approved, resumed)", SideEffect.REMOTE_MUTATION, False),
        )
    ):
        # A database of its own for each, so no run reuses the pages another freed (or,
        # since decision 0084, the value another stored).
        path = os.path.join(directory, f"large-{n}.db")
        open_store(path).close()
        before, free_before = _checkpointed_size(path)
        name = "read" if side_effect == SideEffect.READ_ONLY else "send"
        tool = BigArgTool(name, side_effect, echo=echo)
        driver = agentrt.Driver(
            store=open_store(path),
            agent=ScriptedAgent(
                [Decision.tool_call(tool.spec.name, {"body": body}), Decision.complete({})]
            ),
            policy=agentrt.default_policy(),
            tools=[tool],
        )
        try:
            run = driver.start_sync("carry a large argument")
            if run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
                (approval,) = driver.store.pending_approvals(run.id, cap=64)
                agentrt.approve(driver.store, run.id, approval.id, "benchmark")
                run = driver.resume_sync(run.id)
            assert run.status == agentrt.RunStatus.COMPLETED, run
        finally:
            driver.store.close()
        after, free_after = _checkpointed_size(path)
        grown, freed = after - before, free_after - free_before
        columns = _large_columns(path, run.id, size // 2)
        stored = sum(length for _, length in columns)
        print(f"a {megabytes} MB argument, {label}")
        for name, length in columns:
            print(f"  {name:<52}{length / 1e6:8.1f} MB")
        print(f"  {'large values stored':<52}{stored / 1e6:8.1f} MB = {stored / size:.1f}x")
        print(f"  {'file growth (checkpointed)':<52}{grown / 1e6:8.1f} MB = {grown / size:.1f}x")
        print(f"  {'of which free pages (rows rewritten by updates)':<52}{freed / 1e6:8.1f} MB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--part", choices=("schema", "text", "integrity", "large"), action="append")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--dir", default=None, help="where to put the databases (removed after)")
    args = parser.parse_args(argv)
    parts = args.part or ["schema", "text", "integrity", "large"]
    with workdir(args.dir) as directory:
        for i, part in enumerate(parts):
            if i:
                print()
            if part == "schema":
                part_schema(directory, args.repeats)
            elif part == "text":
                part_text(directory, args.repeats, args.runs, args.steps)
            elif part == "integrity":
                part_integrity(directory, args.repeats, args.runs, args.steps)
            else:
                part_large(directory, args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
