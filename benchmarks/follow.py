"""Following a record with `--follow`: polling against a LISTEN/NOTIFY wake-up, measured.

Issue 21 item 5: "the export follower with `--follow` (LISTEN/NOTIFY or polling:
measured, and documented)". `agentrt.export.Follower` (behind `agentrt events
--follow` and `agentrt export`) reads the record by its cursor every `interval`
seconds. The alternative prototyped here (never in the store): the follower
holds a second connection that has run `LISTEN`, reads by its cursor, and when
a read finds nothing waits on that connection for a notification instead of
sleeping; writers send `pg_notify(channel, '')` inside each commit's
transaction, so the notification is delivered when (and only if) the commit is.
The notification carries nothing the follower trusts: it only wakes it, and
what it delivers is what its cursor reads, as when it polls.

One run prints four tables, each figure measured in that run:

1. **Latency**, commit to sink: one writer process commits one event per
   transaction (the store's own `append_event` on a record of 16 partitions, the
   PostgreSQL default) `--commits` times, at gaps drawn from a seeded generator
   (uniform 30 to 250 ms, `--gaps`); the follower, in a process of its own (all runs), hands
   each event to a sink that notes `time.monotonic()` (one clock for every process
   on the machine). The latency is that time less the moment the writer's
   `COMMIT` returned (the follower can see a commit a little before the writer's
   client hears of it, so a figure can be just below zero). Polling at 0.5 s (the
   default), 0.1 s and 0.02 s, and the LISTEN prototype (writers notifying in
   the commit; a wake-up, or 5 s, whichever is first, then a read). Median, 95th
   percentile and worst, and each against LISTEN's median.
2. **Idle cost**: the same followers with nothing written for `--idle` seconds,
   on PostgreSQL and on SQLite (a file, WAL, its default one partition): the
   store reads per second the follower issues (its store's `_query` calls
   counted), its process's CPU, and the CPU of its server backend(s) (read from
   `/proc/PID/stat` for `pg_backend_pid()`, the server being on this machine);
   then, for one idle read's CPU, `--burst` reads back to back (default 5,000).
3. **Writers**: `--writers` processes (default 1, 8, 32), each with its own store
   and run, each committing a step-shaped transaction (`lock_run`, two events)
   for `--seconds` after a common start, all together: aggregate commits per
   second, plain (what the store does), with `pg_notify` in each commit
   (`notify`: PostgreSQL takes one lock for the whole cluster's notification
   queue before the commit and holds it until the commit is flushed), and with a
   notification sent after each commit in a transaction of its own with
   `synchronous_commit = off` (`after`: the lock held only through an unflushed
   commit; a writer killed between the two commits sends none). A follower
   listens throughout the notifying windows, draining what it is sent. Each writer's
   rate is its commits over the time they took, from the window's start to the end of
   its first commit past the window (at least one, so that a stalled machine gives a
   low rate, never none). The table is
   printed twice: at the server's own flush, and with each writer's flush made
   `--slow-flush-ms` slower (`commit_delay` with `commit_siblings = 0`, set in the
   writers' sessions only, superuser: a slower disk, modelled). Under each, what
   `pg_locks` showed of that lock (an object lock on database 0 of class
   `pg_database`) during the `notify` windows, sampled every 2 ms.
4. **Loss**: a listener's connection is ended by the server
   (`pg_terminate_backend`), one event is committed with its notification, the
   listener connects again and listens: how many notifications reach it in
   `--loss-wait` seconds (default 1), and how many events one read by its cursor
   then finds.

    python benchmarks/follow.py --postgres postgresql://root@127.0.0.1:5432/test
        [--commits 40] [--idle 5] [--writers 1,8,32] [--seconds 3]
        [--slow-flush-ms 5] [--gaps 30,250] [--burst 5000] [--loss-wait 1] [--dir PATH]

`--gaps`, `--burst` and `--loss-wait`, like `--commits`, `--idle` and `--seconds`,
only size the work and its waits: every table is printed whatever they are, so the
tests run the smallest (tests/test_postgres_benchmarks.py).

Without `--postgres` (or `AGENTRT_TEST_POSTGRES_URL`) only SQLite's idle cost
is printed. Each PostgreSQL table runs in a fresh schema, dropped after. The load
average is printed with the figures: on a machine shared with other work, read
the ratios, which one run's figures share, rather than the figures alone.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentrt import Limits
from agentrt._clock import as_stored
from agentrt._store import open_existing, open_store
from agentrt.export import Follower

INTERVALS = (0.5, 0.1, 0.02)
SAFETY = 5.0
"""The LISTEN follower reads by its cursor at least this often even with no wake-up."""
PAYLOAD = {"tool": "lookup", "arguments": {"order": "A-1042", "note": "x" * 200}}
TICK = os.sysconf("SC_CLK_TCK")
BURST = 5000
"""Idle reads back to back, for one read's CPU (the idle windows' CPU is in clock ticks):
`--burst`'s default."""


