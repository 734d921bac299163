"""The benchmark scripts run, print every figure, and measure what they say they measure.

No timing is asserted here (figures are for `benchmarks/`, not for pass/fail):
these tests keep the scripts working, and check that the schema replay writes
the rows and events a real step writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import agentrt
from support.once import once, run_folder

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def test_the_driver_benchmark_prints_every_figure_and_the_verdicts(tmp_path: Path) -> None:
    # The smallest sizes (runs of 2, 4 and 8 steps, 3 commits a floor): every figure and
    # verdict is printed whatever the sizes; 10, 100 and 400 steps cost 8x the CPU.
    done = run_script(
        "benchmarks/driver.py",
        *("--repeats", "1", "--steps", "2,4,8", "--commits", "3", "--warm", "2"),
        *("--dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "tool steps per run: (2, 4, 8); " in lines[4]
    rows = [line.split() for line in lines if line[:5].strip() in {"2", "4", "8"}]
    # steps, observation (1 or 2 words), the entry, then 9 figures
    assert [(r[0], " ".join(r[1:-10]), r[-10]) for r in rows] == [
        (n, size, entry)
        for n in ("2", "4", "8")
        for size in ("small", "8 KiB")
        for entry in ("sync", "async")
    ]
    assert all(len(r[-9:]) == 9 and r[-1].endswith("x") for r in rows)
    for entry in ("start_sync", "await start"):
        assert sum(line.startswith("flat, ") and f"({entry})" in line for line in lines) == 2
        assert sum(line.startswith(f"vs floor ({entry}): ") for line in lines) == 1
    assert any("the schema's own SQL alone" in line for line in lines)
    (paired,) = [line for line in lines if line.startswith("async / sync : ")]
    assert len(re.findall(r"\d+\.\d\dx, ", paired)) == 5  # one ratio a figure, then the worst
    assert "target <= 1.15x: " in paired
    assert list(tmp_path.iterdir()) == []  # its databases are gone


def test_the_schema_replay_writes_what_a_driver_step_writes(tmp_path: Path) -> None:
    bench = load("driver")
    replay = bench.SchemaReplay(str(tmp_path), bench.make_tool("x" * 100), "t")
    try:
        real_step = replay.store.query(
            "SELECT id FROM steps WHERE idx = 0 AND run_id != ? ORDER BY rowid DESC LIMIT 1",
            (replay.run_id,),
        )[0]["id"]
        real_events = [
            r["type"]
            for r in replay.store.query(
                "SELECT type FROM events WHERE step_id = ? ORDER BY seq", (real_step,)
            )
        ]
        before = replay.index
        replay.measure(3)
        steps = replay.store.query(
            "SELECT id, idx, status, decision_json, policy_json, observation_json FROM steps "
            "WHERE run_id = ? AND idx >= ? ORDER BY idx",
            (replay.run_id, before),
        )
        real = replay.store.query(
            "SELECT decision_json, policy_json, observation_json FROM steps WHERE id = ?",
            (real_step,),
        )[0]
        assert [s["idx"] for s in steps] == [before, before + 1, before + 2]
        for step in steps:
            assert step["status"] == "done"
            assert tuple(step)[3:] == tuple(real)  # the real run's texts, so the real sizes
            replayed = [
                r["type"]
                for r in replay.store.query(
                    "SELECT type FROM events WHERE step_id = ? ORDER BY seq", (step["id"],)
                )
            ]
            assert (
                replayed
                == real_events
                == [
                    "step.started",
                    "step.decided",
                    "step.policy",
                    "step.tool_started",
                    "step.tool_finished",
                ]
            )
        (run,) = replay.store.query(
            "SELECT step_count, active_ms FROM runs WHERE id = ?", (replay.run_id,)
        )
        assert tuple(run) == (replay.index, replay.index)
    finally:
        replay.close()


def statement_shapes(sql: str) -> str:
    """A traced statement with its values taken out: quoted texts and numbers made `?`."""
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    return " ".join(re.sub(r"\b\d+\b", "?", sql).split())


def test_the_schema_replay_runs_the_statements_of_a_driver_step(tmp_path: Path) -> None:
    """Statement for statement what a real step runs on its store's connection (a run of
    four steps traced, less one of three), but the schema check at each `BEGIN`: the
    runtime's safety, not the file format's cost. A change to the store's statements
    fails here until the replay follows it."""
    from collections import Counter

    from agentrt._store.sqlite import SqliteStore

    bench = load("driver")

    def a_run_traced(steps: int) -> Counter[str]:
        store = agentrt.open_store(tmp_path / f"run{steps}.db")
        assert isinstance(store, SqliteStore)
        try:
            bench.run_once(store, bench.make_tool(""), 2)
            seen: Counter[str] = Counter()
            store._conn.set_trace_callback(lambda sql: seen.update([statement_shapes(sql)]))
            bench.run_once(store, bench.make_tool(""), steps)
            store._conn.set_trace_callback(None)
            return seen
        finally:
            store.close()

    real = a_run_traced(4) - a_run_traced(3)
    replay = bench.SchemaReplay(str(tmp_path), bench.make_tool(""), "t")
    try:
        replayed: Counter[str] = Counter()
        replay.conn.set_trace_callback(lambda sql: replayed.update([statement_shapes(sql)]))
        replay.step()
        replay.conn.set_trace_callback(None)
    finally:
        replay.close()
    assert real - replayed == Counter({"PRAGMA schema_version": 2})
    assert replayed - real == Counter()
    assert real["BEGIN IMMEDIATE"] == real["COMMIT"] == 2


def test_the_phase_timer_prints_every_phase(tmp_path: Path) -> None:
    done = run_script(
        "benchmarks/step_phases.py", "--steps", "20", "--runs", "1", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    labels = [line.split(None, 1)[1] for line in done.stdout.splitlines()[1:]]
    assert labels[:3] == [
        "in-loop wall time per step (timers included)",
        "SQL: COMMIT",
        "SQL: every other statement",
    ]
    assert {
        "step started: read, limits, claim kept (begin_step)",
        "decided: kept (record_decision)",
        "tx  claim, decision, tool started (start_tool)",
        "tx  tool finished (finish_tool)",
        "the tool call (invoke)",
    } <= {label.strip() for label in labels}


def test_a_run_is_driven_through_either_entry_point(tmp_path: Path) -> None:
    bench = load("driver")
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        for entry in ("sync", "async"):
            sample = bench.run_once(store, bench.make_tool(""), 5, entry=entry)
            assert sample.wall > sample.loop > 0 and sample.cpu > 0
        runs = store.list_runs()
        assert [(r.status, r.step_count) for r in runs] == [("COMPLETED", 6)] * 2
    finally:
        store.close()


@pytest.mark.slow
def test_the_pattern_benchmark_measures_every_engine_it_names() -> None:
    done = run_script("benchmarks/patterns.py", "--max-backtrack", "16")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for engine in ("re ", "re2 ", "agentrt (re2)"):
        assert sum(line.startswith(engine) for line in lines) == 2, engine
    assert any(line.startswith("'^(a+)+$' against") for line in lines)


@pytest.mark.slow
def test_the_tool_thread_benchmark_prints_each_way_of_calling_a_plain_tool() -> None:
    done = run_script("benchmarks/tool_threads.py", "--calls", "20")
    assert done.returncode == 0, done.stderr
    names = [line.rsplit(None, 2)[0] for line in done.stdout.splitlines()]
    assert names == ["pool thread (old)", "kept daemon thread", "invoke, whole"]


def test_the_store_safety_benchmark_prints_every_figure(tmp_path: Path) -> None:
    done = run_script(
        "benchmarks/store_safety.py",
        *("--repeats", "1", "--runs", "300", "--steps", "50", "--mb", "1"),
        *("--dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for figure in (
        "unchanged schema (one PRAGMA schema_version)",
        "share of that transaction (unchanged)",
        "list_runs(100)",
        "PRAGMA quick_check",
        "PRAGMA integrity_check",
        "stored_values.body                                       1.0 MB",
        "of which free pages",
    ):
        assert figure in out, figure
    # Each large value stored once (decision 0084): allowed, echoed, and approved alike.
    stored = "large values stored                                      1.0 MB = 1.0x"
    assert out.count(stored) == 3, out
    assert "steps.decision_json" not in out and "events.payload_json" not in out
    assert list(tmp_path.iterdir()) == []  # its databases are gone


def test_the_stored_values_benchmark_prints_the_file_over_its_content_by_limit(
    tmp_path: Path,
) -> None:
    done = run_script(
        "benchmarks/stored_values.py",
        *("--steps", "10", "--sizes", "2048", "--limits", "0", "1024", "--dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "in rows" in lines[2] and "limit 1024" in lines[2]
    size, in_rows, _, _, once, _, _ = lines[3].split()
    assert size == "2048"
    assert float(once.rstrip("x")) < float(in_rows.rstrip("x"))
    assert list(tmp_path.iterdir()) == []


def test_the_gate_benchmark_prints_the_driver_and_the_gate_loop_side_by_side(
    tmp_path: Path,
) -> None:
    done = run_script("benchmarks/gate.py", "--steps", "5", "--rounds", "1", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("in-loop µs per step, 5 steps, median of 1 rounds")
    assert [line.split()[0] for line in lines[1:]] == ["driver", "gate", "gate/driver"]
    assert all(float(line.split()[-1]) > 0 for line in lines[1:])


def test_the_startup_benchmark_prints_every_command_and_where_import_agentrt_goes(
    tmp_path: Path,
) -> None:
    # `--compare` with this tree's own source: every command measured twice, in one table.
    done = run_script(
        "benchmarks/startup.py",
        *("--runs", "1", "--where", "3", "--as-is", "--no-warm-up", "--dir", str(tmp_path)),
        *("--compare", str(ROOT / "src")),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = lines.index("1 runs of each, in turn; whole processes, milliseconds")
    rows = lines[table + 2 : table + 14]
    labels = [row.rsplit(None, 5)[0] for row in rows]
    commands = [
        "python -c pass",
        "import agentrt",
        "import *",
        "agentrt --help",
        "one-step run",
        "one-tool run",
    ]
    tag = f"[{ROOT.name}]"
    assert labels == [*commands, *(f"{command} {tag}" for command in commands)]
    assert all(row.endswith("x") and len(row.rsplit(None, 5)) == 6 for row in rows)
    assert rows[0].endswith(" 1.00x")
    for profiled in ("import agentrt", "agentrt --help"):
        where = next(i for i, line in enumerate(lines) if line.startswith(f"where `{profiled}`"))
        assert len([line for line in lines[where + 1 : where + 4] if " ms  " in line]) == 3
    assert list(tmp_path.iterdir()) == []  # the runs' stores are gone


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_call_lookup_benchmark_prints_each_frameworks_ends_alone_gated_and_the_adapters_share(
    tmp_path: Path,
) -> None:
    for framework in ("langgraph", "pydantic_ai", "agents"):
        pytest.importorskip(framework, reason="needs the adapters' extras")
    done = run_script("benchmarks/adapter_lookup.py", "--calls", "12", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "12 calls per run; cost per call in µs, median of the first and the last 5 calls"
    )
    rows = [line.split() for line in lines[4:16]]
    assert [row[:2] for row in rows] == [
        [name, side]
        for name in ("langgraph", "pydantic-ai", "openai-agents")
        for side in ("alone", "gated", "adapter", "look-up")
    ]
    assert all(float(row[2]) > 0 and float(row[3]) > 0 for row in rows if row[1] != "adapter")
    assert list(tmp_path.iterdir()) == []  # its stores are gone


def test_the_long_run_benchmark_prints_each_tenth_memory_and_the_file_over_its_content(
    tmp_path: Path,
) -> None:
    done = run_script(
        "benchmarks/long_run.py", "--steps", "20", "--size", "64", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("20 steps of 64 bytes")
    tenths = lines[1].removeprefix("µs per step by tenth: ").split()
    assert len(tenths) == 10 and all(float(t.replace(",", "")) > 0 for t in tenths)
    assert lines[2].startswith("last tenth / first tenth: ") and "(target <= 1.2x)" in lines[2]
    assert lines[3].startswith("max RSS growth: ") and lines[3].endswith("(target <= 64 MiB)")
    assert lines[4].startswith("database: ") and lines[4].endswith("(target <= 1.5x)")
    assert list(tmp_path.iterdir()) == []  # its database is gone


# --- the peers and concurrency scripts (issues 20 and 21; decision 0085) --------------------------

PEER_ROW_NAMES = ("agentrt sync", "agentrt async", "langgraph", "dbos")


def peer_rows(out: str, section: str) -> dict[tuple[str, str, str], list[str]]:
    """The table under `section` ("SQLite" or "PostgreSQL"): (steps, size, peer) -> figures."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{section}: two fsynced"))
    rows: dict[tuple[str, str, str], list[str]] = {}
    for line in lines[start:]:
        if line.startswith("peer/sync"):
            break
        head = line[:5].strip()
        if not head.isdigit():
            continue
        size = line[7:18].strip()
        peer = line[20:34].strip()
        rows[head, size, peer] = line[34:].split()
    return rows


