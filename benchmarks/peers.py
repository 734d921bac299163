"""The same scripted agent loop in agentrt, LangGraph and DBOS: µs and bytes per step.

Issue 20's target: agentrt at least 3x faster per step than LangGraph +
SqliteSaver (`durability="sync"`) and DBOS on SQLite, at every size; issue 21's
the same on PostgreSQL. This script runs, in one process and interleaved so that
every figure sees the same machine:

- **agentrt**, twice: `Driver.start_sync` and `asyncio.run(driver.start(...))`,
  on a store from `agentrt.open_store` (SQLite: a file in the benchmark's
  directory, WAL, `synchronous=FULL`; PostgreSQL: a schema of its own), with
  `benchmarks/driver.py`'s run: a scripted agent, `default_policy()`, one
  read-only plain-function tool;
- **LangGraph** + `SqliteSaver` (a file of its own; the saver sets WAL, the
  connection keeps SQLite's default `synchronous=FULL`) or `PostgresSaver` (a
  database of its own), invoked with `durability="sync"`, the documented
  setting that persists each checkpoint before the next step starts;
- **DBOS** with its system database on SQLite (a file of its own: DBOS's own
  settings, a rollback journal and SQLite's default `synchronous=FULL`) or on
  PostgreSQL (a database of its own), the documented durable workflow: a
  `@DBOS.workflow()` whose every action is a `@DBOS.step()`, each step's output
  checkpointed before the workflow goes on.

The loop is the same in each, for N allowed tool steps, N in 10, 100, 400, and
an observation that is small (`{"page": i, "text": ""}`) or 8 KiB (8,192
letters and digits drawn once from a seeded generator, which no store can
compress away), different at every step:

1. the agent decides: a call of `read_page` with `{"page": i}`, or, after N
   calls, completing with `{"pages": N}`;
2. that decision is made durable before the tool runs (agentrt: `step.decided`,
   the policy's verdict and `step.tool_started` are committed; LangGraph: the
   agent node's checkpoint; DBOS: the `decide` step's recorded output);
3. the tool runs and returns the observation;
4. the observation is made durable before the next decision (agentrt:
   `step.tool_finished`; LangGraph: the tool node's checkpoint; DBOS: the
   `read_page` step's recorded output).

So every peer makes each decision and each observation durable, with the same
payloads, before it goes on: two durable writes per step at least. agentrt
commits two per allowed step (decision 0088), and they also record the step's
start, the policy's verdict, the tool's start and the hash chain of its audit
events, which the peers do not. On SQLite, agentrt's record alone (driver.py's
`SchemaReplay`: those two transactions' statements with a real step's texts,
and nothing else) is measured beside the runs, and the script says whether a
step 3x faster than each peer's leaves it any time at all. The peers'
state holds only what the loop needs (the step's index, the last call and the
last observation): with LangGraph's idiomatic message list every checkpoint
would rewrite the whole history (SqliteSaver serializes the whole state each
time), so the figures here are each peer's best case, not its usual one.
agentrt's agent is handed every earlier step from memory, at no durable cost.
Decision 0085 says why this loop is the fair one.

Each figure is the median of `--repeats` rounds; each round runs every (peer,
N, size) once, in a shuffled order, each beside a measurement of the floor: two
plain fsynced commits (SQLite: `BEGIN IMMEDIATE`, one small INSERT, `COMMIT`,
WAL and `synchronous=FULL`, in the same directory; PostgreSQL: an INSERT and
its COMMIT on the same server). "µs/step" is the wall time of the whole run
(the run created and completed included) over N; "CPU" the process's CPU time
(all threads) over N; "bytes/step" the database's growth over the run, in
pages in use (SQLite: `page_count - freelist_count`; PostgreSQL: the total
size of the peer's tables, indexes and TOAST), over N; "peer/sync" and
"peer/async" the peer's µs per step over agentrt's with each entry (above 1:
agentrt is faster; the target is 3).

A peer that is not installed is named and skipped; `pip install -e '.[bench]'`
installs them all. With `--postgres URL` (e.g.
`postgresql://root@127.0.0.1:5432/test`) the same table is printed for
PostgreSQL when the server is reachable (the role must be allowed to create
databases: each peer gets a database of its own, dropped at the end).

    python benchmarks/peers.py [--repeats N] [--steps 10,100,400] [--dir PATH]
                               [--postgres URL] [--peers agentrt,langgraph,dbos]

About a minute per round on this project's machines (more with PostgreSQL).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import platform
import random
import sqlite3
import statistics
import string
import sys
import tempfile
import time
import types
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import agentrt

STEP_COUNTS = (10, 100, 400)
SIZES = {"small": 0, "8 KiB": 8192}


@cache
def pad_of(size: str) -> str:
    """The observation's text for `size`: letters and digits drawn once from a seeded
    generator, so that no store can compress it away (PostgreSQL's TOAST would squeeze
    8 KiB of one letter into a few bytes) and every run and peer gets the same."""
    alphabet = string.ascii_letters + string.digits
    return "".join(random.Random(SIZES[size]).choices(alphabet, k=SIZES[size]))


PEER_TARGET = 3.0  # agentrt at least this many times faster per step than each peer
ALL_PEERS = ("agentrt", "langgraph", "dbos")


def _load_driver_bench() -> types.ModuleType:
    """`benchmarks/driver.py`: its run, its tool, its floor (one definition of each)."""
    name = "agentrt_bench_driver"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("driver.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_driver_bench()


def observation(page: int, size: str) -> dict[str, Any]:
    """The tool's observation, the same in every peer (agentrt's `read_page` returns it too).

    Each peer's tool finds the text by the size's name, as agentrt's tool has it
    bound: the text is never an argument or a state value a peer would record."""
    return {"page": page, "text": bench.page_text(pad_of(size), page)}


# --- what is installed ----------------------------------------------------------------------------


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_modules(*modules: str) -> list[str]:
    """The modules of `modules` that cannot be imported here (not installed, or broken)."""
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # ImportError, or whatever a broken install raises
            missing.append(module)
    return missing


NEEDS = {
    ("langgraph", "sqlite"): ("langgraph.graph", "langgraph.checkpoint.sqlite"),
    ("langgraph", "postgres"): ("langgraph.graph", "langgraph.checkpoint.postgres", "psycopg"),
    ("dbos", "sqlite"): ("dbos",),
    ("dbos", "postgres"): ("dbos", "psycopg"),
    ("agentrt", "sqlite"): (),
    ("agentrt", "postgres"): ("psycopg",),
}
_HINT = " (pip install -e '.[bench]' installs the peers)"  # said of a peer not importable
DISTS = {
    "langgraph": ("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"),
    "dbos": ("dbos",),
    "agentrt": ("agentrt", "psycopg"),
}


def peer_versions(peer: str) -> str:
    found = [f"{d} {v}" for d in DISTS[peer] if (v := version_of(d)) is not None]
    return ", ".join(found) if found else "not installed"


# --- the peers --------------------------------------------------------------------------------


class Peer:
    """One way of running the loop: `run` returns (wall s, CPU s); `used_bytes` the database."""

    name = ""

    def run(self, steps: int, size: str) -> tuple[float, float]:
        raise NotImplementedError

    def used_bytes(self) -> int:
        raise NotImplementedError

    def settings(self) -> str:
        return ""

    def close(self) -> None:
        pass


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    cpu, start = time.process_time(), time.perf_counter()
    result = call()
    return result, time.perf_counter() - start, time.process_time() - cpu


def sqlite_used_bytes(path: str) -> int:
    """Bytes of pages in use in the SQLite file at `path`, its WAL's committed pages included."""
    conn = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
    finally:
        conn.close()