# --- a record ------------------------------------------------------------------------------------


def schema_url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def channel_of(url: str) -> str:
    """The notification channel of a store's schema (a notification is per database)."""
    from agentrt._store.postgres._connection import parse_target

    return f"agentrt_events_{parse_target(url).schema}"


def conninfo_of(url: str) -> str:
    from agentrt._store.postgres._connection import parse_target

    return parse_target(url).conninfo


def make_record(target: str, runs: int) -> list[str]:
    """A fresh store at `target` (its backend's default partitions) with `runs` runs."""
    store = open_store(target)
    ids = [f"run-{i:03d}" for i in range(runs)]
    try:
        now = as_stored(store.lease_now(lambda: datetime.now(UTC)))
        for run_id in ids:
            with store.transaction() as tx:
                tx.create_run(
                    run_id,
                    "measure following",
                    Limits(),
                    owner=f"owner-{run_id}",
                    lease_expires_at=now + timedelta(hours=1),
                    holder="bench",
                    specs=[],
                    now=now,
                )
    finally:
        store.close()
    return ids


def drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Committer:
    """One writer's store and run: `commit()` appends `events` events in one transaction,
    with the notification `how` says (None, "notify" in the commit, "after" it)."""

    def __init__(
        self, target: str, run_id: str, how: str | None, events: int = 1, flush_ms: float = 0
    ) -> None:
        self.store = open_existing(target)
        if flush_ms > 0:  # a slower disk, modelled in this session only (superuser)
            conn = self.store._pg  # type: ignore[attr-defined]
            conn.execute(f"SET commit_delay = {round(flush_ms * 1000)}")
            conn.execute("SET commit_siblings = 0")
        self.run_id = run_id
        self.how = how
        self.events = events
        self.channel = channel_of(target) if how else ""
        self.now = as_stored(self.store.lease_now(lambda: datetime.now(UTC)))

    def commit(self) -> int:
        seq = 0
        with self.store.transaction() as tx:
            tx.lock_run(self.run_id)
            for _ in range(self.events):
                seq = tx.append_event(self.run_id, "", self.now, "bench.step", PAYLOAD)
            if self.how == "notify":
                tx.execute("SELECT pg_notify(?, '')", (self.channel,))  # type: ignore[attr-defined]
        if self.how == "after":
            conn = self.store._pg  # type: ignore[attr-defined]
            conn.execute(
                f"BEGIN; SET LOCAL synchronous_commit = off; "
                f"SELECT pg_notify('{self.channel}', ''); COMMIT"
            )
        return seq

    def close(self) -> None:
        self.store.close()


# --- followers -----------------------------------------------------------------------------------


