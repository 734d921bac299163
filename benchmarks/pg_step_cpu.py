"""The CPU per allowed tool step, the client's and the server's, on PostgreSQL (or a SQLite file).

One process opens a store in a schema of its own on the server, warms it with a
`--warm`-step run, then makes `--rounds` runs of `benchmarks/driver.py`'s loop
(`run_once`: `start_sync`, `default_policy()`, the read-only plain-function tool,
small observations) of `--steps` tool steps each, and prints the process's CPU
time (`time.process_time`: all threads, user and kernel) and wall time per step
of each run, and the server's CPU per step: its backend's (the one process serving the
store's connection) user and system time from `/proc/<pid>/stat` around each run, when
the server runs on this machine (`n/a` otherwise); the schema is dropped at the end.

`--guards` (PostgreSQL) alternates the rounds between decision 0157's schema guard (the
statement every write transaction sent until decision 0167, kept here as it was) and this
one's, on one store in one run, and prints each one's figures and the ratios of their
medians, then each guard's statement alone, prepared, on the store's connection (and
`SELECT 1`'s), `--times` times each (default 2,000), the server's CPU of one. The
server's CPU is read from the backend's `/proc/<pid>/schedstat` (nanoseconds) where
the kernel keeps it, else from its `/proc/<pid>/stat` (clock ticks).

`--other-tables N` first makes N tables (each with its primary key's index) in another
schema of the same database, as a database other applications share holds (dropped at
the end): neither guard should read them.

Instructions per step (they do not depend on the machine's load): run it under
`valgrind --tool=callgrind` once with `--steps 20` and once with `--steps 220`
(`--rounds 1`, `PYTHONHASHSEED=0`); the difference of the two totals over 200 is one
step's instructions in this process (libpq, psycopg and the runtime; the server's
work is another process's and is not counted, nor is the kernel's).

`--statements` (PostgreSQL, a superuser's URL) then reads the server's CPU of each
statement of a `--steps` run: `log_statement_stats` on the store's session, its reports
sent to the client (`client_min_messages = log`) and summed by statement and protocol
phase (parse, bind, execute; a statement's text is logged at its Execute message, after
its Parse and Bind were reported), a step's share of each printed largest first. The
reports' own cost is in them; the sum is below the backend's whole CPU (reading the
socket, between statements, is not in any).

`--profile FILE` writes a cProfile (CPU clock: `time.thread_time`) of the measured
runs, for `python -m pstats FILE`.

`--trips` (PostgreSQL) then counts what a step sends on the store's connection: two more
runs, of 10 and 20 steps, with each cursor's `execute` and each pipeline counted (a
pipeline one round trip, whatever it sends; the steady step is the difference over 10,
as `tests/test_postgres_round_trips.py` counts it), and prints the round trips and the
statements a step, each statement's text with its count (decision 0108).

`--lock` (PostgreSQL) alternates the rounds between the store as it is and the store
sending a `SELECT 1` where each write transaction locks the store's tables (decision 0172;
a `SELECT 1` costs the server 15-16 µs), then sends a write transaction's opening
(`BEGIN`, the statements, `ROLLBACK`) `--times` times a round (2,000), ten rounds
alternating, without and with the lock and the guard, and prints the server's CPU of one.

    python benchmarks/pg_step_cpu.py [URL] [--steps N] [--warm N] [--rounds N]
                                      [--sqlite] [--profile FILE] [--trips] [--guards]
                                      [--other-tables N] [--statements] [--lock] [--times N]

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

# Decision 0157's guard, for `--guards`: the statement every write transaction sent before
# decision 0167 (`_UNSAFE` then, each refusal named, wrapped as `GUARD` is).
PREVIOUS_UNSAFE = """\
WITH code AS MATERIALIZED (
    SELECT DISTINCT f.classid, f.objid FROM pg_depend AS f
    WHERE f.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass)
        AND f.refobjid >= 16384
        AND f.classid IN ('pg_attrdef'::regclass, 'pg_constraint'::regclass, 'pg_class'::regclass)
), own AS MATERIALIZED (
    SELECT c.oid, c.relname, c.relkind, c.relrowsecurity
    FROM pg_depend AS d JOIN pg_class AS c ON c.oid = d.objid
    WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjsubid = 0
        AND d.refobjid = to_regnamespace(current_schema())::oid
        AND d.classid = 'pg_class'::regclass
        AND c.relnamespace = to_regnamespace(current_schema())::oid
)
SELECT 'trigger', t.tgname::text FROM own AS c JOIN pg_trigger AS t ON t.tgrelid = c.oid
    WHERE NOT t.tgisinternal
UNION ALL
SELECT 'rule', r.rulename::text FROM own AS c JOIN pg_rewrite AS r ON r.ev_class = c.oid
    WHERE c.relkind NOT IN ('v', 'm')