def assert_measured(
    rows: dict[tuple[str, str, str], list[str]], peers: Sequence[str], *, at_least: float = 8192
) -> None:
    """Each peer has a row per size with real figures: µs, x floor, CPU, bytes, two ratios."""
    assert {(n, s) for n, s, _ in rows} == {("3", "small"), ("3", "8 KiB")}
    assert sorted({p for _, _, p in rows}) == sorted(peers)
    for figures in rows.values():
        us, over, cpu, grown, vs_sync, vs_async = figures
        assert float(us) > 0 and float(over.rstrip("x")) > 0 and float(cpu) >= 0
        assert float(grown) >= 0
        assert vs_sync.endswith("x") and vs_async.endswith("x")
    for size in ("small", "8 KiB"):
        for entry in ("sync", "async"):
            assert rows["3", size, f"agentrt {entry}"][4 if entry == "sync" else 5] == "1.00x"
    # every peer's 8 KiB observations are in its own database: at least that per step, measured
    for peer in peers:
        assert float(rows["3", "8 KiB", peer][3]) >= at_least, peer


def hidden(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which each of `modules` fails to import, as when it is not installed."""
    shadow = tmp_path / "shadow"
    for module in modules:
        package = shadow / module
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise ImportError('{module} hidden by the test')\n")
    return {**os.environ, "PYTHONPATH": str(shadow)}


def test_the_peers_benchmark_measures_agentrt_and_names_each_missing_peer_it_skips(
    tmp_path: Path,
) -> None:
    databases = tmp_path / "db"
    databases.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/peers.py",
            *("--repeats", "1", "--steps", "3", "--warm", "2", "--dir", str(databases)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=hidden(tmp_path, "langgraph", "dbos"),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "SKIPPED langgraph on SQLite: langgraph.graph, langgraph.checkpoint.sqlite not " in out
    assert (
        "SKIPPED dbos on SQLite: dbos not importable (pip install -e '.[bench]' installs the "
        "peers)\n" in out
    )
    assert_measured(peer_rows(out, "SQLite"), ["agentrt sync", "agentrt async"])
    assert "agentrt await start / start_sync = " in out
    (alone,) = [line for line in out.splitlines() if "agentrt's record alone" in line]
    assert re.fullmatch(
        r"SQLite: agentrt's record alone \(SchemaReplay: a step's two transactions, their "
        r"statements only\) = \d+ µs/step \(small\), \d+ µs/step \(8 KiB\)",
        alone,
    ), alone
    assert "may take" not in out  # no peer to be faster than
    assert out.splitlines()[2].startswith("load average at start: ")
    assert any(line.startswith("load average at end: ") for line in out.splitlines())
    assert list(databases.iterdir()) == []  # its databases are gone


@dataclass(frozen=True)
class PeersRun:
    """One run of peers.py with every peer, on SQLite and (the test server set) PostgreSQL."""

    returncode: int
    stderr: str
    sqlite: str  # its output up to the PostgreSQL section: all of it without the server
    postgres: str  # the PostgreSQL section ("" when it was not asked for)
    files_left: list[str]  # what is left in its `--dir`
    made_before: list[str]  # the server's peers_* databases and schemas, before and after
    made_after: list[str]


def _peers_made(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'peers\\_%' "
            "UNION ALL SELECT nspname FROM pg_namespace WHERE nspname LIKE 'peers\\_%'"
        ).fetchall()
    return sorted(str(n[0]) for n in names)


def _run_the_peers(out: Path) -> None:
    url = os.environ.get("AGENTRT_TEST_POSTGRES_URL", "")
    on_postgres = bool(url) and all(
        importlib.util.find_spec(m) for m in ("langgraph.checkpoint.postgres", "dbos", "psycopg")
    )
    databases = out / "db"
    databases.mkdir()
    before = _peers_made(url) if on_postgres else []
    done = run_script(
        "benchmarks/peers.py",
        *("--repeats", "1", "--steps", "3", "--warm", "2", "--dir", str(databases)),
        *(("--postgres", url) if on_postgres else ()),
    )
    after = _peers_made(url) if on_postgres else []
    lines = done.stdout.splitlines(keepends=True)
    at = next(
        (i for i, line in enumerate(lines) if line.startswith(("PostgreSQL at ", "SKIPPED Postg"))),
        len(lines),
    )
    run = PeersRun(
        done.returncode,
        done.stderr,
        "".join(lines[:at]),
        "".join(lines[at:]),
        [p.name for p in databases.iterdir()],
        before,
        after,
    )
    (out / "run.json").write_text(json.dumps(dataclasses.asdict(run)))


@pytest.fixture(scope="module")
def peers_run(tmp_path_factory: pytest.TempPathFactory) -> PeersRun:
    """peers.py run once for the two tests below, by whichever xdist worker asks first: one
    process importing langgraph, dbos and agentrt for both sections, not one a section (a
    run on both costs 2.9 s of CPU, one on each 2.5 s)."""
    out = once(run_folder(tmp_path_factory), "peers-run", _run_the_peers)
    return PeersRun(**json.loads((out / "run.json").read_text()))


def test_the_peers_benchmark_runs_langgraph_and_dbos_beside_agentrt(
    request: pytest.FixtureRequest,
) -> None:
    for module in ("langgraph.checkpoint.sqlite", "dbos"):
        pytest.importorskip(module, reason="needs the bench extra (pip install -e '.[bench]')")
    done: PeersRun = request.getfixturevalue("peers_run")
    assert done.returncode == 0, done.stderr
    out = done.sqlite
    peers = ["langgraph", "dbos"]
    if sys.version_info >= (3, 12) and _no_subsecond_unixepoch():
        # DBOS cannot run on this SQLite: said in one line, and the others are measured.
        assert re.search(
            r"^SKIPPED dbos on SQLite: DBOS stamps its rows with .*unixepoch\('subsec'\).*, "
            rf"which SQLite {re.escape(sqlite3.sqlite_version)} \(this interpreter's\) does "
            r"not compute$",
            out,
            re.MULTILINE,
        ), out
        assert out.count("SKIPPED") == 1
        peers = ["langgraph"]
    else:
        assert "SKIPPED" not in out
    measured = [n for n in PEER_ROW_NAMES if n.startswith("agentrt") or n in peers]
    assert_measured(peer_rows(out, "SQLite"), measured)
    verdicts = [line for line in out.splitlines() if line.startswith("SQLite: agentrt ")]
    assert [line.split(":")[1].strip() for line in verdicts[: 2 * len(peers)]] == [
        f"agentrt {entry} vs {peer}" for entry in ("sync", "async") for peer in peers
    ]
    assert all(line.endswith((": met", ": MISSED")) for line in verdicts[: 2 * len(peers)])
    bounds = [line for line in out.splitlines() if " may take " in line]
    assert [line.split(" may take ")[0] for line in bounds] == [
        f"SQLite: a step 3x faster than {peer}" for peer in peers
    ]
    assert all(
        re.search(
            r"the record alone takes \d+\.\d\dx that: (out of reach|-?\d+ µs a step left)", line
        )
        for line in bounds
    ), bounds
    assert "SqliteSaver, wal, synchronous=2" in out
    assert ("system database delete journal" in out) == ("dbos" in peers)
    assert " may take " not in done.postgres  # the record alone is SQLite's figure only
    assert done.files_left == []


def _no_subsecond_unixepoch() -> bool:
    """This interpreter's SQLite (before 3.42) computes no `unixepoch('subsec')`."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        try:
            return conn.execute("SELECT unixepoch('subsec')").fetchone()[0] is None
        except sqlite3.Error:
            return True


@pytest.mark.slow
def test_the_peers_benchmark_runs_on_postgresql_and_drops_what_it_made(
    request: pytest.FixtureRequest,
) -> None:
    url = os.environ.get("AGENTRT_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set AGENTRT_TEST_POSTGRES_URL to run the peers on PostgreSQL")
    for module in ("langgraph.checkpoint.postgres", "dbos", "psycopg"):
        pytest.importorskip(module, reason="needs the bench extra (pip install -e '.[bench]')")
    done: PeersRun = request.getfixturevalue("peers_run")
    assert done.returncode == 0, done.stderr
    assert done.postgres.startswith("PostgreSQL at "), done.postgres
    # TOAST compresses letters and digits drawn at random by up to about a quarter
    # (62 symbols carry 6 bits a byte), and a table grows by whole 8 KiB pages, so
    # three steps may show as two pages: half the content still proves it is stored.
    assert_measured(peer_rows(done.postgres, "PostgreSQL"), PEER_ROW_NAMES, at_least=4096)
    assert "synchronous_commit=" in done.postgres
    assert set(done.made_after) <= set(done.made_before)  # its databases and schema are dropped


def test_the_peers_benchmark_says_so_when_the_server_is_not_reachable(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    done = run_script(
        "benchmarks/peers.py",
        *("--no-sqlite", "--steps", "3", "--postgres"),
        "postgresql://nobody:secret@127.0.0.1:1/none",
    )
    assert done.returncode == 0, done.stderr
    assert "SKIPPED PostgreSQL: postgresql://nobody:***@127.0.0.1:1/none is not reachable" in (
        done.stdout
    )
    assert "secret" not in done.stdout + done.stderr


def test_the_strace_summary_is_read_for_fsync_and_fdatasync_calls() -> None:
    bench = load("concurrency")
    summary = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 92.10    0.402123         310      1297           fdatasync
  7.90    0.034521         411        84         2 fsync
------ ----------- ----------- --------- --------- ----------------
100.00    0.436644         316      1381         2 total
"""
    assert bench.parse_strace_summary(summary) == 1297 + 84


def test_the_lag_probe_takes_the_garbage_collections_inside_a_tick_out_of_its_lag() -> None:
    bench = load("concurrency")
    with bench.GcPauses() as pauses:
        gc.collect()  # a full collection, seen through gc.callbacks
    assert pauses.count >= 1 and pauses.full >= 1
    assert 0 < pauses.longest <= pauses.total
    counted = pauses.count
    gc.collect()  # after `with`: no longer counted
    assert pauses.count == counted
    probe = bench.LagProbe(pauses)
    probe.note(0.030, collecting=0.025)  # a tick that a collection held 25 ms of
    probe.note(0.002, collecting=0.0)
    assert probe.worst == 0.030 and probe.ticks == 2 and probe.ticks_with_gc == 1
    assert probe.worst_without_gc == pytest.approx(0.005)

    async def ticking() -> Any:
        with bench.GcPauses() as pauses:
            probe = bench.LagProbe(pauses)
            probe.start()
            while probe.ticks < 1:
                await asyncio.sleep(0)
            gc.collect()  # on the loop, while the probe's task sleeps: inside its tick
            seen = probe.ticks
            while probe.ticks < seen + 1:
                await asyncio.sleep(0)
            await probe.stop()
        return probe

    ticked = asyncio.run(ticking())
    assert ticked.ticks_with_gc >= 1


@pytest.mark.slow
def test_the_concurrency_benchmark_counts_commits_and_fsyncs_and_loses_nothing(
    tmp_path: Path,
) -> None:
    done = run_script(
        "benchmarks/concurrency.py",
        *("--runs", "3", "--steps", "2", "--alone", "1"),
        *("--procs", "2", "--proc-runs", "2", "--proc-steps", "2", "--proc-rounds", "2"),
        *("--dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    lines = [line.strip() for line in out.splitlines()]
    assert "runs completed: 3 of 3; exceptions reaching the caller: 0" in lines
    counted = next(line for line in lines if line.startswith("transactions per fsync: "))
    if shutil.which("strace"):
        match = re.match(
            r"transactions per fsync: (\d+) transactions \(in (\d+) commits\) / (\d+) fsyncs = ",
            counted,
        )
        assert match, counted
        transactions, commits, fsyncs = (int(match.group(i)) for i in (1, 2, 3))
        # every allowed step's two and every run's start and end: more transactions than
        # steps, held in at most as many commits (group commit, decision 0089)
        assert transactions > 3 * 2 and 0 < commits <= transactions and fsyncs > 0
        assert counted.endswith((": met", ": MISSED"))
    else:
        assert counted.startswith("transactions per fsync: not counted (strace is not installed")
    assert any(line.startswith("steps/s x CPU s per step = ") for line in lines)
    assert any(line.startswith("step latency: p50 ") and "one run alone" in line for line in lines)
    assert any(line.startswith("event-loop lag: max ") for line in lines)
    # the loop never waits on a commit (decision 0089): none runs on its thread
    why = next(line for line in lines if line.startswith("why: COMMITs run on the event loop"))
    assert re.match(
        r"why: COMMITs run on the event loop's thread: 0 of \d+; the longest single callback "
        r"held the loop [\d,]+ µs; ",
        why,
    ), why
    collections = next(line for line in lines if line.startswith("the interpreter's garbage"))
    assert re.fullmatch(
        r"the interpreter's garbage collections: \d+ \(\d+ full\), [\d,]+\.\d ms in all, the "
        r"longest [\d,]+ µs; the lag less the collections inside its tick: max -?[\d,]+ µs",
        collections,
    ), collections
    assert (
        "exceptions reaching a caller: 0, of which 'database is locked' or busy: 0 "
        "(target: none): met"
    ) in lines
    lost = next(line for line in lines if line.startswith("nothing lost: "))
    assert lost.startswith(
        "nothing lost: of 4 runs returned COMPLETED (4 started), 4 are in the file so, "
        "with step rows 12/12 and events "
    )
    assert lost.endswith(": met")
    assert any(line.startswith("aggregate: ") and "one process alone" in line for line in lines)
    rounds = next(line for line in lines if line.startswith("each round (one process alone"))
    assert re.fullmatch(
        r"each round \(one process alone, then the processes\): \d+\.\d\dx, \d+\.\d\dx; "
        r"the median round is the one shown",
        rounds,
    ), rounds
    assert any(line.startswith("per process: ") and "slowest / mean" in line for line in lines)
    # the machine's ceiling for the processes' workload, read from /proc/stat in the same run
    ceiling = next(line for line in lines if line.startswith("2 processes: the machine's CPU"))
    assert re.match(
        r"2 processes: the machine's CPU per step \d+\.\d\d ms \(every process, the server's "
        r"included\); \d+ cores make at most [\d,]+ steps/s at that cost: \d+\.\d\dx one "
        r"process$",
        ceiling,
    ), ceiling
    # each side's group commits: every step's transactions counted, none lost in the count
    for procs, word in ((1, "process"), (2, "processes")):
        held = next(
            line for line in lines if line.startswith(f"{procs} {word}: ") and "a commit" in line
        )
        found = re.match(
            rf"{procs} {word}: ([\d,]+) transactions in ([\d,]+) commits, [\d.]+ a commit$", held
        )
        assert found, held
        assert int(found[1].replace(",", "")) >= int(found[2].replace(",", "")) >= 1
        turn = next(line for line in lines if line.startswith(f"{procs} {word}: the write turn"))
        assert re.match(
            rf"{procs} {word}: the write turn held \d+% of the time, [\d,]+ µs a step, of "
            r"which the holding thread's CPU [\d,]+ µs$",
            turn,
        ), turn
    assert re.search(r"^targets: \d+ of \d+ met$", out, re.MULTILINE)
    assert list(tmp_path.iterdir()) == []