def sqlite_journal(path: str) -> str:
    conn = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


@cache
def tool_of(size: str) -> agentrt.Tool:
    """The tool of every agentrt run of `size`, whatever its entry: one count of its calls,
    so that no run repeats another's observation (the sync and async entries share a store,
    which keeps each value once: a repeated text would not be stored again)."""
    return bench.make_tool(pad_of(size))


class AgentrtPeer(Peer):
    """agentrt's Driver (driver.py's `run_once`) on a store; `entry` "sync" or "async"."""

    def __init__(self, store: agentrt.Store, entry: str, used: Callable[[], int], how: str):
        self.name = f"agentrt {entry}"
        self.store = store
        self.entry = entry
        self._used = used
        self._how = how

    def run(self, steps: int, size: str) -> tuple[float, float]:
        sample = bench.run_once(self.store, tool_of(size), steps, entry=self.entry)
        return sample.wall, sample.cpu

    def used_bytes(self) -> int:
        return self._used()

    def settings(self) -> str:
        return self._how

    def close(self) -> None:
        self.store.close()


def langgraph_app(checkpointer: Any) -> Any:
    """The loop as a LangGraph graph: an agent node and a tool node, in a cycle."""
    from typing import TypedDict

    from langgraph.graph import END, StateGraph

    class LoopState(TypedDict, total=False):
        i: int
        n: int
        size: str
        call: Any
        observation: Any
        result: Any

    def agent(state: LoopState) -> dict[str, Any]:
        i, n = state["i"], state["n"]
        if i >= n:
            return {"call": None, "result": {"pages": n}}
        return {"call": {"name": "read_page", "args": {"page": i}}}

    def tool(state: LoopState) -> dict[str, Any]:
        page = state["call"]["args"]["page"]
        return {"observation": observation(page, state["size"]), "i": state["i"] + 1}

    graph = StateGraph(LoopState)
    graph.add_node("agent", agent)
    graph.add_node("tool", tool)
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", lambda s: "tool" if s.get("call") else END)
    graph.add_edge("tool", "agent")
    return graph.compile(checkpointer=checkpointer)