UNION ALL
SELECT 'view', c.relname::text FROM own AS c WHERE c.relkind IN ('v', 'm')
UNION ALL
SELECT 'row-level policy', p.polname::text FROM own AS c JOIN pg_policy AS p ON p.polrelid = c.oid
UNION ALL
SELECT 'row-level security on', c.relname::text FROM own AS c WHERE c.relrowsecurity
UNION ALL
SELECT 'a function of its own called by', pg_describe_object(f.classid, f.objid, 0)
    FROM code AS f WHERE EXISTS (
        SELECT FROM pg_depend AS d WHERE d.classid = f.classid AND d.objid = f.objid
            AND d.refclassid = 'pg_class'::regclass AND d.refobjid IN (SELECT oid FROM own))
UNION ALL
SELECT 'function', p.oid::regprocedure::text
    FROM pg_depend AS d JOIN pg_proc AS p ON p.oid = d.objid
    WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjsubid = 0
        AND d.refobjid = to_regnamespace(current_schema())::oid
        AND d.classid = 'pg_proc'::regclass
        AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype)
UNION ALL
SELECT 'operator', d.objid::regoperator::text FROM pg_depend AS d
    WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjsubid = 0
        AND d.refobjid = to_regnamespace(current_schema())::oid
        AND d.classid = 'pg_operator'::regclass
UNION ALL
SELECT 'a column of its own type', c.relname::text || '.' || a.attname::text
    FROM own AS c JOIN pg_depend AS t ON t.classid = 'pg_class'::regclass AND t.objid = c.oid
        AND t.objsubid > 0
    JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = t.objsubid
    WHERE t.refclassid::int8 = 'pg_type'::regclass::oid::int8 AND t.refobjid::int8 >= 16384
"""

PREVIOUS_GUARD = (
    "SELECT CAST('agentrt refuses this schema: ' || string_agg(kind || ' ' || name, ', ') "
    f"AS integer) FROM ({PREVIOUS_UNSAFE}) AS unsafe (kind, name)"
)


@contextlib.contextmanager
def previous_guard() -> Iterator[None]:
    """The store's transactions, while inside, sending decision 0157's guard."""
    from agentrt._store.postgres import _tx
    from agentrt._store.postgres._connection import translate

    guard, first = _tx.GUARD, dict(_tx._GUARDED_FIRST)
    inside = translate(guard)  # as the run's lock carries it
    if any(inside not in v for v in first.values()):
        raise SystemExit("the run's lock no longer carries the guard this benchmark swaps")
    _tx.GUARD = PREVIOUS_GUARD  # type: ignore[misc]
    previous = translate(PREVIOUS_GUARD)
    _tx._GUARDED_FIRST = {k: v.replace(inside, previous) for k, v in first.items()}
    try:
        yield
    finally:
        _tx.GUARD = guard  # type: ignore[misc]
        _tx._GUARDED_FIRST = first


@contextlib.contextmanager
def without_the_lock(store: agentrt.Store) -> Iterator[None]:
    """The store's write transactions, while inside, sending `SELECT 1` where they lock the
    store's tables (decision 0172): a step's cost of the lock is the difference, plus a
    `SELECT 1`'s (15-16 µs of server CPU alone)."""
    lock = store._lock_tables  # type: ignore[attr-defined]
    store._lock_tables = "SELECT 1"  # type: ignore[attr-defined]
    try:
        yield
    finally:
        store._lock_tables = lock  # type: ignore[attr-defined]


class ServerCpu:
    """The CPU seconds of the backend serving `store`'s connection, read from `/proc` when the
    server runs here (`schedstat`'s nanoseconds, else `stat`'s user and system ticks);
    `read()` is None otherwise."""

    def __init__(self, store: agentrt.Store) -> None:
        pid = store._pg.info.backend_pid  # type: ignore[attr-defined]
        self.path = f"/proc/{pid}/stat"
        self.schedstat = f"/proc/{pid}/schedstat"
        self.tick = os.sysconf("SC_CLK_TCK")

    def read(self) -> float | None:
        try:
            with open(self.path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        if fields[0] == "Z":  # not the backend
            return None
        try:
            with open(self.schedstat) as f:
                return int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return (int(fields[11]) + int(fields[12])) / self.tick


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
def other_tables(url: str, count: int) -> Iterator[None]:
    """`count` tables of another application in a schema of their own, while inside."""
    if not count:
        yield
        return
    import psycopg
    from psycopg import sql

    schema = sql.Identifier(f"pgcpu_other_{os.getpid()}_{uuid.uuid4().hex[:6]}")
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        try:
            with admin.transaction():
                for n in range(count):
                    table = sql.Identifier(f"t{n}")
                    admin.execute(
                        sql.SQL("CREATE TABLE {}.{} (id bigint PRIMARY KEY, v text)").format(
                            schema, table
                        )
                    )
            yield
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))


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


