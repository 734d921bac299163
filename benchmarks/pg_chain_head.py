"""What the chain's heads cost on PostgreSQL: aggregate commits per second, one head, none, N.

Issue 21 item 2: with one chain every event is chained under one row lock
(`chain_head`, held to commit, decision 0080), so every writer on every host waits
for the commit (and its WAL flush) of the one before. This measured whether that
caps a fleet (decision 0086), and now measures the partitioned chain built for it
(decision 0093), through the store's own append.

Each writer is a process with its own store (its own connection) and its own run.
One commit is the shape of a step's: `BEGIN` (the store's READ COMMITTED write
transaction, with its schema guard), `lock_run` on the writer's run, then
`--events` events appended, `COMMIT` (fsynced: the store sets `synchronous_commit
= on`). Three variants, same SQL otherwise:

- **on**: the store's own `PostgresTx.append_event` on a record of one partition
  (`open_store(url, chain_partitions=1)`, what every record made before 0.2.0 is):
  the first event locks the one `chain_head` row (`FOR UPDATE`), chains to the hash
  it holds, inserts the row and moves the head.
- **off** (a measurement-only variant, never a store): the same transaction and the
  same insert into `events` with a hash computed the same way, but the seq comes
  from a sequence and the previous hash is empty: no head lock, no head read. This
  is the floor: what the same commits cost with no order at all.
- **parts**: the store's own append on a record of `--partitions` partitions
  (default 16, a new PostgreSQL schema's): a run's events chained in partition
  `sha256(run_id) mod N`, its head row locked and held to commit; writers of runs
  in other partitions do not wait for it.

For each writer count (`--writers`, default 1, 8, 32) and variant, every writer
commits for `--seconds` after a common start; the figure is commits completed in
that window per second, all writers together. The ratios are printed against one
writer of the same variant (the issue's target: >= 4x at 8 processes) and on and
parts against off at each count. Each (count, variant) runs in a fresh schema,
dropped after; the chained ones are verified (`verify_events`) before.

    python benchmarks/pg_chain_head.py [--url URL] [--writers 1,8,32] [--seconds 5]
        [--events 2] [--repeats 1]

The URL defaults to `AGENTRT_TEST_POSTGRES_URL`. On a machine with few cores the
writers compete for the CPU with the server; the CPU count is printed with the
figures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from agentrt import Limits
from agentrt._clock import as_stored
from agentrt._store import open_existing, open_store
from agentrt._store.postgres import _store as pg_store
from agentrt._store.postgres._tx import PostgresTx

PAYLOAD = {"tool": "lookup", "arguments": {"order": "A-1042", "note": "x" * 200}}


class UnchainedTx(PostgresTx):
    """Measurement only: the same insert into `events`, its seq from a sequence, no head.

    Never a store's transaction: events written this way are not a chain (each
    one's previous hash is empty), and `verify` would say so.
    """

    lock_head_with_run = False  # no head: `lock_run` locks the run alone (decision 0108)

    def _next(self, part: int) -> tuple[str, int]:
        row = self.execute("SELECT nextval('bench_unchained_seq')").fetchone()
        return "", int(row[0])

    def _move_head(self, part: int, seq: int, digest: str) -> None:
        """No head to move: the next event takes its own seq from the sequence."""


PARTITIONS = 16
"""Chain partitions of the `parts` variant (`--partitions`)."""

VARIANTS = {"on": PostgresTx, "off": UnchainedTx, "parts": PostgresTx}


def schema_url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def prepare(base: str, writers: int, variant: str) -> tuple[str, str, list[str]]:
    """A fresh schema with one run per writer; returns (schema, url, run ids)."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = schema_url(base, schema)
    store = open_store(url, chain_partitions=PARTITIONS if variant == "parts" else 1)
    runs = [f"run-{i:03d}" for i in range(writers)]
    try:
        now = as_stored(store.lease_now(lambda: datetime.now(UTC)))
        for run_id in runs:
            with store.transaction() as tx:
                tx.create_run(
                    run_id,
                    "measure the chain head",
                    Limits(),
                    owner=f"owner-{run_id}",
                    lease_expires_at=now + timedelta(hours=1),
                    holder="bench",
                    specs=[],
                    now=now,
                )
    finally:
        store.close()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SEQUENCE {schema}.bench_unchained_seq START 1000000")
    return schema, url, runs


