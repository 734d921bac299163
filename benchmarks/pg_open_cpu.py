"""The server's CPU of opening a PostgreSQL store, before and after decision 0217, in one run.

Every process or CLI command against PostgreSQL opens a store, and the test suite opens
about two a PostgreSQL test; each open runs the schema's safety check (`check_schema`,
decision 0172 and its neighbours) on a new connection, whose backend has none of the
catalogs' rows cached and plans every statement afresh.

The script opens a store in a schema of its own (after `--other-schemas` other stores,
default 20, as a database the test suite or several applications share holds: neither
check should read them), then alternates `--rounds` rounds (default 5) of `--opens`
(default 200) `agentrt.open_store` calls, one round with the check as it was before
decision 0217 (`_UNSAFE` alone, which names what it finds) and the next with the check as
it is (`_ANY_UNSAFE`, then `_UNSAFE` only when it says yes), and prints the server's CPU of
one open: the whole life of the open's backend until the store is closed (its connection's
start included), read from `/proc/<pid>/schedstat` (nanoseconds) when the server runs on
this machine. Then each statement alone, on a new connection (its first statement) and on
a warm one (unprepared and prepared, `--times` each, default 200), and `SELECT 1`'s, and
the transaction's guard (`_FOUND`, decision 0167) for comparison.

    python benchmarks/pg_open_cpu.py [URL] [--opens N] [--rounds N] [--other-schemas N]
                                      [--times N]

The URL defaults to `AGENTRT_TEST_POSTGRES_URL`, else postgresql://root@127.0.0.1:5432/test
(run `VACUUM` on it first: the catalogs' statistics steer both plans).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import driver as bench

import agentrt
from agentrt._store.postgres import _migrations, _store, _tx
from agentrt._store.postgres._connection import connect, parse_target


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), ("schema", schema)])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def backend_cpu(pid: int) -> float:
    """The backend's CPU seconds so far (`/proc/<pid>/schedstat`'s nanoseconds)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def previous_check(conn: Any) -> None:
    """`check_schema` before decision 0217: `_UNSAFE` alone."""
    _migrations._refuse_unsafe(conn.execute(_migrations._UNSAFE).fetchall())


@contextlib.contextmanager
def checking_with(check: Callable[[Any], None]) -> Iterator[None]:
    """Opens, while inside, checking the schema with `check`."""
    # The name as each module holds it (`_store` imported it from `_migrations`).
    spaces = (vars(_migrations), vars(_store))
    saved = [space["check_schema"] for space in spaces]
    for space in spaces:
        space["check_schema"] = check
    try:
        yield
    finally:
        for space, kept in zip(spaces, saved, strict=True):
            space["check_schema"] = kept


def open_cpu(url: str, opens: int) -> float:
    """The median server CPU (µs) of one `open_store` of `url`, over `opens` opens."""
    spent = []
    for _ in range(opens):
        store = agentrt.open_store(url)
        pid = store._pg.info.backend_pid  # type: ignore[attr-defined]
        spent.append(backend_cpu(pid) * 1e6)
        store.close()
    return statistics.median(spent)


def run_cpu(url: str, runs: int, steps: int, tool: agentrt.Tool) -> float:
    """The median server CPU (µs) of an open and a run of `steps` tool steps on the store it
    opened (`benchmarks/driver.py`'s `run_once`: `steps` + 1 steps, two write transactions a
    step), over `runs` such opens."""
    spent = []
    for _ in range(runs):
        store = agentrt.open_store(url)
        pid = store._pg.info.backend_pid  # type: ignore[attr-defined]
        bench.run_once(store, tool, steps)
        spent.append(backend_cpu(pid) * 1e6)
        store.close()
    return statistics.median(spent)


@contextlib.contextmanager
def guard_prepared(prepared: bool) -> Iterator[None]:
    """The transactions' guard, while inside, prepared from its first use (`True`, decision
    0217) or at psycopg's fifth (as before)."""
    saved = _tx.PREPARE_GUARD
    _tx.PREPARE_GUARD = True if prepared else None
    try:
        yield
    finally:
        _tx.PREPARE_GUARD = saved


