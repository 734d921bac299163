"""What the MCP proxy's `unsettled_requests(tool)` reads and costs on a large proxy record.

Before each mutating call the proxy asks the store for the tool's calls whose outcome
may be unknown (`Store.unsettled_requests`: the latest row of each request key of the
tool whose run is RUNNING or WAITING_FOR_APPROVAL, or ended with one of the endings
that leave a call open). This fills a record with `--rows` `proxy_requests` rows (by
default 100,000: 50 tools of 2,000 rows and one, `small`, of 100; two rows per request
key, the keys' rows interleaved at random; a run each, its id shaped as `new_id()`'s).
Of the keys' latest runs a share `--open` (default 0.3%) is open or nearly: a fifth
each RUNNING, ended approval_expired, limit_steps, goal_failed given up (all open) and
goal_failed otherwise (not open); 20 more WAITING_FOR_APPROVAL on a pending approval; the
rest completed. The same share of the older rows ended approval_expired (settled by the
key's later row). 10% of the runs have a decided approval. Statistics gathered
(`ANALYZE`; `--vacuum`: PostgreSQL's `VACUUM ANALYZE`, which sets the visibility map as
autovacuum would in time). Then, for the small tool and a big one
(`t07`), it prints the statement(s) the store really runs (traced), their plan
(SQLite's EXPLAIN QUERY PLAN; PostgreSQL's EXPLAIN (ANALYZE, BUFFERS)), the rows
found and the median and least time of `--calls` calls.

    python benchmarks/proxy_unsettled.py [--rows 100000] [--calls 31] [--open 0.003]
        [--url URL] [--only sqlite|postgres] [--vacuum] [--keep NAME [--drop]]

SQLite in a file of a temporary directory; PostgreSQL on `--url` (default
`AGENTRT_TEST_POSTGRES_URL`) in a schema of its own, dropped at the end. With
`--keep NAME` both are kept (SQLite's in the system's temporary directory, the schema
`bench_unsettled_NAME`) and reused by the next run with the same name, so another
tree's code can be measured on the same record (`PYTHONPATH=<that tree>/src`);
`--keep NAME --drop` removes them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentrt._store import Store, open_store
from agentrt.mcp._proxy import _LEFT_OPEN_ENDINGS, GIVEN_UP_DETAIL

_AT = "2026-12-04T00:00:00.000000Z"


def _rows(
    total: int, open_share: float, seed: int = 15
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(proxy_requests rows, runs rows) in insertion order: (key, run, tool) and
    (id, status, reason, reason_detail)."""
    rng = random.Random(seed)
    small = 100
    per_tool = 2_000
    tools = [("small", small)]
    left = total - small
    n = 0
    while left > 0:
        tools.append((f"t{n:02d}", min(per_tool, left)))
        left -= per_tool
        n += 1
    keys: list[tuple[str, str]] = []
    for tool, count in tools:
        keys.extend(
            (tool, hashlib.sha256(f"{tool}\0{i}".encode()).hexdigest()) for i in range(count // 2)
        )
    # Each key's two rows, the older first, the keys' rows interleaved at random.
    order = [(tool, key, 0) for tool, key in keys] + [(tool, key, 1) for tool, key in keys]
    rng.shuffle(order)
    seen: set[str] = set()
    requests: list[tuple[Any, ...]] = []
    runs: list[tuple[Any, ...]] = []
    waiting = 0
    for tool, key, _ in order:
        latest = key in seen
        seen.add(key)
        run_id = rng.randbytes(16).hex()  # the shape of `new_id()`
        requests.append((key, run_id, tool))
        roll = rng.random() / open_share  # below 1: one of the open kinds
        if not latest:
            state = ("FAILED", "approval_expired", "") if roll < 1 else None
        elif roll < 0.2:
            state = ("RUNNING", "", "")
        elif roll < 0.4:
            state = ("FAILED", "approval_expired", "")
        elif roll < 0.6:
            state = ("FAILED", "limit_steps", "")
        elif roll < 0.8:
            state = ("FAILED", "goal_failed", GIVEN_UP_DETAIL)
        elif roll < 1:
            state = ("FAILED", "goal_failed", "the tool said no")  # not open
        elif waiting < 20 and roll < 1.2:
            waiting += 1
            state = ("WAITING_FOR_APPROVAL", "", "")
        else:
            state = None
        runs.append((run_id, *(state or ("COMPLETED", "goal_completed", ""))))
    return requests, runs


def _approvals(runs: list[tuple[Any, ...]]) -> list[tuple[str, str, str]]:
    out = []
    for i, (run_id, status, _, _) in enumerate(runs):
        if status == "WAITING_FOR_APPROVAL":
            out.append((f"a{run_id}", run_id, "pending"))
        elif i % 10 == 0:
            out.append((f"a{run_id}", run_id, "approved"))
    return out


def _fill(
    execute_many: Callable[[str, list[tuple[Any, ...]]], None], total: int, open_share: float
) -> None:
    requests, runs = _rows(total, open_share)
    execute_many(
        "INSERT INTO runs (id, status, reason, reason_detail, created_at) "
        f"VALUES (?, ?, ?, ?, '{_AT}')",
        runs,
    )
    execute_many(
        f"INSERT INTO approvals (id, run_id, status, created_at) VALUES (?, ?, ?, '{_AT}')",
        list(_approvals(runs)),
    )
    execute_many(
        "INSERT INTO proxy_requests (request_key, run_id, tool, side_effect, created_at) "
        f"VALUES (?, ?, ?, 'remote_mutation', '{_AT}')",
        requests,
    )


def _bench_sqlite_path(keep: str) -> Path:
    """The kept SQLite record, in a directory only its owner can write (the store's rule)."""
    directory = Path(tempfile.gettempdir()) / f"agentrt-bench-unsettled-{keep}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory / "proxy.db"


@contextmanager
def _sqlite(
    total: int, open_share: float, keep: str
) -> Iterator[tuple[Store, Callable[[str, tuple[Any, ...]], str]]]:
    with tempfile.TemporaryDirectory() as d:
        path = _bench_sqlite_path(keep) if keep else Path(d) / "proxy.db"
        if not path.exists():
            store = open_store(path)
            store.migrate_proxy(datetime.now(UTC))
            store.close()
            conn = sqlite3.connect(path)
            _fill(conn.executemany, total, open_share)
            conn.commit()
            conn.execute("ANALYZE")
            conn.close()
        store = open_store(path)

        def plan(sql: str, params: tuple[Any, ...]) -> str:
            rows = store.query("EXPLAIN QUERY PLAN " + sql, params)
            return "\n".join(str(tuple(r)[-1]) for r in rows)

        try:
            yield store, plan
        finally:
            store.close()


@contextmanager
def _postgres(
    url: str, total: int, open_share: float, keep: str, vacuum: bool
) -> Iterator[tuple[Store, Callable[[str, tuple[Any, ...]], str]]]:
    import psycopg

    from agentrt._store.postgres._connection import translate

    schema = f"bench_unsettled_{keep or uuid.uuid4().hex[:8]}"
    target = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    try:
        with psycopg.connect(url) as conn:
            made = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()
        if made is None:
            store = open_store(target)
            store.migrate_proxy(datetime.now(UTC))
            store.close()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"SET search_path TO {schema}")
                with conn.cursor() as cur, conn.transaction():
                    _fill(
                        lambda sql, rows: cur.executemany(translate(sql), rows),
                        total,
                        open_share,
                    )
                # `--vacuum`: the visibility map autovacuum sets in time, too
                conn.execute("VACUUM ANALYZE" if vacuum else "ANALYZE")
        store = open_store(target)

        def plan(sql: str, params: tuple[Any, ...]) -> str:
            with psycopg.connect(url) as conn:
                conn.execute(f"SET search_path TO {schema}")
                rows = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS) " + translate(sql), params
                ).fetchall()
                return "\n".join(str(r[0]) for r in rows)

        try:
            yield store, plan
        finally:
            store.close()
    finally:
        if not keep:
            _drop_schema(url, schema)


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _measure(
    name: str, store: Store, plan: Callable[[str, tuple[Any, ...]], str], calls: int
) -> None:
    read = store._query  # type: ignore[attr-defined]  # the store's one read path
    for tool in ("small", "t07"):
        seen: list[tuple[str, tuple[Any, ...]]] = []

        def tracing(sql: str, params: Any = (), _seen: list[Any] = seen) -> Any:
            _seen.append((sql, tuple(params)))
            return read(sql, params)

        store._query = tracing  # type: ignore[attr-defined]
        found = store.unsettled_requests(tool, _LEFT_OPEN_ENDINGS)
        store._query = read  # type: ignore[attr-defined]
        count = store.query("SELECT count(*) FROM proxy_requests WHERE tool = ?", (tool,))
        print(f"== {name}, tool {tool!r} ({next(iter(count[0]))} rows): {len(found)} found")
        for sql, params in seen:
            print(sql)
            print(plan(sql, params))
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            store.unsettled_requests(tool, _LEFT_OPEN_ENDINGS)
            times.append(time.perf_counter() - start)
        print(
            f"-- {name} {tool}: median {statistics.median(times) * 1000:.2f} ms, "
            f"min {min(times) * 1000:.2f} ms, of {calls} calls\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=31)
    parser.add_argument("--open", type=float, default=0.003)
    parser.add_argument("--keep", default="", help="keep (and reuse) the record under NAME")
    parser.add_argument("--vacuum", action="store_true", help="PostgreSQL: VACUUM ANALYZE")
    parser.add_argument("--drop", action="store_true", help="drop the --keep record and end")
    parser.add_argument("--url", default=os.environ.get("AGENTRT_TEST_POSTGRES_URL", ""))
    parser.add_argument("--only", choices=("sqlite", "postgres"))
    args = parser.parse_args()
    import agentrt

    if args.drop:
        shutil.rmtree(_bench_sqlite_path(args.keep).parent)
        if args.url:
            _drop_schema(args.url, f"bench_unsettled_{args.keep}")
        return
    print(f"agentrt from {Path(agentrt.__file__).parent}; {args.rows} proxy_requests rows")
    if args.only != "postgres":
        with _sqlite(args.rows, args.open, args.keep) as (store, plan):
            _measure("sqlite", store, plan, args.calls)
    if args.only != "sqlite":
        if not args.url:
            print("postgres: no --url and no AGENTRT_TEST_POSTGRES_URL; skipped")
            return
        with _postgres(args.url, args.rows, args.open, args.keep, args.vacuum) as (store, plan):
            _measure("postgres", store, plan, args.calls)


if __name__ == "__main__":
    main()
