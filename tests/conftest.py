"""Shared fixtures: deterministic clocks and ids, a file-backed store, sample tools."""

from __future__ import annotations

import itertools
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import SideEffect, ToolCall, ToolResult, ToolSpec
from support.database import BACKENDS, close_schema_pool, make_database
from support.disks import ext4_disk, small_disk  # noqa: F401  (fixtures: a disk of its own)

# Every transaction of the step machine is checked against its commit plan, in this
# process and in every child it starts (they inherit the environment).
os.environ["AGENTRT_CHECK_COMMIT_PLAN"] = "1"

EPOCH = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)


class FakeClock:
    """Advances by `tick` on every reading, so the order of readings shows in the records."""

    def __init__(self, start: datetime = EPOCH, tick: timedelta = timedelta(milliseconds=1)):
        self.t = start
        self.tick = tick
        self.readings = 0

    def __call__(self) -> datetime:
        self.t += self.tick
        self.readings += 1
        return self.t

    def advance(self, delta: timedelta) -> None:
        self.t += delta


class Ids:
    """Sequential 32-hex-character ids with a prefix digit per factory."""

    def __init__(self, prefix: str = "a") -> None:
        self.prefix = prefix
        self.counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter):031x}"


class RecordingTool:
    """A hand-written Tool (no decorator) that records every call it receives."""

    def __init__(
        self,
        name: str,
        side_effect: SideEffect,
        schema: dict[str, Any] | None = None,
        result: Any = None,
        description: str = "",
        timeout: timedelta = timedelta(seconds=5),
        terminal: bool = False,
    ) -> None:
        self.spec = ToolSpec(
            name=name,
            description=description or f"the {name} tool",
            input_schema=schema
            or {
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "additionalProperties": False,
            },
            side_effect=side_effect,
            timeout=timeout,
            terminal=terminal,
        )
        self.calls: list[ToolCall] = []
        self.result = result

    def call(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        if callable(self.result):
            return self.result(call)  # type: ignore[no-any-return]
        content = self.result if self.result is not None else {"echo": call.args}
        return ToolResult(content=content, summary=f"{self.spec.name} ok")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ids() -> Ids:
    return Ids()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database on each backend: a SQLite file's path, a PostgreSQL schema's URL
    (a migrated schema with every table empty, from this process's pool: support/database.py,
    support/schema_pool.py)."""
    with ExitStack() as stack:
        yield make_database(request.param, tmp_path, stack, request.node.nodeid)


@pytest.fixture
def any_store(database: str) -> Iterator[agentrt.Store]:
    """A store on each backend (`database`): for a behavioural test that is not about
    SQLite's file rules."""
    s = agentrt.open_store(database)
    yield s
    s.close()


@pytest.fixture
def crash_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `crashing_child.py`'s tools journal their calls, in this process and its
    children: a file in the test's tmp_path, whatever the database (a PostgreSQL URL
    has no file beside it)."""
    path = tmp_path / "crash.journal"
    monkeypatch.setenv("CRASH_JOURNAL", str(path))
    return path


@pytest.fixture
def store(db_path: Path) -> Iterator[agentrt.Store]:
    s = agentrt.open_store(db_path)
    yield s
    s.close()


def event_types(store: agentrt.Store, run_id: str) -> list[str]:
    return [e.type for e in store.list_events(run_id=run_id, limit=100_000)]


def pytest_configure(config: pytest.Config) -> None:
    """This suite asks for the test kit's pytest plugin, as any project must (decision 0056).

    Registered here rather than by `pytest_plugins`, so that an environment still
    holding an older install's `pytest11` entry point (which loaded it already)
    does not register it twice.
    """
    import agentrt.testkit.plugin as plugin

    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "agentrt.testkit.plugin")
    _signals_at_their_defaults()


def _signals_at_their_defaults() -> None:
    """SIGINT and SIGTERM given their defaults back where this process was started ignoring
    them (a script's `pytest &`: POSIX ignores SIGINT in a background command without job
    control; a host keeping SIGTERM). An ignored signal passes to every child across `exec`,
    and the tests end their children with real signals, as a person or a service manager
    would (test_suite_signals.py). Before xdist starts its workers, which inherit it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile agentrt's modules once, before any test starts a child process.

    An editable install compiles nothing, and where `PYTHONDONTWRITEBYTECODE` is
    set (it is on the project's machines) no child writes the bytecode it compiles,
    so every child process the suite starts would compile agentrt from source again
    (1.5x the CPU of `import agentrt`, decision 0061). Reading bytecode is still
    allowed, so writing it once here serves them all. Only the controller does it,
    not each xdist worker.
    """
    if hasattr(session.config, "workerinput"):
        return
    import compileall

    import agentrt

    compileall.compile_dir(Path(agentrt.__file__).parent, quiet=2, workers=1)
    # Likewise the test modules' assert-rewritten bytecode, for the xdist workers.
    from tests.support import rewrite_cache

    rewrite_cache.write(session.config)
    _build_hypothesis_character_table()
    _vacuum_the_test_server()


def _build_hypothesis_character_table() -> None:
    """Build Hypothesis's table of the characters UTF-8 encodes once, here, for the workers.

    `st.text()` and `st.characters(codec="utf-8")` need it; Hypothesis builds it by
    encoding every code point (about 3.4 s of CPU), once per process, and keeps it in
    `.hypothesis/` (not in a clone: it is ignored). From a fresh clone each xdist worker
    built it again on its first draw of a text. Built by the controller before the
    workers start, each worker reads it from `.hypothesis/` (milliseconds); once it is
    there, this is that read too.

    This hook runs before Hypothesis's own `pytest_sessionstart`, which ends its plugin's
    initialization: Hypothesis then warns of slow code in a plugin (this is that code, on
    purpose), which `PYTHONWARNINGS=error` made an INTERNALERROR. Not said here."""
    import warnings

    from hypothesis import strategies as st
    from hypothesis.errors import HypothesisSideeffectWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HypothesisSideeffectWarning)
        st.characters(codec="utf-8").validate()


def _vacuum_the_test_server() -> None:
    """`VACUUM` the test database once per run, before any test makes a schema in it.

    PostgreSQL tests make schemas and drop them (fewer since the pool of decision 0105:
    a schema a test changed, and those of the tests outside it); on a server with autovacuum off
    (this project's machines) the dead catalog rows pile up from run to run, and the
    store's per-transaction schema check slows with them: one step measured 76.5 ms on
    such a server and 9.2 ms after one `VACUUM` (docs/postgres.md, "Keep the catalogs
    vacuumed"). On a vacuumed server it takes tens of milliseconds. A role that may not
    vacuum the catalogs gets PostgreSQL's warnings, and the run goes on.
    """
    url = os.environ.get("AGENTRT_TEST_POSTGRES_URL")
    if not url:
        return
    try:
        import psycopg
    except ImportError:
        return  # the PostgreSQL half then fails or skips with its own one line
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("VACUUM")
    except psycopg.Error as exc:
        # The tests that need the server say what is wrong with it; this is only upkeep.
        print(f"agentrt tests: could not VACUUM the test database: {type(exc).__name__}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop the schemas this process's pool kept for the PostgreSQL tests (decision 0105);
    each xdist worker has its own pool and drops its own."""
    close_schema_pool()


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist does not know it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the README's command) runs one worker per core and two more.

    Part of the suite waits rather than computes (a PostgreSQL server's answers, leases
    waited out on its clock, children started and signalled): the extra workers fill
    those waits. Measured from one clone on two cores, nothing else running, the two
    counts alternated (decision 0236, docs/performance.md "Session 30"): 4 workers 355 s
    and 397 s, the machine's cores busy 96%; 3 workers 371 s and 432 s, 87-89% busy
    (session 10's smaller suite had measured 3 best: decision 0102).
    """
    return (os.cpu_count() or 1) + 2


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything collection imported (every framework's modules) frozen out of the
    collector's reach: a collection, automatic or a test's own, then walks only what
    the tests made since, not the whole of every imported package again."""
    import gc

    gc.collect()
    gc.freeze()