def statement_cpu(url: str, sql: str, times: int) -> tuple[float, float, float]:
    """`sql`'s server CPU (µs): its median as a new connection's first statement (after the
    store's session settings), then warm unprepared and warm prepared (means)."""
    target = parse_target(url)
    first = []
    for _ in range(max(times // 4, 10)):
        conn = connect(target)
        pid = conn.info.backend_pid
        before = backend_cpu(pid)
        conn.execute(sql, prepare=False).fetchall()
        first.append((backend_cpu(pid) - before) * 1e6)
        conn.close()
    conn = connect(target)
    try:
        pid = conn.info.backend_pid
        warm = []
        for prepare in (False, True):
            for _ in range(6):
                conn.execute(sql, prepare=prepare).fetchall()
            before = backend_cpu(pid)
            for _ in range(times):
                conn.execute(sql, prepare=prepare).fetchall()
            warm.append((backend_cpu(pid) - before) * 1e6 / times)
    finally:
        conn.close()
    return statistics.median(first), warm[0], warm[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "url",
        nargs="?",
        default=os.environ.get(
            "AGENTRT_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--opens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--other-schemas", type=int, default=20)
    parser.add_argument("--times", type=int, default=200)
    parser.add_argument("--runs", type=int, default=40, help="opens with a run, a round")
    parser.add_argument("--steps", type=int, default=3, help="tool steps of each run")
    args = parser.parse_args(argv)

    tag = f"pgopen_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    url = with_schema(args.url, tag)
    others = [with_schema(args.url, f"{tag}_other{n}") for n in range(args.other_schemas)]
    made: list[str] = []
    try:
        for other in [*others, url]:
            agentrt.open_store(other).close()
            made.append(other)
        store = agentrt.open_store(url)
        if not os.path.exists(f"/proc/{store._pg.info.backend_pid}/schedstat"):  # type: ignore[attr-defined]
            store.close()
            print("the server does not run on this machine: its CPU cannot be read")
            return 2
        store.close()

        checks = {"before (_UNSAFE alone)": previous_check, "after (_ANY_UNSAFE first)": None}
        per_open: dict[str, list[float]] = {name: [] for name in checks}
        print(f"server CPU of one open_store, µs (median of {args.opens} opens a round):")
        for n in range(args.rounds):
            for name, check in checks.items():
                with checking_with(check) if check else contextlib.nullcontext():
                    per_open[name].append(open_cpu(url, args.opens))
            print(
                f"  round {n + 1}: "
                + ", ".join(f"{name} {per_open[name][-1]:,.0f}" for name in checks)
            )
        medians = {name: statistics.median(v) for name, v in per_open.items()}
        before, after = medians.values()
        print(
            "  medians: "
            + ", ".join(f"{name} {m:,.0f}" for name, m in medians.items())
            + f"; saved {before - after:,.0f} µs an open ({before / after:.2f}x)"
        )

        tool = bench.make_tool("")
        print(
            f"\nserver CPU of an open and a run of {args.steps} tool steps on it, µs (median of "
            f"{args.runs} a round), the transactions' guard prepared at its fifth use (before) "
            "or its first (after):"
        )
        per_run: dict[bool, list[float]] = {False: [], True: []}
        for n in range(args.rounds):
            for prepared in (False, True):
                with guard_prepared(prepared):
                    per_run[prepared].append(run_cpu(url, args.runs, args.steps, tool))
            print(
                f"  round {n + 1}: before {per_run[False][-1]:,.0f}, after {per_run[True][-1]:,.0f}"
            )
        before, after = statistics.median(per_run[False]), statistics.median(per_run[True])
        print(
            f"  medians: before {before:,.0f}, after {after:,.0f}; saved {before - after:,.0f} µs "
            f"a run ({before / after:.2f}x)"
        )

        print(
            f"\neach statement alone, server CPU µs: first on a new connection "
            f"(median), then warm unprepared and prepared (mean of {args.times}):"
        )
        for name, sql in (
            ("_UNSAFE (the check before)", _migrations._UNSAFE),
            ("_ANY_UNSAFE (the check now)", _migrations._ANY_UNSAFE),
            ("_FOUND (a transaction's guard)", _migrations._FOUND),
            ("SELECT 1", "SELECT 1"),
        ):
            first, unprepared, once_prepared = statement_cpu(url, sql, args.times)
            print(
                f"  {name:32s} first {first:7,.0f}   unprepared {unprepared:6,.0f}   "
                f"prepared {once_prepared:6,.0f}"
            )
    finally:
        for done in made:
            _store.drop_schema(done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
