"""The client's CPU per allowed tool step on PostgreSQL (and, with `--sqlite`, on a SQLite file).

One process opens a store in a schema of its own on the server, warms it with a
`--warm`-step run, then makes `--rounds` runs of `benchmarks/driver.py`'s loop
(`run_once`: `start_sync`, `default_policy()`, the read-only plain-function tool,
small observations) of `--steps` tool steps each, and prints the process's CPU
time (`time.process_time`: all threads, user and kernel) and wall time per step
of each run; the schema is dropped at the end.

Instructions per step (they do not depend on the machine's load): run it under
`valgrind --tool=callgrind` once with `--steps 20` and once with `--steps 220`
(`--rounds 1`, `PYTHONHASHSEED=0`); the difference of the two totals over 200 is one
step's instructions in this process (libpq, psycopg and the runtime; the server's
work is another process's and is not counted, nor is the kernel's).

`--profile FILE` writes a cProfile (CPU clock: `time.thread_time`) of the measured
runs, for `python -m pstats FILE`.

`--trips` (PostgreSQL) then counts what a step sends on the store's connection: two more
runs, of 10 and 20 steps, with each cursor's `execute` and each pipeline counted (a
pipeline one round trip, whatever it sends; the steady step is the difference over 10,
as `tests/test_postgres_round_trips.py` counts it), and prints the round trips and the
statements a step, each statement's text with its count (decision 0108).

    python benchmarks/pg_step_cpu.py [URL] [--steps N] [--warm N] [--rounds N]
                                      [--sqlite] [--profile FILE] [--trips]

The URL defaults to `AGENTRT_TEST_POSTGRES_URL`, else postgresql://root@127.0.0.1:5432/test.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import driver as bench

import agentrt


@contextlib.contextmanager
def postgres_store(url: str) -> Iterator[agentrt.Store]:
    from agentrt._store.postgres import drop_schema

    parts = urlsplit(url)
    schema = f"pgcpu_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), ("schema", schema)])
    store_url = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    store = agentrt.open_store(store_url)
    try:
        yield store
    finally:
        store.close()
        drop_schema(store_url)


@contextlib.contextmanager
def sqlite_store() -> Iterator[agentrt.Store]:
    with tempfile.TemporaryDirectory() as directory:
        store = agentrt.open_store(os.path.join(directory, "agentrt.db"))
        try:
            yield store
        finally:
            store.close()


def count_trips(store: agentrt.Store, tool: object) -> str:
    """Round trips and statements of a steady step on `store`'s connection (`--trips`)."""
    import collections

    import psycopg

    conn = store._pg  # type: ignore[attr-defined]
    execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline
    trips: collections.Counter[str] = collections.Counter()
    statements: collections.Counter[str] = collections.Counter()
    depth = [0]

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if self.connection is conn:
            text = " ".join(str(query).split())[:72]
            statements[text] += 1
            if not depth[0]:
                trips[text] += 1
        return execute(self, query, *args, **kwargs)

    @contextlib.contextmanager
    def counted_pipeline(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        if self is conn:
            trips["(a pipeline)"] += 1
            depth[0] += 1
        try:
            with pipeline(self, *args, **kwargs) as p:
                yield p
        finally:
            if self is conn:
                depth[0] -= 1

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign,assignment]
    try:
        counts = []
        for steps in (10, 20):
            trips.clear()
            statements.clear()
            bench.run_once(store, tool, steps)
            counts.append((collections.Counter(trips), collections.Counter(statements)))
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]
    (trips_10, sent_10), (trips_20, sent_20) = counts
    per_step = {k: (sent_20[k] - sent_10[k]) / 10 for k in sent_20}
    lines = [
        f"round trips a step {(sum(trips_20.values()) - sum(trips_10.values())) / 10:.2f} "
        f"({(trips_20['(a pipeline)'] - trips_10['(a pipeline)']) / 10:.2f} of them pipelines); "
        f"statements a step {(sum(sent_20.values()) - sum(sent_10.values())) / 10:.2f}:"
    ]
    for text, n in sorted(per_step.items(), key=lambda item: -item[1]):
        if n:
            lines.append(f"  {n:5.2f} {text}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = os.environ.get("AGENTRT_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
    parser.add_argument("url", nargs="?", default=default)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file instead")
    parser.add_argument("--profile", default=None, metavar="FILE")
    parser.add_argument("--trips", action="store_true", help="count round trips and statements")
    args = parser.parse_args(argv)

    opened = sqlite_store() if args.sqlite else postgres_store(args.url)
    tool = bench.make_tool("")
    cpu: list[float] = []
    wall: list[float] = []
    with opened as store:
        bench.run_once(store, tool, args.warm)
        profile = cProfile.Profile(time.thread_time) if args.profile else None
        for _ in range(args.rounds):
            if profile is not None:
                profile.enable()
            sample = bench.run_once(store, tool, args.steps)
            if profile is not None:
                profile.disable()
            cpu.append(sample.cpu / args.steps * 1e6)
            wall.append(sample.wall / args.steps * 1e6)
        if profile is not None:
            profile.dump_stats(args.profile)
        counted = count_trips(store, tool) if args.trips and not args.sqlite else ""
    where = "SQLite file" if args.sqlite else "PostgreSQL"
    print(
        f"{where}, {args.steps} steps x {args.rounds}: CPU µs/step "
        + " ".join(f"{c:.0f}" for c in cpu)
        + f" (median {statistics.median(cpu):.0f}); wall µs/step "
        + " ".join(f"{w:.0f}" for w in wall)
        + f" (median {statistics.median(wall):.0f}); load {os.getloadavg()[0]:.1f}"
    )
    if counted:
        print(counted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