class Counted:
    """Counts the store reads a follower issues (its store's `_query` calls)."""

    def __init__(self, follower: Follower) -> None:
        self.reads = 0
        store: Any = follower._store
        inner = store._query

        def query(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return inner(*args, **kwargs)

        store._query = query


def backend_pids(follower: Follower, listener: Any = None) -> list[int]:
    store: Any = follower._store
    pids = []
    if hasattr(store, "_pg"):
        pids.append(int(store._pg.info.backend_pid))
    if listener is not None:
        pids.append(int(listener.info.backend_pid))
    return pids


def cpu_of(pids: list[int]) -> float:
    """Seconds of CPU the processes `pids` have used (user + system), 0 if unreadable."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def listening(url: str) -> Any:
    import psycopg

    conn = psycopg.connect(conninfo_of(url), autocommit=True)
    conn.execute(f"LISTEN {channel_of(url)}")
    return conn


def follow_listening(
    follower: Follower,
    listener: Any,
    sink: Callable[[Any], Any],
    *,
    max_events: int | None = None,
    timeout: float | None = None,
) -> int:
    """The prototype: read by the cursor; on an empty read, wait for a wake-up (or SAFETY).

    The listener ran `LISTEN` before the first read, so a commit after that read
    wakes it: nothing committed is left unread until the next commit."""
    delivered = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    while max_events is None or delivered < max_events:
        page = follower.poll(None if max_events is None else max_events - delivered)
        if page:
            for event in page:
                sink(event)
            follower.ack_page(page)
            delivered += len(page)
            continue
        wait = SAFETY
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                break
        for _ in listener.notifies(timeout=wait, stop_after=1):
            pass
        for _ in listener.notifies(timeout=0):  # drain the wake-ups already here
            pass
    return delivered


def follower_process(
    target: str, mode: str, count: int, ready: Any, results: Any, idle: float, burst: int
) -> None:
    """A follower in a process of its own: catch up, then deliver `count` events (noting
    when each reached the sink), or, with `idle` > 0, wait that long and report its cost
    (and, polling, that of `burst` reads back to back)."""
    listener = listening(target) if mode == "listen" else None
    interval = 0.5 if mode == "listen" else float(mode)
    follower = Follower(target, interval=interval)
    follower.run(lambda e: None, follow=False)  # caught up: what the record held
    counted = Counted(follower)
    arrived: list[tuple[int, float]] = []

    def sink(event: Any) -> None:
        arrived.append((event.seq, time.monotonic()))

    pids = backend_pids(follower, listener)
    ready.release()
    if idle > 0:
        own0, server0, reads0, t0 = (
            time.process_time(),
            cpu_of(pids),
            counted.reads,
            time.monotonic(),
        )
        if listener is not None:
            follow_listening(follower, listener, sink, timeout=idle)
        else:
            follower.run(sink, timeout=idle)
        spent = time.monotonic() - t0
        figures = [
            (counted.reads - reads0) / spent,
            (time.process_time() - own0) / spent,
            (cpu_of(pids) - server0) / spent,
        ]
        if listener is None:  # one idle read's CPU, from reads back to back
            own0, server0, reads0 = time.process_time(), cpu_of(pids), counted.reads
            for _ in range(burst):
                follower.poll()
            reads = counted.reads - reads0
            figures += [
                (time.process_time() - own0) / reads,
                (cpu_of(pids) - server0) / reads,
            ]
        results.put(tuple(figures))
    else:
        if listener is not None:
            follow_listening(follower, listener, sink, max_events=count)
        else:
            follower.run(sink, max_events=count)
        results.put(arrived)
    follower.close()
    if listener is not None:
        listener.close()


def start_follower(
    target: str, mode: str, count: int, idle: float, burst: int = BURST
) -> tuple[Any, Any]:
    ctx = mp.get_context("fork")
    ready, results = ctx.Semaphore(0), ctx.Queue()
    proc = ctx.Process(
        target=follower_process, args=(target, mode, count, ready, results, idle, burst)
    )
    proc.start()
    if not ready.acquire(timeout=60):
        raise SystemExit(f"the {mode} follower did not start within 60 s")
    return proc, results


def mode_name(mode: str) -> str:
    return "LISTEN/NOTIFY" if mode == "listen" else f"poll {float(mode):g} s"


# --- 1. latency ----------------------------------------------------------------------------------


def measure_latency(
    base: str, commits: int, gaps_ms: tuple[float, float] = (30, 250)
) -> dict[str, list[float]]:
    """Per mode, each commit's latency to the follower's sink, in seconds; the commits
    `gaps_ms` apart (uniform, seeded)."""
    modes = [f"{i:g}" for i in INTERVALS] + ["listen"]
    out: dict[str, list[float]] = {}
    for mode in modes:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        target = schema_url(base, schema)
        try:
            (run_id,) = make_record(target, 1)
            proc, results = start_follower(target, mode, commits, 0.0)
            writer = Committer(target, run_id, "notify" if mode == "listen" else None)
            gaps = random.Random(21).uniform
            committed: dict[int, float] = {}
            try:
                for _ in range(commits):
                    time.sleep(gaps(gaps_ms[0] / 1000, gaps_ms[1] / 1000))
                    seq = writer.commit()
                    committed[seq] = time.monotonic()
                arrived = results.get(timeout=120)
                proc.join(timeout=60)
            finally:
                writer.close()
                if proc.is_alive():
                    proc.kill()
            out[mode] = [t - committed[seq] for seq, t in arrived]
            if len(out[mode]) != commits:
                raise SystemExit(f"the {mode} follower delivered {len(out[mode])} of {commits}")
        finally:
            drop_schema(base, schema)
    return out


def print_latency(figures: dict[str, list[float]]) -> None:
    base = statistics.median(figures["listen"])
    print(
        f"{'follower':<14}  {'median ms':>9}  {'p95 ms':>7}  {'worst ms':>8}  {'median/LISTEN':>13}"
    )
    for mode, values in figures.items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        median = statistics.median(ordered)
        print(
            f"{mode_name(mode):<14}  {median * 1000:>9.1f}  {p95 * 1000:>7.1f}  "
            f"{ordered[-1] * 1000:>8.1f}  {median / base if base > 0 else float('inf'):>12.1f}x"
        )


# --- 2. idle cost --------------------------------------------------------------------------------


def measure_idle(
    target: str, modes: list[str], idle: float, burst: int = BURST
) -> dict[str, tuple[float, ...]]:
    out = {}
    for mode in modes:
        proc, results = start_follower(target, mode, 0, idle, burst)
        out[mode] = results.get(timeout=idle + 120)
        proc.join(timeout=60)
    return out


def print_idle(backend: str, figures: dict[str, tuple[float, ...]], burst: int = BURST) -> None:
    print(
        f"{'backend':<10}  {'follower':<14}  {'reads/s':>7}  {'follower CPU %':>14}  "
        f"{'server CPU %':>12}"
    )
    for mode, (reads, own, server, *_) in figures.items():
        shown = f"{server * 100:>12.2f}" if backend == "postgres" else f"{'-':>12}"
        print(f"{backend:<10}  {mode_name(mode):<14}  {reads:>7.1f}  {own * 100:>14.2f}  {shown}")
    bursts = [f[3:] for f in figures.values() if len(f) == 5]
    own_us = statistics.median(b[0] for b in bursts) * 1e6
    server_us = statistics.median(b[1] for b in bursts) * 1e6
    said = f", {server_us:.0f} µs of its server backend's" if backend == "postgres" else ""
    print(
        f"{backend}: one idle read by the cursor costs {own_us:.0f} µs of the follower's CPU"
        f"{said} (median over the poll rows, {burst} reads back to back each)"
    )


# --- 3. writers ----------------------------------------------------------------------------------


def writer_process(
    target: str,
    run_id: str,
    how: str | None,
    flush_ms: float,
    ready: Any,
    start_at: Any,
    seconds: float,
    out: Any,
) -> None:
    writer = Committer(target, run_id, how, events=2, flush_ms=flush_ms)
    for _ in range(3):
        writer.commit()
    ready.release()
    while start_at.value == 0.0:
        time.sleep(0.001)
    start = start_at.value
    end = start + seconds
    while time.monotonic() < start:
        time.sleep(0.0005)
    done = 0
    while True:  # at least one commit, however slow: a rate is never zero over nothing
        writer.commit()
        done += 1
        if time.monotonic() >= end:
            break
    elapsed = time.monotonic() - start
    writer.close()
    out.put(done / elapsed)


class LockSampler:
    """Samples `pg_locks` for the lock PostgreSQL serialises notifying commits on (an
    object lock on database 0 of class `pg_database`): how often it is held, and how many
    wait for it."""

    SQL = (
        "SELECT granted, count(*) FROM pg_locks WHERE locktype = 'object' AND database = 0 "
        "AND classid = 'pg_database'::regclass GROUP BY granted"
    )

    def __init__(self, base: str) -> None:
        self.base = base
        self.samples = self.held = self.waiting = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(self.SQL).fetchall()
                self.samples += 1
                for granted, n in rows:
                    if granted:
                        self.held += 1
                    else:
                        self.waiting += int(n)
                time.sleep(0.002)

    def said(self) -> str:
        n = max(self.samples, 1)
        return (
            f"held in {100 * self.held / n:.0f} % of {self.samples} samples, "
            f"{self.waiting / n:.1f} writers waiting for it on average"
        )


SAMPLED: dict[tuple[int, float], str] = {}
"""(writers, flush_ms) -> what the notify window's `LockSampler` saw."""


def measure_writers(
    base: str, writers: int, how: str | None, seconds: float, flush_ms: float = 0
) -> float:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    target = schema_url(base, schema)
    stop = threading.Event()
    drained = threading.Thread()
    sampler = LockSampler(base)
    try:
        runs = make_record(target, writers)
        ctx = mp.get_context("fork")
        ready, start_at, counts = ctx.Semaphore(0), ctx.Value("d", 0.0), ctx.Queue()
        procs = [
            ctx.Process(
                target=writer_process,
                args=(target, r, how, flush_ms, ready, start_at, seconds, counts),
            )
            for r in runs
        ]
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=120):
                raise SystemExit("a writer did not get ready within 120 s")
        if how is not None:  # a follower listens, as it would: drained, never behind
            listener = listening(target)

            def drain() -> None:
                while not stop.is_set():
                    for _ in listener.notifies(timeout=0.2):
                        pass
                listener.close()

            drained = threading.Thread(target=drain, daemon=True)
            drained.start()
        start_at.value = time.monotonic() + 0.2
        if how == "notify":
            sampler.thread.start()
        rates = [counts.get(timeout=seconds + 120) for _ in procs]  # commits/s, each
        if how == "notify":
            sampler.stop.set()
            sampler.thread.join(timeout=10)
            SAMPLED[(writers, flush_ms)] = sampler.said()
        for p in procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                raise SystemExit(f"a writer exited with {p.exitcode}")
        return float(sum(rates))
    finally:
        stop.set()
        if drained.is_alive():
            drained.join(timeout=10)
        drop_schema(base, schema)