class LangGraphPeer(Peer):
    name = "langgraph"

    def __init__(self, checkpointer: Any, used: Callable[[], int], how: str, closing: Any):
        self.app = langgraph_app(checkpointer)
        self._used = used
        self._how = how
        self._closing = closing

    def run(self, steps: int, size: str) -> tuple[float, float]:
        config = {
            "configurable": {"thread_id": uuid.uuid4().hex},
            "recursion_limit": 2 * steps + 10,
        }
        out, wall, cpu = timed(
            lambda: self.app.invoke({"i": 0, "n": steps, "size": size}, config, durability="sync")
        )
        if out.get("result") != {"pages": steps} or out.get("i") != steps:
            raise SystemExit(f"the LangGraph loop did not complete as scripted: {out!r:.200}")
        return wall, cpu

    def used_bytes(self) -> int:
        return self._used()

    def settings(self) -> str:
        return self._how

    def close(self) -> None:
        self._closing.close()


_DBOS_LOOP: Any = None


def dbos_loop() -> Any:
    """The loop as a DBOS workflow whose decision and tool call are each a step (made once)."""
    global _DBOS_LOOP
    if _DBOS_LOOP is not None:
        return _DBOS_LOOP
    from dbos import DBOS

    @DBOS.step()
    def decide(i: int, n: int) -> dict[str, Any]:
        if i >= n:
            return {"kind": "complete", "result": {"pages": n}}
        return {"kind": "tool_call", "name": "read_page", "args": {"page": i}}

    @DBOS.step()
    def read_page(page: int, size: str) -> dict[str, Any]:
        return observation(page, size)

    @DBOS.workflow()
    def agent_loop(n: int, size: str) -> Any:
        i = 0
        while True:
            decision = decide(i, n)
            if decision["kind"] == "complete":
                return decision["result"]
            read_page(decision["args"]["page"], size)
            i += 1

    _DBOS_LOOP = agent_loop
    return agent_loop