def drop(base: str, schema: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def writer(
    url: str,
    run_id: str,
    variant: str,
    events: int,
    ready: Any,
    start_at: Any,
    seconds: float,
    results: Any,
) -> None:
    """One writer process: warm up, wait for the common start, put its commit rate over the
    window (its last commit may end past it)."""
    pg_store.PostgresTx = VARIANTS[variant]  # type: ignore[misc]  # this process only
    store = open_existing(url)
    now = as_stored(store.lease_now(lambda: datetime.now(UTC)))

    def commit() -> None:
        with store.transaction() as tx:
            tx.lock_run(run_id)
            for _ in range(events):
                tx.append_event(run_id, "", now, "bench.step", PAYLOAD)

    for _ in range(3):
        commit()
    ready.release()
    while start_at.value == 0.0:
        time.sleep(0.001)
    start = start_at.value
    end = start + seconds
    while time.monotonic() < start:
        time.sleep(0.0005)
    done = 0
    while True:
        commit()
        done += 1
        finished = time.monotonic()
        if finished > end:
            break
    store.close()
    # Every commit made, over the time they took: on a loaded machine one commit may outlast
    # a short window, which then still counts one, never none (a rate of zero divides).
    results.put(done / (finished - start))


def measure(base: str, writers: int, variant: str, events: int, seconds: float) -> float:
    """Aggregate commits per second of `writers` processes in one fresh schema."""
    schema, url, runs = prepare(base, writers, variant)
    ctx = mp.get_context("fork")
    try:
        ready = ctx.Semaphore(0)
        start_at = ctx.Value("d", 0.0)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=writer,
                args=(url, run_id, variant, events, ready, start_at, seconds, results),
            )
            for run_id in runs
        ]
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=120):
                raise SystemExit("a writer did not get ready within 120 s")
        start_at.value = time.monotonic() + 0.2
        rates = [results.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                raise SystemExit(f"a writer exited with {p.exitcode}")
        if variant != "off":
            store = open_existing(url, read_only=True)
            try:
                report = store.verify_events()
                used = {s for s, _ in store.chain_heads() if s > 0}
            finally:
                store.close()
            if not report.intact:
                raise SystemExit(f"the {variant} record does not verify: {report}")
            if variant == "parts" and len(used) < min(writers, 2):
                raise SystemExit("the writers' runs were all chained in one partition")
        return float(sum(rates))
    finally:
        drop(base, schema)


def server_facts(base: str) -> str:
    with psycopg.connect(base, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        delay = conn.execute("SHOW commit_delay").fetchone()
    return f"PostgreSQL {version[0] if version else '?'}, commit_delay {delay[0] if delay else '?'}"


def main(argv: list[str] | None = None) -> int:
    global PARTITIONS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AGENTRT_TEST_POSTGRES_URL", ""))
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--events", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--repeats", type=int, default=1, help="best of this many windows")
    args = parser.parse_args(argv)
    if not args.url:
        print("set --url or AGENTRT_TEST_POSTGRES_URL to a PostgreSQL server", file=sys.stderr)
        return 2
    PARTITIONS = args.partitions
    counts = [int(n) for n in args.writers.split(",")]
    print(
        f"chain head: {args.events} event(s) per commit, {args.seconds:g} s windows, "
        f"best of {args.repeats}, {PARTITIONS} partitions; {os.cpu_count()} CPUs; "
        f"load {os.getloadavg()[0]:.1f}; {server_facts(args.url)}"
    )
    variants = list(VARIANTS)
    figures: dict[tuple[int, str], float] = {}
    for n in counts:
        for variant in variants:
            figures[(n, variant)] = max(
                measure(args.url, n, variant, args.events, args.seconds)
                for _ in range(args.repeats)
            )
    heads = "".join(f"  {v + ' c/s':>10}" for v in variants)
    print(
        f"{'writers':>7}{heads}  {'on/off':>7}  {'parts/off':>9}"
        + "".join(f"  {v + ' vs 1':>10}" for v in variants)
    )
    for n in counts:
        row = {v: figures[(n, v)] for v in variants}
        print(
            f"{n:>7}"
            + "".join(f"  {row[v]:>10.0f}" for v in variants)
            + f"  {row['on'] / row['off']:>6.2f}x  {row['parts'] / row['off']:>8.2f}x"
            + "".join(f"  {row[v] / figures[(counts[0], v)]:>9.2f}x" for v in variants)
        )
    if 8 in counts and counts[0] == 1:
        said = ", ".join(f"{v} {figures[(8, v)] / figures[(1, v)]:.2f}x" for v in variants)
        on8 = figures[(8, "on")] / figures[(1, "on")]
        print(
            f"8 writers against 1 (target >= 4x): {said} -> "
            f"{'met' if on8 >= 4 else 'not met'} with the one chain head, "
            f"{'met' if figures[(8, 'parts')] / figures[(1, 'parts')] >= 4 else 'not met'} "
            f"with {PARTITIONS} partitions; "
            f"load {os.getloadavg()[0]:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