def print_writers(base: str, counts: list[int], seconds: float, flush_ms: float) -> None:
    variants: list[str | None] = [None, "notify", "after"]
    rates = {
        (n, v): measure_writers(base, n, v, seconds, flush_ms) for n in counts for v in variants
    }
    print(
        f"{'writers':>7}  {'plain c/s':>9}  {'notify c/s':>10}  {'after c/s':>9}  "
        f"{'notify/plain':>12}  {'after/plain':>11}  {'plain vs 1':>10}  {'notify vs 1':>11}"
    )
    for n in counts:
        plain, notify, after = (rates[(n, v)] for v in variants)
        print(
            f"{n:>7}  {plain:>9.0f}  {notify:>10.0f}  {after:>9.0f}  "
            f"{notify / plain:>11.2f}x  {after / plain:>10.2f}x  "
            f"{plain / rates[(counts[0], None)]:>9.2f}x  "
            f"{notify / rates[(counts[0], 'notify')]:>10.2f}x"
        )
    for n in counts:
        print(f"notify, {n} writers: the notification queue's lock {SAMPLED[(n, flush_ms)]}")


# --- 4. loss -------------------------------------------------------------------------------------


def measure_loss(base: str, wait: float = 1.0) -> tuple[int, int]:
    """(notifications received in `wait` seconds, events one read found) after a
    listener's connection was ended and a notifying commit made while it was gone."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    target = schema_url(base, schema)
    try:
        (run_id,) = make_record(target, 1)
        follower = Follower(target)
        follower.run(lambda e: None, follow=False)
        listener = listening(target)
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (listener.info.backend_pid,))
        try:
            for _ in listener.notifies(timeout=wait):
                pass
        except psycopg.OperationalError:
            pass  # what a follower sees: the connection is gone
        writer = Committer(target, run_id, "notify")
        writer.commit()
        writer.close()
        listener.close()
        listener = listening(target)  # again: LISTEN first, then read once
        received = sum(1 for _ in listener.notifies(timeout=wait))
        found = len(follower.poll())
        listener.close()
        follower.close()
        return received, found
    finally:
        drop_schema(base, schema)


# --- the run -------------------------------------------------------------------------------------


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f})"


def server_facts(base: str) -> str:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW commit_delay").fetchone()
    return f"PostgreSQL {version[0] if version else '?'}, commit_delay {sync[0] if sync else '?'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("AGENTRT_TEST_POSTGRES_URL", ""))
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--slow-flush-ms", type=float, default=5.0)
    parser.add_argument("--gaps", default="30,250", help="ms between commits: LOW,HIGH")
    parser.add_argument("--burst", type=int, default=BURST, help="idle reads back to back")
    parser.add_argument("--loss-wait", type=float, default=1.0, help="seconds to wait (4.)")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    try:
        low, high = (float(ms) for ms in args.gaps.split(","))
    except ValueError:
        parser.error("--gaps takes two numbers of milliseconds: LOW,HIGH")
    if not 0 <= low <= high or args.burst < 1 or args.loss_wait <= 0:
        parser.error("--gaps needs 0 <= LOW <= HIGH, --burst >= 1 and --loss-wait > 0")
    modes = [f"{i:g}" for i in INTERVALS]
    print(f"following: {os.cpu_count()} CPUs; {load()}")

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "follow.db")
        make_record(path, 1)
        sqlite_idle = measure_idle(path, modes, args.idle, args.burst)
    if not args.postgres:
        print(f"\nidle followers, {args.idle:g} s with nothing written")
        print_idle("sqlite", sqlite_idle, args.burst)
        print("no PostgreSQL: set --postgres URL or AGENTRT_TEST_POSTGRES_URL for the rest")
        return 0
    base = args.postgres
    print(server_facts(base))

    print(
        f"\n1. latency, commit to sink: {args.commits} commits of one event, "
        f"{low:g}-{high:g} ms apart"
    )
    print_latency(measure_latency(base, args.commits, (low, high)))
    print(f"   {load()}")

    print(f"\n2. idle followers, {args.idle:g} s with nothing written")
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        target = schema_url(base, schema)
        make_record(target, 1)
        pg_idle = measure_idle(target, [*modes, "listen"], args.idle, args.burst)
    finally:
        drop_schema(base, schema)
    print_idle("postgres", pg_idle, args.burst)
    print_idle("sqlite", sqlite_idle, args.burst)
    print(f"   {load()}")

    counts = [int(n) for n in args.writers.split(",")]
    flushes = [0.0] + ([args.slow_flush_ms] if args.slow_flush_ms > 0 else [])
    for flush_ms in flushes:
        print(
            f"\n3. writers: commits/s, all writers together ({args.seconds:g} s windows, "
            "lock_run + 2 events per commit), "
            + (
                f"each flush made {flush_ms:g} ms slower (commit_delay, writers' sessions only)"
                if flush_ms
                else "the server's own flush"
            )
        )
        print_writers(base, counts, args.seconds, flush_ms)
        print(f"   {load()}")
    received, found = measure_loss(base, args.loss_wait)
    print(
        f"\n4. a listener's connection ended, one notifying commit while it was gone: "
        f"{received} notification(s) reached it after it listened again; one read by its "
        f"cursor found {found} event(s)"
    )
    print(f"   {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