class DBOSPeer(Peer):
    name = "dbos"

    def __init__(self, url: str, used: Callable[[], int], how: str):
        from dbos import DBOS

        for name in ("dbos", "dbos._dbos", "sqlalchemy"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.loop = dbos_loop()
        DBOS(
            config={
                "name": "agentrt-peers-bench",
                "system_database_url": url,
                "run_admin_server": False,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()
        self._used = used
        self._how = how

    def run(self, steps: int, size: str) -> tuple[float, float]:
        from dbos import SetWorkflowID

        def call() -> Any:
            with SetWorkflowID(uuid.uuid4().hex):
                return self.loop(steps, size)

        out, wall, cpu = timed(call)
        if out != {"pages": steps}:
            raise SystemExit(f"the DBOS workflow did not complete as scripted: {out!r:.200}")
        return wall, cpu

    def used_bytes(self) -> int:
        return self._used()

    def settings(self) -> str:
        return self._how

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()


# --- SQLite -----------------------------------------------------------------------------------


def sqlite_peers(directory: str, wanted: Sequence[str], skipped: list[str]) -> list[Peer]:
    peers: list[Peer] = []
    if "agentrt" in wanted:
        for entry in ("sync", "async"):
            path = os.path.join(directory, f"agentrt-{entry}.db")
            store = agentrt.open_store(path)
            peers.append(
                AgentrtPeer(
                    store,
                    entry,
                    partial(sqlite_used_bytes, path),
                    f"{sqlite_journal(path)}, synchronous=FULL (agentrt sets it)",
                )
            )
    if "langgraph" in wanted and not (lack := missing_modules(*NEEDS["langgraph", "sqlite"])):
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = os.path.join(directory, "langgraph.db")
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        peers.append(
            LangGraphPeer(
                saver,
                partial(sqlite_used_bytes, path),
                f"SqliteSaver, {sqlite_journal(path)}, synchronous={level} (2 = FULL, the default)",
                conn,
            )
        )
    elif "langgraph" in wanted:
        skipped.append(f"langgraph on SQLite: {', '.join(lack)} not importable{_HINT}")
    if "dbos" in wanted and not (lack := missing_modules(*NEEDS["dbos", "sqlite"])):
        if why := dbos_cannot_use_this_sqlite():
            skipped.append(f"dbos on SQLite: {why}")
        else:
            path = os.path.join(directory, "dbos.db")
            peer = DBOSPeer(f"sqlite:///{path}", partial(sqlite_used_bytes, path), "")
            peer._how = (
                f"system database {sqlite_journal(path)} journal, synchronous=FULL (default)"
            )
            peers.append(peer)
    elif "dbos" in wanted:
        skipped.append(f"dbos on SQLite: {', '.join(lack)} not importable{_HINT}")
    return peers


def dbos_cannot_use_this_sqlite() -> str | None:
    """Why DBOS cannot keep its system database on this interpreter's SQLite, or None.

    DBOS stamps its rows with an expression it chooses by Python version: on 3.12 and
    later `unixepoch('subsec')`, which SQLite gives from 3.42; an older library (an
    interpreter built against Debian 12's 3.40, say) gives NULL, and DBOS's launch fails on
    a NOT NULL column. Asked of the expression DBOS would use, where DBOS names it."""
    try:
        from dbos._migration import get_sqlite_timestamp_expr
    except Exception:  # another DBOS: its launch says what is wrong, if anything
        return None
    expression = get_sqlite_timestamp_expr()
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        try:
            (value,) = conn.execute(f"SELECT {expression}").fetchone()
        except sqlite3.Error:
            value = None
    if value is not None:
        return None
    return (
        f"DBOS stamps its rows with {expression}, which SQLite {sqlite3.sqlite_version} "
        "(this interpreter's) does not compute"
    )


class SqliteFloor:
    """Two plain fsynced commits (as driver.py's `Floor` measures)."""

    def __init__(self, directory: str) -> None:
        self.floor = bench.Floor(directory)

    def measure(self, commits: int) -> float:
        return float(self.floor.measure(commits)) / 2

    def close(self) -> None:
        self.floor.close()


class RecordAlone:
    """agentrt's record alone on SQLite: driver.py's `SchemaReplay` (the statements of an
    allowed step's two transactions, with a real step's texts of each size, and nothing
    else), on files of its own. No runtime can write this record in less: beside the peers
    it says whether a step 3x faster than theirs is possible at all with this format."""

    def __init__(self, directory: str) -> None:
        self.replays = {
            size: bench.SchemaReplay(directory, bench.make_tool(pad_of(size)), f"alone-{i}")
            for i, size in enumerate(SIZES)
        }
        self.us: dict[str, list[float]] = {size: [] for size in SIZES}

    def measure(self, size: str, steps: int) -> None:
        self.us[size].append(self.replays[size].measure(steps))

    def close(self) -> None:
        for replay in self.replays.values():
            replay.close()


# --- PostgreSQL -------------------------------------------------------------------------------


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def with_database(url: str, database: str, **query: str) -> str:
    parts = urlsplit(url)
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    kept.extend(query.items())
    return urlunsplit(parts._replace(path=f"/{database}", query=urlencode(kept)))


def pg_bytes(url: str, schemas: Sequence[str] | None = None) -> int:
    """Total size (tables, indexes, TOAST) of the tables in `schemas` (None: every user schema)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if schemas is None:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'm') "
                "AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'm') "
                "AND n.nspname = ANY(%s)",
                (list(schemas),),
            ).fetchone()
    return int(row[0]) if row else 0


class PostgresFloor:
    """Two plain commits on the server: an INSERT and its COMMIT, twice."""

    def __init__(self, url: str, table: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)
        self.table = table
        self.conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, v text NOT NULL)")
        self.conn.commit()

    def measure(self, commits: int) -> float:
        start = time.perf_counter()
        for i in range(commits):
            self.conn.execute(f"INSERT INTO {self.table} (v) VALUES (%s)", (f"commit {i}",))
            self.conn.commit()
        return (time.perf_counter() - start) / commits * 2 * 1e6

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.conn.commit()
        self.conn.close()


class PostgresPlace:
    """The databases and schema this run creates on the server, and drops at the end."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self.tag = f"peers_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.admin = psycopg.connect(url, autocommit=True, connect_timeout=5)
        self.databases: list[str] = []
        self.schema = self.tag

    def database(self, suffix: str) -> str:
        name = f"{self.tag}_{suffix}"
        self.admin.execute(f"CREATE DATABASE {name}")
        self.databases.append(name)
        return with_database(self.url, name)

    def close(self) -> None:
        self.admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        for name in self.databases:
            with contextlib.suppress(Exception):
                self.admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.admin.close()


def postgres_peers(place: PostgresPlace, wanted: Sequence[str], skipped: list[str]) -> list[Peer]:
    peers: list[Peer] = []
    dbname = urlsplit(place.url).path.lstrip("/") or "postgres"
    settings = server_settings(place.url)
    if "agentrt" in wanted:
        store_url = with_database(place.url, dbname, schema=place.schema)
        for entry in ("sync", "async"):
            store = agentrt.open_store(store_url)
            peers.append(
                AgentrtPeer(
                    store,
                    entry,
                    partial(pg_bytes, place.url, [place.schema]),
                    f"schema {place.schema}; {settings}",
                )
            )
    if "langgraph" in wanted and not (lack := missing_modules(*NEEDS["langgraph", "postgres"])):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        url = place.database("langgraph")
        conn = Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn)
        saver.setup()
        peers.append(
            LangGraphPeer(saver, partial(pg_bytes, url), f"PostgresSaver; {settings}", conn)
        )
    elif "langgraph" in wanted:
        skipped.append(f"langgraph on PostgreSQL: {', '.join(lack)} not importable{_HINT}")
    if "dbos" in wanted and not (lack := missing_modules(*NEEDS["dbos", "postgres"])):
        url = place.database("dbos")
        peers.append(DBOSPeer(url, partial(pg_bytes, url), f"system database; {settings}"))
    elif "dbos" in wanted:
        skipped.append(f"dbos on PostgreSQL: {', '.join(lack)} not importable{_HINT}")
    return peers


def server_settings(url: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        values = [
            f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
            for name in ("fsync", "synchronous_commit")
        ]
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    return f"PostgreSQL {version}, " + ", ".join(values)


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Cell:
    """One (peer, steps, size): per-run samples."""

    us: list[float] = field(default_factory=list)  # wall µs per step
    cpu_us: list[float] = field(default_factory=list)
    over_floor: list[float] = field(default_factory=list)  # wall per step / the floor beside it
    bytes_per_step: list[float] = field(default_factory=list)


def measure(
    peers: Sequence[Peer],
    floor: Any,
    steps_list: Sequence[int],
    repeats: int,
    floor_commits: int,
    warm: int,
    record: RecordAlone | None = None,
) -> tuple[dict[tuple[str, int, str], Cell], list[float]]:
    cells = {(p.name, n, s): Cell() for p in peers for n in steps_list for s in SIZES}
    floors: list[float] = []
    by_name = {p.name: p for p in peers}
    for peer in peers:  # warm up: imports, pools, each database's WAL or tables
        peer.run(warm, "small")
    for round_ in range(repeats):
        for name, n, size in random.Random(round_).sample(list(cells), len(cells)):
            peer = by_name[name]
            before_floor = floor.measure(floor_commits)
            floors.append(before_floor)
            before = peer.used_bytes()
            wall, cpu = peer.run(n, size)
            grown = peer.used_bytes() - before
            cell = cells[name, n, size]
            cell.us.append(wall / n * 1e6)
            cell.cpu_us.append(cpu / n * 1e6)
            cell.over_floor.append(wall / n * 1e6 / before_floor)
            cell.bytes_per_step.append(grown / n)
            if record is not None:
                record.measure(size, floor_commits)
        print(f"  round {round_ + 1}/{repeats} done", file=sys.stderr, flush=True)
    return cells, floors


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    title: str,
    peers: Sequence[Peer],
    cells: dict[tuple[str, int, str], Cell],
    floors: Sequence[float],
    steps_list: Sequence[int],
    record: RecordAlone | None = None,
) -> list[tuple[str, float, bool]]:
    """Print the table and the verdicts; returns (what, worst ratio, met) per target."""
    print()
    print(
        f"{title}: two fsynced commits (the floor) = {med(floors):.0f} µs "
        f"(median of {len(floors)}, range {min(floors):.0f}..{max(floors):.0f})"
    )
    for peer in peers:
        print(f"  {peer.name:<14} {peer.settings()}")
    header = (
        f"{'steps':>5}  {'observation':<11}  {'peer':<14}  {'µs/step':>8}  {'x floor':>7}  "
        f"{'CPU µs/step':>11}  {'bytes/step':>10}  {'peer/sync':>9}  {'peer/async':>10}"
    )
    print(header)
    print("-" * len(header))
    names = [p.name for p in peers]
    for n in steps_list:
        for size in SIZES:
            sync = cells.get(("agentrt sync", n, size))
            async_ = cells.get(("agentrt async", n, size))
            for name in names:
                cell = cells[name, n, size]
                us = med(cell.us)
                vs_sync = f"{us / med(sync.us):.2f}x" if sync else "-"
                vs_async = f"{us / med(async_.us):.2f}x" if async_ else "-"
                print(
                    f"{n:>5}  {size:<11}  {name:<14}  {us:>8.0f}  {med(cell.over_floor):>6.2f}x  "
                    f"{med(cell.cpu_us):>11.0f}  {med(cell.bytes_per_step):>10.0f}  "
                    f"{vs_sync:>9}  {vs_async:>10}"
                )
    print()
    print("peer/sync, peer/async: the row's µs per step over agentrt's (start_sync, await start)")
    print(f"at the same size; above 1 agentrt is faster; target >= {PEER_TARGET:g}x")
    verdicts: list[tuple[str, float, bool]] = []
    for entry in ("sync", "async"):
        mine = f"agentrt {entry}"
        if mine not in names:
            continue
        for other in names:
            if other.startswith("agentrt"):
                continue
            ratios = {
                (n, s): med(cells[other, n, s].us) / med(cells[mine, n, s].us)
                for n in steps_list
                for s in SIZES
            }
            (n, s), worst = min(ratios.items(), key=lambda kv: kv[1])
            met = worst >= PEER_TARGET
            what = f"{title}: agentrt {entry} vs {other}"
            print(
                f"{what}: {other} / agentrt = {worst:.2f}x at worst ({n} steps, {s}); "
                f"target >= {PEER_TARGET:g}x: {'met' if met else 'MISSED'}"
            )
            verdicts.append((what, worst, met))
    if "agentrt sync" in names and "agentrt async" in names:
        worst = max(
            med(cells["agentrt async", n, s].us) / med(cells["agentrt sync", n, s].us)
            for n in steps_list
            for s in SIZES
        )
        print(f"{title}: agentrt await start / start_sync = {worst:.2f}x at worst")
    if record is not None:
        report_record_alone(title, names, cells, steps_list, record)
    if len(cells[names[0], steps_list[0], "small"].us) < 3:
        print("(fewer than 3 repetitions: the verdicts are only indicative)")
    return verdicts


def left_for_the_runtime(
    other: str,
    cells: dict[tuple[str, int, str], Cell],
    steps_list: Sequence[int],
    alone: dict[str, float],
) -> str:
    """The time a step 3x faster than `other`'s leaves the runtime over its record, in the
    cell where start_sync's own work is furthest over it (or, without agentrt's runs, where
    the least is left): the cell that decides the target, which need not be the one where
    the record alone weighs most."""
    left = {
        (n, size): med(cells[other, n, size].us) / PEER_TARGET - alone[size]
        for n in steps_list
        for size in SIZES
    }
    ours = {
        (n, size): med(cells["agentrt sync", n, size].us) - alone[size]
        for n in steps_list
        for size in SIZES
        if ("agentrt sync", n, size) in cells
    }
    if len(ours) == len(left):
        n, size = max(left, key=lambda cell: ours[cell] - left[cell])
        return (
            f"{left[n, size]:.0f} µs a step left for the runtime's own work where start_sync's "
            f"is furthest over it ({n} steps, {size}: start_sync's takes {ours[n, size]:.0f} µs "
            "over the record)"
        )
    n, size = min(left, key=lambda cell: left[cell])
    return (
        f"{left[n, size]:.0f} µs a step left for the runtime's own work at least "
        f"({n} steps, {size})"
    )


def report_record_alone(
    title: str,
    names: Sequence[str],
    cells: dict[tuple[str, int, str], Cell],
    steps_list: Sequence[int],
    record: RecordAlone,
) -> None:
    """Whether a step 3x faster than each peer's fits the time agentrt's record alone takes."""
    alone = {size: med(record.us[size]) for size in SIZES}
    print(
        f"{title}: agentrt's record alone (SchemaReplay: a step's two transactions, their "
        "statements only) = " + ", ".join(f"{alone[size]:.0f} µs/step ({size})" for size in SIZES)
    )
    for other in names:
        if other.startswith("agentrt"):
            continue
        # What the record alone takes over the time a step 3x faster than the peer's may take.
        over = {
            (n, size): alone[size] / (med(cells[other, n, size].us) / PEER_TARGET)
            for n in steps_list
            for size in SIZES
        }
        (n, size), worst = max(over.items(), key=lambda kv: kv[1])
        allowed = med(cells[other, n, size].us) / PEER_TARGET
        if worst > 1:
            verdict = "out of reach with this record format on this disk"
        else:
            verdict = left_for_the_runtime(other, cells, steps_list, alone)
        print(
            f"{title}: a step {PEER_TARGET:g}x faster than {other} may take {allowed:.0f} µs at "
            f"worst ({n} steps, {size}); the record alone takes {worst:.2f}x that: {verdict}"
        )


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument(
        "--steps",
        default=",".join(map(str, STEP_COUNTS)),
        help="tool steps per run, comma-separated (default 10,100,400)",
    )
    parser.add_argument("--dir", default=None, help="where the SQLite files go (a new temp dir)")
    parser.add_argument("--postgres", default=None, metavar="URL", help="also on this server")
    parser.add_argument(
        "--peers", default=",".join(ALL_PEERS), help="which to run (default: all installed)"
    )
    parser.add_argument(
        "--warm", type=int, default=60, help="steps of each peer's warm-up run (default 60)"
    )
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = parser.parse_args(argv)
    try:
        args.steps = [int(n) for n in args.steps.split(",")]
    except ValueError:
        parser.error("--steps takes numbers separated by commas")
    if args.repeats < 1 or not args.steps or min(args.steps) < 1:
        parser.error("--repeats and every --steps must be at least 1")
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if unknown := set(args.peers) - set(ALL_PEERS):
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    return args


@contextlib.contextmanager
def closing_all(items: list[Any]) -> Iterator[list[Any]]:
    try:
        yield items
    finally:
        for item in reversed(items):
            with contextlib.suppress(Exception):
                item.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    now = datetime.now(UTC)
    print(f"agentrt {agentrt.__version__} beside its peers, {now:%Y-%m-%d %H:%M}Z")
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"
    )
    print(f"load average at start: {bench.load_average()}")
    for peer in args.peers:
        print(f"  {peer:<10} {peer_versions(peer)}")
    skipped: list[str] = []
    print(
        f"{args.repeats} rounds, medians; tool steps per run: {tuple(args.steps)}; "
        f"observations: {', '.join(SIZES)}"
    )
    sys.stdout.flush()
    floor_commits = 30
    verdicts: list[tuple[str, float, bool]] = []
    if not args.no_sqlite:
        with (
            tempfile.TemporaryDirectory(prefix="agentrt-peers-", dir=args.dir) as directory,
            closing_all([]) as opened,
        ):
            print(f"SQLite files in {directory} ({bench.filesystem_of(directory)})")
            floor = SqliteFloor(directory)
            opened.append(floor)
            peers = sqlite_peers(directory, args.peers, skipped)
            opened.extend(peers)
            record = RecordAlone(directory) if "agentrt" in args.peers else None
            if record is not None:
                opened.append(record)
            for line in skipped:
                print(f"SKIPPED {line}")
            cells, floors = measure(
                peers, floor, args.steps, args.repeats, floor_commits, args.warm, record
            )
            verdicts += report("SQLite", peers, cells, floors, args.steps, record)
    if args.postgres:
        verdicts += postgres_section(args, floor_commits)
    print()
    if verdicts:
        met = sum(v[2] for v in verdicts)
        print(f"targets: {met} of {len(verdicts)} met")
    print(
        f"load average at end: {bench.load_average()} (other processes make every figure noisier)"
    )
    print(f"(took {time.perf_counter() - began:.0f} s)")
    return 0


def postgres_section(args: argparse.Namespace, floor_commits: int) -> list[tuple[str, float, bool]]:
    print()
    if missing_modules("psycopg"):
        print("SKIPPED PostgreSQL: psycopg is not importable (pip install -e '.[postgres]')")
        return []
    try:
        place = PostgresPlace(args.postgres)
    except Exception as e:  # any failure to reach the server: say so, skip
        print(f"SKIPPED PostgreSQL: {redact(args.postgres)} is not reachable: {e}".strip())
        return []
    skipped: list[str] = []
    with closing_all([place]) as opened:
        print(f"PostgreSQL at {redact(args.postgres)}: {server_settings(args.postgres)}")
        floor = PostgresFloor(args.postgres, f"{place.tag}_floor")
        opened.append(floor)
        peers = postgres_peers(place, args.peers, skipped)
        opened.extend(peers)
        for line in skipped:
            print(f"SKIPPED {line}")
        cells, floors = measure(peers, floor, args.steps, args.repeats, floor_commits, args.warm)
        return report("PostgreSQL", peers, cells, floors, args.steps)


if __name__ == "__main__":
    sys.exit(main())
