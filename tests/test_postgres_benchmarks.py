"""The PostgreSQL benchmark scripts run and print every figure (no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.postgres import server_url

ROOT = Path(__file__).resolve().parent.parent


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    """`python <args>` from the project's root, its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ},
    )


def test_the_chain_head_benchmark_prints_each_variant_and_its_ratios() -> None:
    base = server_url("the chain-head benchmark")
    done = run_script(
        "benchmarks/pg_chain_head.py",
        "--url",
        base,
        "--writers",
        "1,8",
        # A window each writer's first commit outlasts: its one commit still counts (a
        # loaded machine's 0.3 s window once counted none, and the ratios divided by zero).
        "--seconds",
        "0.000001",
        "--partitions",
        "4",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [
        line.split()
        for line in lines
        if line.split()[:1] in (["1"], ["8"]) and "against" not in line
    ]
    assert [r[0] for r in rows] == ["1", "8"]
    # three figures, two ratios against chain off, three against one writer
    assert all(len(r) == 9 and all(x.endswith("x") for x in r[4:]) for r in rows)
    assert any(line.startswith("8 writers against 1 (target >= 4x): on ") for line in lines)


def test_the_follow_benchmark_prints_latency_idle_cost_writers_and_loss() -> None:
    base = server_url("the follow benchmark")
    done = run_script(
        "benchmarks/follow.py",
        "--postgres",
        base,
        "--commits",
        "3",
        "--idle",
        "0.3",
        "--writers",
        "2",
        "--seconds",
        "0.3",
        # The smallest waits and counts: 5-20 ms between commits (not 30-250), 50 idle
        # reads back to back (not 5,000), 0.3 s for a notification that never comes.
        *("--gaps", "5,20", "--burst", "50", "--loss-wait", "0.3"),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "1. latency, commit to sink: 3 commits of one event, 5-20 ms apart" in lines
    latency = [line.split() for line in lines if line.startswith(("poll ", "LISTEN/NOTIFY "))]
    # four followers, each with a median, a 95th percentile, a worst and a ratio to LISTEN's
    assert [r[:2] if r[0] == "poll" else r[:1] for r in latency] == [
        ["poll", "0.5"],
        ["poll", "0.1"],
        ["poll", "0.02"],
        ["LISTEN/NOTIFY"],
    ]
    assert all(r[-1].endswith("x") and len(r) == (7 if r[0] == "poll" else 5) for r in latency)
    idle = [line.split() for line in lines if line.startswith(("postgres ", "sqlite "))]
    assert [(r[0], r[2] if r[1] == "poll" else r[1]) for r in idle] == [
        ("postgres", "0.5"),
        ("postgres", "0.1"),
        ("postgres", "0.02"),
        ("postgres", "LISTEN/NOTIFY"),
        ("sqlite", "0.5"),
        ("sqlite", "0.1"),
        ("sqlite", "0.02"),
    ]
    assert all(r[-1] == "-" for r in idle if r[0] == "sqlite")
    read = [line for line in lines if line.startswith(("postgres: one idle read", "sqlite: one"))]
    assert len(read) == 2 and "of its server backend's" in read[0]
    assert all(
        line.endswith("(median over the poll rows, 50 reads back to back each)") for line in read
    )
    writers = [line.split() for line in lines if line.split()[:1] == ["2"]]
    # three rates, then four ratios; at the server's own flush, then at a slower one
    assert [r[0] for r in writers] == ["2", "2"]
    assert all(len(r) == 8 and all(x.endswith("x") for x in r[4:]) for r in writers)
    held = [line for line in lines if line.startswith("notify, ")]
    assert [line.split()[1] for line in held] == ["2", "2"]
    assert all("the notification queue's lock held in " in line for line in held)
    loss = [line for line in lines if line.startswith("4. a listener's connection ended")]
    # what a dropped listener misses is found by one read on reconnecting: always so
    assert len(loss) == 1 and "0 notification(s) reached it" in loss[0]
    assert loss[0].endswith("found 1 event(s)")
    assert sum("load " in line for line in lines) >= 5


def test_the_concurrency_benchmark_runs_processes_on_postgres_and_drops_its_schemas() -> None:
    import psycopg

    base = server_url("the concurrency benchmark on PostgreSQL")
    done = run_script(
        "benchmarks/concurrency.py",
        *("--proc-steps", "2", "--postgres", base, "--pg-procs", "2", "--pg-runs", "2"),
        "--only-postgres",  # (a) and (b) on SQLite: test_benchmarks.py
    )
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    heading = next(line for line in lines if line.startswith("(c) PostgreSQL ("))
    assert "processes x 2 runs in flight, 2 steps each, one schema" in heading
    for procs, runs in ((1, 2), (2, 4)):
        row = next(line for line in lines if line.startswith(f"{procs} process(es): "))
        # every run a process was told COMPLETED is in the record with its steps and events
        assert (
            f"; exceptions 0; {runs} of {runs} runs returned COMPLETED in the record with "
            "their steps and events: met"
        ) in row, row
    assert any(
        line.startswith("2 processes: the machine's CPU per step ") and "x one process" in line
        for line in lines
    )
    assert not any(line.startswith("8 processes over one") for line in lines)
    assert not any(line.startswith(("(a) ", "(b) ")) for line in lines)
    with psycopg.connect(base, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'concurrency\\_%'"
        ).fetchone()
    assert left == (0,)


def test_the_step_cpu_benchmark_counts_a_steps_round_trips_and_statements() -> None:
    base = server_url("the step CPU benchmark")
    done = run_script(
        "benchmarks/pg_step_cpu.py",
        base,
        "--steps",
        "3",
        "--warm",
        "2",
        "--rounds",
        "1",
        "--trips",
        "--statements",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("PostgreSQL, 3 steps x 1: CPU µs/step "), lines
    # Decision 0108's count, as tests/test_postgres_round_trips.py pins it; each of the
    # two transactions' tables locked before its guard (decision 0172) in the same trip.
    assert lines[1].startswith(
        "round trips a step 10.00 (5.00 of them pipelines); statements a step 17.00:"
    ), lines
    assert any(line.split()[1:3] == ["BEGIN", "ISOLATION"] for line in lines[2:]), lines
    # The server here: its backend's CPU is read from /proc (decision 0112).
    assert "; server CPU µs/step " in lines[0] and "server CPU µs/step n/a" not in lines[0]
    # Each statement's server CPU (the test server's role is a superuser): a step's COMMITs.
    by_statement = lines.index(
        next(line for line in lines if line.startswith("server CPU by statement "))
    )
    after = lines[by_statement + 1 :]
    assert any(line.split()[1:] == ["execute", "COMMIT"] for line in after), lines


def test_the_step_cpu_benchmark_compares_the_two_schema_guards_and_drops_what_it_made() -> None:
    import psycopg

    base = server_url("the step CPU benchmark")
    args = ["--steps", "3", "--warm", "2", "--rounds", "2", "--guards", "--other-tables", "3"]
    args += ["--times", "20"]  # each guard alone 20 times, not 2,000: the figures mean nothing
    script = subprocess.Popen(
        [sys.executable, "benchmarks/pg_step_cpu.py", base, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    out, err = script.communicate(timeout=300)
    assert script.returncode == 0, err
    lines = out.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "PostgreSQL (0157 guard) (3 other tables), 3 steps x 2",
        "PostgreSQL (this guard) (3 other tables), 3 steps x 2",
        "decision 0157's guard over this one's (medians)",
        "the guard alone, prepared, 20 times, twice",
    ], lines
    for line in lines[:2]:
        server = line.split("; server CPU µs/step ", 1)[1].split(" (median", 1)[0]
        assert len(server.split()) == 2, line  # one figure a round of that guard
    assert lines[2].split(": ", 1)[1].startswith("server CPU "), lines
    alone = lines[3].split(": server CPU µs ", 1)[1].split(", ")
    assert [each.rsplit(" ", 2)[0] for each in alone] == ["0157", "this", "SELECT 1"], lines
    # The store's schema and the other tables' are dropped (both named by the script's pid).
    with psycopg.connect(base, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s OR nspname LIKE %s",
            (f"pgcpu\\_{script.pid}\\_%", f"pgcpu\\_other\\_{script.pid}\\_%"),
        ).fetchone()
    assert left == (0,)


def test_the_open_cpu_benchmark_compares_the_checks_and_the_guards_and_drops_what_it_made() -> None:
    import psycopg

    base = server_url("the open CPU benchmark")
    args = ["--opens", "2", "--rounds", "2", "--other-schemas", "1", "--times", "10"]
    args += ["--runs", "1", "--steps", "1"]  # the figures mean nothing at these counts
    script = subprocess.Popen(
        [sys.executable, "benchmarks/pg_open_cpu.py", base, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    out, err = script.communicate(timeout=300)
    assert script.returncode == 0, err
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    heads = [re.split(r"[:(,]| {2}", line, maxsplit=1)[0].strip() for line in lines]
    assert heads == [
        "server CPU of one open_store",
        "round 1",
        "round 2",
        "medians",
        "server CPU of an open and a run of 1 tool steps on it",
        "round 1",
        "round 2",
        "medians",
        "each statement alone",
        "_UNSAFE",
        "_ANY_UNSAFE",
        "_FOUND",
        "SELECT 1",
    ], lines
    assert "saved" in lines[3] and "saved" in lines[7], lines
    for line in lines[9:]:
        assert [w for w in line.split() if w in ("first", "unprepared", "prepared")] == [
            "first",
            "unprepared",
            "prepared",
        ], line
    # The store's schema and the other stores' are dropped (all named by the script's pid).
    with psycopg.connect(base, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s",
            (f"pgopen\\_{script.pid}\\_%",),
        ).fetchone()
    assert left == (0,)
