"""What the one chain head costs on PostgreSQL: aggregate commits per second, chain on and off.

Issue 21 item 2: every event is chained under one row lock (`chain_head`, held to
commit, decision 0080), so every writer on every host waits for the commit (and
its WAL flush) of the one before. This measures whether that caps a fleet.

Each writer is a process with its own store (its own connection) and its own run.
One commit is the shape of a step's: `BEGIN` (the store's READ COMMITTED write
transaction, with its schema guard), `lock_run` on the writer's run, then
`--events` events appended, `COMMIT` (fsynced: the store sets `synchronous_commit
= on`). Two variants, same SQL otherwise:

- **chain on**: the store's own `PostgresTx.append_event`: the first event locks
  `chain_head` (`FOR UPDATE`), reads the last event's hash, inserts the chained row
  and raises `chain_head.seq`.
- **chain off** (a measurement-only variant, never a store): the same transaction
  and the same insert into `events` with a hash computed the same way, but the seq
  comes from a sequence and the previous hash is empty: no `chain_head` lock, no
  head read. This is the floor: what the same commits cost with no global order.

For each writer count (`--writers`, default 1, 8, 32) and variant, every writer
commits for `--seconds` after a common start; the figure is commits completed in
that window per second, all writers together. The ratios are printed against one
writer with the chain on (the issue's target: >= 4x at 8 processes) and chain on
against chain off at each count. Each (count, variant) runs in a fresh schema,
dropped after; the chain-on schemas are verified (`verify_events`) before.

    python benchmarks/pg_chain_head.py [--url URL] [--writers 1,8,32] [--seconds 5]
        [--events 2] [--repeats 1]

The URL defaults to `AGENTRT_TEST_POSTGRES_URL`. On a machine with few cores the
writers compete for the CPU with the server; the CPU count is printed with the
figures.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from agentrt import Limits
from agentrt._canonical import to_text
from agentrt._chain import event_hash
from agentrt._clock import as_stored, format_time
from agentrt._store import open_existing, open_store
from agentrt._store.postgres import _store as pg_store
from agentrt._store.postgres._tx import PostgresTx

PAYLOAD = {"tool": "lookup", "arguments": {"order": "A-1042", "note": "x" * 200}}


class UnchainedTx(PostgresTx):
    """Measurement only: the same insert into `events`, its seq from a sequence, no head.

    Never a store's transaction: events written this way are not a chain (each
    one's previous hash is empty), and `verify` would say so.
    """

    def _next(self) -> tuple[str, int]:
        if self._head is None:
            row = self.execute("SELECT nextval('bench_unchained_seq')").fetchone()
            self._head = ("", int(row[0]))
        return self._head

    def append_event(self, run_id: str, step_id: str, at: Any, type: str, payload: Any) -> int:
        seq = super(PostgresTx, self).append_event(run_id, step_id, at, type, payload)
        self._head = None  # the next event takes its own seq from the sequence
        return seq


PARTITIONS = 16
"""Chain partitions of the `partitioned` variant (`--partitions`)."""

PARTITION_BASE = 10_000_000


def partition_of(run_id: str, partitions: int) -> int:
    """The partition a run's events are chained in: fixed by its id."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big") % partitions


class PartitionedTx(PostgresTx):
    """Measurement only: a run's events chained in one of `PARTITIONS` chains.

    The shape of decision 0086's design: the head of partition `p` is a row of
    `bench_heads` (its last seq and hash), locked `FOR UPDATE` by the first event
    the transaction appends and held to commit; seqs of partition `p` are
    `p (mod PARTITIONS)`, consecutive within it. Writers of runs in other
    partitions never wait for it.
    """

    _part: tuple[int, str, int] | None = None

    def append_event(self, run_id: str, step_id: str, at: Any, type: str, payload: Any) -> int:
        self._check_open()
        if self._part is None:
            p = partition_of(run_id, PARTITIONS)
            row = self.execute("SELECT seq, hash FROM bench_heads WHERE p = ? FOR UPDATE", (p,))
            last, prev = row.fetchone()
            self._part = (p, str(prev), int(last))
        p, prev, last = self._part
        seq = last + PARTITIONS
        payload_json, at_text = to_text(payload), format_time(at)
        digest = event_hash(prev, seq, run_id, step_id, at_text, type, payload_json)
        self.execute(
            "INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, run_id, step_id, at_text, type, payload_json, digest),
        )
        self.execute("UPDATE bench_heads SET seq = ?, hash = ? WHERE p = ?", (seq, digest, p))
        self._part = (p, digest, seq)
        return seq


VARIANTS = {"on": PostgresTx, "off": UnchainedTx, "parts": PartitionedTx}


def schema_url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def prepare(base: str, writers: int) -> tuple[str, str, list[str]]:
    """A fresh schema with one run per writer; returns (schema, url, run ids)."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = schema_url(base, schema)
    store = open_store(url)
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
        conn.execute(
            f"CREATE TABLE {schema}.bench_heads (p int PRIMARY KEY, seq bigint, hash text)"
        )
        conn.execute(
            f"INSERT INTO {schema}.bench_heads SELECT p, {PARTITION_BASE} + p, '' "
            f"FROM generate_series(0, {PARTITIONS - 1}) AS p"
        )
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
    """One writer process: warm up, wait for the common start, count commits in the window."""
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
        if time.monotonic() > end:
            break
        done += 1
    store.close()
    results.put(done)


def measure(base: str, writers: int, variant: str, events: int, seconds: float) -> float:
    """Aggregate commits per second of `writers` processes in one fresh schema."""
    schema, url, runs = prepare(base, writers)
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
        counts = [results.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                raise SystemExit(f"a writer exited with {p.exitcode}")
        if variant == "parts":
            check_partitions(url)
        if variant == "on":
            store = open_existing(url, read_only=True)
            try:
                report = store.verify_events()
            finally:
                store.close()
            if not report.intact:
                raise SystemExit(f"the chain-on record does not verify: {report}")
        return sum(counts) / seconds
    finally:
        drop(base, schema)


def server_facts(base: str) -> str:
    with psycopg.connect(base, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        delay = conn.execute("SHOW commit_delay").fetchone()
    return f"PostgreSQL {version[0] if version else '?'}, commit_delay {delay[0] if delay else '?'}"


def check_partitions(url: str) -> int:
    """Every partition of the `parts` variant is one unbroken chain; returns events checked."""
    base, _, schema = url.rpartition("schema=")
    checked = 0
    with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
        for p in range(PARTITIONS):
            prev, last = "", PARTITION_BASE + p
            rows = conn.execute(
                f"SELECT seq, run_id, step_id, at, type, payload_json, hash FROM {schema}.events "
                "WHERE seq > %s AND seq %% %s = %s ORDER BY seq",
                (PARTITION_BASE, PARTITIONS, p),
            ).fetchall()
            for seq, run_id, step_id, at, type, payload_json, digest in rows:
                expected = event_hash(prev, seq, run_id, step_id, at, type, payload_json)
                if seq != last + PARTITIONS or digest != expected:
                    raise SystemExit(f"partition {p} breaks at seq {seq}")
                if partition_of(run_id, PARTITIONS) != p:
                    raise SystemExit(f"run {run_id} has an event in partition {p}")
                prev, last = digest, seq
                checked += 1
    return checked


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
            f"{'met' if on8 >= 4 else 'not met'} with the one chain head; "
            f"load {os.getloadavg()[0]:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