def figures(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values) + f" (median {statistics.median(values):.0f})"


def guards_alone(store: agentrt.Store, server_cpu: ServerCpu, times: int) -> str:
    """Each guard's statement alone on the store's connection, prepared (as the store's
    are), `times` times, alternating twice: the server's CPU of one (`--guards`)."""
    from agentrt._store.postgres import _migrations

    conn = store._pg  # type: ignore[attr-defined]
    statements = {"0157": PREVIOUS_GUARD, "this": _migrations.GUARD, "SELECT 1": "SELECT 1"}
    spent: dict[str, list[float]] = {name: [] for name in statements}
    for _ in range(2):
        for name, sql in statements.items():
            for _ in range(10):  # prepared from the sixth on
                conn.execute(sql, prepare=True).fetchall()
            before = server_cpu.read()
            for _ in range(times):
                conn.execute(sql, prepare=True).fetchall()
            after = server_cpu.read()
            if before is not None and after is not None:
                spent[name].append((after - before) / times * 1e6)
    return f"the guard alone, prepared, {times} times, twice: server CPU µs " + ", ".join(
        f"{name} " + " ".join(f"{v:.0f}" for v in values) for name, values in spent.items()
    )


def lock_alone(store: agentrt.Store, server_cpu: ServerCpu, times: int, rounds: int) -> str:
    """A write transaction's opening (`BEGIN`, the tables' lock, the guard, prepared as the
    store's statements are; then `ROLLBACK`), with and without the tables' lock and the
    guard, `times` times a round, the rounds alternating: the server's CPU of one
    (`--lock`). Each statement is sent alone (the store pipelines them): the server's work
    is the same. The guard's cost follows the catalogs' dead rows (a test server's churn),
    the lock's does not (its names are found in the catalog's cache)."""
    from agentrt._store.postgres import _migrations

    conn = store._pg  # type: ignore[attr-defined]
    lock = store._lock_tables  # type: ignore[attr-defined]
    begin = "BEGIN ISOLATION LEVEL READ COMMITTED"
    kinds = {
        "BEGIN, ROLLBACK": [begin],
        "with the lock": [begin, lock],
        "with the guard": [begin, _migrations.GUARD],
        "with the lock and the guard": [begin, lock, _migrations.GUARD],
    }
    spent: dict[str, list[float]] = {name: [] for name in kinds}

    def opening(sent: list[str]) -> None:
        conn.execute(sent[0])  # BEGIN
        for sql in sent[1:]:
            conn.execute(sql, prepare=True)
        conn.execute("ROLLBACK")

    for _ in range(rounds):
        for name, sent in kinds.items():
            for _ in range(10):  # prepared from the sixth on
                opening(sent)
            before = server_cpu.read()
            for _ in range(times):
                opening(sent)
            after = server_cpu.read()
            if before is not None and after is not None:
                spent[name].append((after - before) / times * 1e6)
    return (
        f"a write transaction's opening, {times} times, {rounds} rounds: server CPU µs "
        + "; ".join(f"{name} " + figures(v) for name, v in spent.items() if v)
    )


def statement_cpu(store: agentrt.Store, tool: object, steps: int) -> str:
    """The server's CPU of each statement of a `steps`-step run, a step's share (`--statements`)."""
    import collections
    import re

    import psycopg

    conn = store._pg  # type: ignore[attr-defined]
    try:
        conn.execute("SET log_statement_stats = on")
    except psycopg.errors.InsufficientPrivilege:
        return "statements: n/a (log_statement_stats needs a superuser)"
    reports: list[str] = []

    def keep(notice: Any) -> None:
        reports.append(f"{notice.message_primary}\n{notice.message_detail or ''}")

    conn.execute("SET log_statement = 'all'")
    conn.execute("SET client_min_messages = log")
    conn.add_notice_handler(keep)
    try:
        bench.run_once(store, tool, steps)  # type: ignore[arg-type]
    finally:
        conn.remove_notice_handler(keep)
        for setting in ("client_min_messages", "log_statement", "log_statement_stats"):
            conn.execute(f"RESET {setting}")
    # A statement's text is logged when its Execute (or simple Query) message arrives: its
    # Parse and Bind messages were reported before it, its Execute's report after it.
    spent: collections.Counter[tuple[str, str]] = collections.Counter()
    statement = "?"
    pending: list[tuple[str, float]] = []
    for report in reports:
        if report.startswith(("statement: ", "execute ")):
            statement = " ".join(report.split("\n", 1)[0].split(": ", 1)[-1].split())[:64]
            for phase, seconds in pending:
                spent[(phase, statement)] += seconds
            pending.clear()
            continue
        used = re.search(r"!\s+([\d.]+) s user, ([\d.]+) s system", report)
        if used:
            phase = report.split()[0].lower()  # PARSE, BIND, EXECUTE, QUERY
            seconds = float(used[1]) + float(used[2])
            if phase in ("parse", "bind"):
                pending.append((phase, seconds))
            else:
                spent[(phase, statement)] += seconds
    for phase, seconds in pending:
        spent[(phase, "?")] += seconds
    total = sum(spent.values())
    lines = [f"server CPU by statement (log_statement_stats): {total / steps * 1e6:.0f} µs/step"]
    for (phase, text), seconds in spent.most_common():
        if seconds / steps * 1e6 >= 1:
            lines.append(f"  {seconds / steps * 1e6:6.1f} {phase:8} {text}")
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
    parser.add_argument(
        "--guards", action="store_true", help="alternate decision 0157's guard and this one's"
    )
    parser.add_argument("--other-tables", type=int, default=0, metavar="N")
    parser.add_argument(
        "--statements", action="store_true", help="the server's CPU of each statement"
    )
    parser.add_argument(
        "--lock", action="store_true", help="a transaction's opening with and without its lock"
    )
    parser.add_argument(
        "--times", type=int, default=2000, help="each statement alone (--guards, --lock)"
    )
    args = parser.parse_args(argv)
    if args.times < 1:
        parser.error("--times must be at least 1")

    if args.guards and args.sqlite:
        parser.error("--guards is PostgreSQL's")
    opened = sqlite_store() if args.sqlite else postgres_store(args.url)
    others = contextlib.nullcontext() if args.sqlite else other_tables(args.url, args.other_tables)
    tool = bench.make_tool("")
    # Each round's guard: this one ("this"), or with `--guards` the rounds alternating between
    # it and decision 0157's ("0157"), the previous first.
    kinds = ["0157", "this"] if args.guards else ["SELECT 1", "this"] if args.lock else ["this"]
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    server: dict[str, list[float]] = {k: [] for k in kinds}
    with others, opened as store:
        server_cpu = None if args.sqlite else ServerCpu(store)
        bench.run_once(store, tool, args.warm)
        profile = cProfile.Profile(time.thread_time) if args.profile else None
        for round_ in range(args.rounds * len(kinds)):
            kind = kinds[round_ % len(kinds)]
            finding = previous_guard() if kind == "0157" else contextlib.nullcontext()
            if kind == "SELECT 1":
                finding = without_the_lock(store)
            with finding:
                if profile is not None:
                    profile.enable()
                before = None if server_cpu is None else server_cpu.read()
                sample = bench.run_once(store, tool, args.steps)
                after = None if server_cpu is None else server_cpu.read()
                if profile is not None:
                    profile.disable()
            cpu[kind].append(sample.cpu / args.steps * 1e6)
            wall[kind].append(sample.wall / args.steps * 1e6)
            if before is not None and after is not None:
                server[kind].append((after - before) / args.steps * 1e6)
        if profile is not None:
            profile.dump_stats(args.profile)
        alone = guards_alone(store, server_cpu, args.times) if args.guards and server_cpu else ""
        if args.lock and server_cpu and not args.sqlite:
            alone = "\n".join(filter(None, [alone, lock_alone(store, server_cpu, args.times, 10)]))
        counted = count_trips(store, tool) if args.trips and not args.sqlite else ""
        if args.statements and not args.sqlite:
            counted = "\n".join(filter(None, [counted, statement_cpu(store, tool, args.steps)]))
    where = "SQLite file" if args.sqlite else "PostgreSQL"
    for kind in kinds:
        label = f" ({kind} guard)" if args.guards else ""
        if args.lock and not args.guards:
            label = " (the tables' lock)" if kind == "this" else " (a SELECT 1 in its place)"
        if args.other_tables:
            label += f" ({args.other_tables} other tables)"
        print(
            f"{where}{label}, {args.steps} steps x {args.rounds}: CPU µs/step "
            + figures(cpu[kind])
            + "; wall µs/step "
            + figures(wall[kind])
            + "; server CPU µs/step "
            + (figures(server[kind]) if server[kind] else "n/a")
            + f"; load {os.getloadavg()[0]:.1f}"
        )
    if args.lock and alone and not args.guards:
        print(alone)
    if args.guards:
        # The server's CPU is read in clock ticks (10 ms): a short run's median can be none.
        ratios = [
            f"{name} {statistics.median(series['0157']) / statistics.median(series['this']):.2f}x"
            if series["this"] and statistics.median(series["this"])
            else f"{name} n/a (under a clock tick)"
            for name, series in (("server CPU", server), ("client CPU", cpu), ("wall", wall))
        ]
        print("decision 0157's guard over this one's (medians): " + ", ".join(ratios))
        if alone:
            print(alone)
    if counted:
        print(counted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
