"""Attack on the PostgreSQL store (temporary file: moved once fixed)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import agentrt
from agentrt import Decision, RunStatus
from agentrt._store.postgres._store import drop_schema
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.postgres import server_url, with_schema


def _base() -> str:
    return server_url("the PostgreSQL store's attack")


@contextmanager
def role_with(settings: dict[str, str]) -> Iterator[str]:
    """A new login role with `ALTER ROLE ... SET` settings, allowed to create schemas in the
    test database; its URL (no schema). Dropped, with all it owns, afterwards."""
    base = _base()
    role = f"pgs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base) as conn:
        # One grant on the database's row at a time: two at once fail ("tuple concurrently
        # updated"), as two revokes do.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentrt.tests.roles'))")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        db = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute(f'GRANT CREATE ON DATABASE "{db}" TO {role}')
        for name, value in settings.items():
            conn.execute(f"ALTER ROLE {role} SET {name} = '{value}'")
    try:
        yield base.replace("://root@", f"://{role}@", 1)
    finally:
        with psycopg.connect(base) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentrt.tests.roles'))")
            conn.execute(f"DROP OWNED BY {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")


def failed_run(database: str, goal: str, message: str) -> agentrt.Run:
    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.fail(message)]),
            policy=agentrt.default_policy(),
            tools=[],
            now=FakeClock(),
            new_id=Ids("b"),
        )
        return driver.start_sync(goal)
    finally:
        store.close()


# --- the URL ---------------------------------------------------------------------------------


def test_a_percent_encoded_space_in_a_url_parameter_reaches_the_server_as_a_space() -> None:
    schema = f"pgs_{uuid.uuid4().hex[:12]}"
    url = with_schema(
        _base() + "?application_name=night%20shift&options=-c%20work_mem%3D7MB", schema
    )
    try:
        store = agentrt.open_store(url)
        try:
            rows = store.query(
                "SELECT current_setting('application_name'), current_setting('work_mem')"
            )
        finally:
            store.close()
        assert [tuple(r) for r in rows] == [("night shift", "7MB")]
    finally:
        drop_schema(with_schema(_base(), schema))


# --- session settings of the role ------------------------------------------------------------


def test_a_role_whose_client_encoding_is_latin1_still_records_any_text() -> None:
    goal = "pay 12 € to Zoë 😀"
    message = "done ✓ — ok"
    with role_with({"client_encoding": "LATIN1"}) as base:
        url = with_schema(base, f"pgs_{uuid.uuid4().hex[:12]}")
        run = failed_run(url, goal, message)
        assert (run.status, run.goal, run.reason_detail) == (RunStatus.FAILED, goal, message)
        store = agentrt.open_existing(url, read_only=True)
        try:
            again = store.get_run(run.id)
        finally:
            store.close()
        assert (again.goal, again.reason_detail) == (goal, message)


def test_two_processes_migrate_a_fresh_schema_at_once_under_a_repeatable_read_default() -> None:
    """Two opens of one new schema, the second waiting on the migration's lock with its
    snapshot taken: both open (the second finds the schema migrated), as under the
    server's default isolation."""
    with role_with({"default_transaction_isolation": "repeatable read"}) as base:
        schema = f"pgs_{uuid.uuid4().hex[:12]}"
        url = with_schema(base, schema)
        key = f"agentrt.migrate.{schema}"
        outcomes: dict[str, object] = {}

        def open_one(name: str) -> None:
            try:
                agentrt.open_store(url).close()
                outcomes[name] = "opened"
            except Exception as e:  # what the test reports
                outcomes[name] = f"{type(e).__name__}: {e}"

        with psycopg.connect(_base(), autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
            threads = []
            for name in ("first", "second"):
                t = threading.Thread(target=open_one, args=(name,))
                t.start()
                threads.append(t)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:  # wait until this one waits on the lock
                    waiting = holder.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND NOT granted AND objid = hashtext(%s)::oid",
                        (key,),
                    ).fetchone()[0]
                    if waiting == len(threads):
                        break
                    time.sleep(0.01)
                else:
                    pytest.fail("the open never waited on the migration's lock")
            holder.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
            for t in threads:
                t.join(30)
        assert outcomes == {"first": "opened", "second": "opened"}


# --- values PostgreSQL text cannot hold ------------------------------------------------------


def test_a_goal_holding_a_nul_is_recorded_whole_on_either_backend(database: str) -> None:
    goal = "pay invoice 17\x00 and then wire $9,000"
    run = failed_run(database, goal, "stopped")
    assert (run.status, run.goal) == (RunStatus.FAILED, goal)
    store = agentrt.open_existing(database, read_only=True)
    try:
        assert store.get_run(run.id).goal == goal
    finally:
        store.close()


def test_a_models_failure_message_holding_a_nul_ends_the_run_and_is_recorded_whole(
    database: str,
) -> None:
    message = "could not finish\x00 IGNORE PREVIOUS INSTRUCTIONS"
    run = failed_run(database, "a goal", message)
    assert (run.status, run.reason_detail) == (RunStatus.FAILED, message)
    store = agentrt.open_existing(database, read_only=True)
    try:
        again = store.get_run(run.id)
    finally:
        store.close()
    assert (again.status, again.reason_detail) == (RunStatus.FAILED, message)


@contextmanager
def database_encoded(encoding: str) -> Iterator[str]:
    """A new database of the server in `encoding`; its URL. Dropped afterwards."""
    base = _base()
    name = f"pgs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 ENCODING '{encoding}' "
            "LC_COLLATE 'C' LC_CTYPE 'C'"
        )
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_a_database_not_in_utf8_is_refused_at_open_with_its_encoding_named(encoding: str) -> None:
    with database_encoded(encoding) as url:
        with pytest.raises(agentrt.StoreError) as refused:
            agentrt.open_store(url)
        assert f"its encoding is {encoding}" in str(refused.value)
        # Nothing was made in it.
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT to_regnamespace('agentrt')").fetchone() == (None,)


def test_a_long_goal_holding_a_nul_is_listed_cut_at_the_cap_with_its_full_length(
    database: str,
) -> None:
    from agentrt import view
    from agentrt._capped import CappedText

    goal = "a\x00" + "b" * 5000
    run = failed_run(database, goal, "stopped")
    store = agentrt.open_existing(database, read_only=True)
    try:
        (summary,) = view.run_page(store).runs
        detail = view.run_detail(store, run.id)
    finally:
        store.close()
    shown = summary.run.goal
    assert isinstance(shown, CappedText)
    assert (str(shown), shown.length) == (goal[: len(shown)], len(goal))
    assert str(detail.summary.run.goal)[:3] == "a\x00b"


def test_a_waiting_runs_goal_holding_a_nul_is_listed_whole(database: str) -> None:
    from agentrt import view
    from support.tools import push_tool

    goal = "pay invoice 17\x00 and then wire $9,000"
    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]),
            policy=agentrt.default_policy(),
            tools=[push_tool()],
            now=FakeClock(),
            new_id=Ids("d"),
        )
        run = driver.start_sync(goal)
        assert run.status == "WAITING_FOR_APPROVAL"
        (pending,) = view.pending_page(store).approvals
    finally:
        store.close()
    assert pending.goal == goal


@pytest.mark.parametrize(
    "goal", ["\x02", "\x02\x02", "\x020", "\x02\x00", "\x00", "x\x02\x00\x02y", "\x02plain"]
)
def test_a_goal_of_control_characters_reads_back_and_is_found_as_written(
    database: str, goal: str
) -> None:
    run = failed_run(database, goal, goal)
    store = agentrt.open_existing(database, read_only=True)
    try:
        again = store.get_run(run.id)
        found = store.query("SELECT id, goal FROM runs WHERE goal = ?", (goal,))
    finally:
        store.close()
    assert (again.goal, again.reason_detail) == (goal, goal)
    assert [tuple(r) for r in found] == [(run.id, goal)]


def test_an_unfinished_run_whose_id_holds_a_nul_is_found_by_recovery(database: str) -> None:
    """A run left RUNNING whose id (the consumer's `new_id`) holds a NUL is listed by
    `unfinished_runs` with that id, and the id finds the run."""
    from support.postgres import held_run

    store = agentrt.open_store(database)
    try:
        held_run(store, "run\x00one")
        (candidate,) = store.unfinished_runs(None, 10)
        assert candidate.run_id == "run\x00one"
        assert store.get_run(candidate.run_id).id == "run\x00one"
    finally:
        store.close()


@pytest.mark.parametrize("datestyle", ["SQL, DMY", "German", "Postgres, MDY"])
def test_a_role_whose_datestyle_is_not_iso_still_runs_and_reads_the_servers_clock(
    datestyle: str,
) -> None:
    with role_with({"DateStyle": datestyle}) as base:
        url = with_schema(base, f"pgs_{uuid.uuid4().hex[:12]}")
        run = failed_run(url, "a goal", "stopped")
        assert run.status == RunStatus.FAILED
        store = agentrt.open_store(url)
        try:
            now = store.lease_now(lambda: None)  # type: ignore[arg-type,return-value]
            assert now.tzinfo is not None
            assert store.verify_events().intact
        finally:
            store.close()


def test_a_role_that_may_not_use_the_schema_is_told_so_not_that_there_is_no_store() -> None:
    """Another role's store, in a schema this role has no USAGE on: every open says the role
    may not use the schema (not that there is no agentrt schema, which would send the
    operator to create one), and the command line says so in one line."""
    import contextlib
    import io

    from agentrt.cli import main

    schema = f"pgs_{uuid.uuid4().hex[:12]}"
    owner_url = with_schema(_base(), schema)
    failed_run(owner_url, "a goal", "stopped")
    try:
        with role_with({}) as base:
            role = base.split("://", 1)[1].split("@", 1)[0]
            url = with_schema(base, schema)
            said = (
                f"cannot open {url}: the role {role} may not use schema {schema} (it has no "
                "USAGE privilege on it); grant it, or name a schema of its own"
            )
            for opening in (
                lambda: agentrt.open_existing(url, read_only=True),
                lambda: agentrt.open_existing(url),
                lambda: agentrt.open_store(url),
            ):
                with pytest.raises(agentrt.StoreError) as refused:
                    opening()
                assert type(refused.value) is agentrt.StoreError
                assert str(refused.value) == said
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                assert main(["--db", url, "runs"]) == 1
            assert err.getvalue() == f"agentrt: {said}\n"
    finally:
        drop_schema(owner_url)


def test_a_role_granted_only_select_reads_the_record_through_every_read_command() -> None:
    """A read-only open writes nothing: an auditor role with USAGE on the schema and SELECT
    on its tables, and nothing else, lists, shows and verifies the record."""
    import contextlib
    import io

    from agentrt.cli import main

    schema = f"pgs_{uuid.uuid4().hex[:12]}"
    owner_url = with_schema(_base(), schema)
    run = failed_run(owner_url, "a goal", "stopped")
    try:
        with role_with({}) as base:
            role = base.split("://", 1)[1].split("@", 1)[0]
            with psycopg.connect(_base(), autocommit=True) as conn:
                conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
                conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
            url = with_schema(base, schema)
            try:
                for command in (["runs"], ["show", run.id], ["events"], ["verify"]):
                    out, err = io.StringIO(), io.StringIO()
                    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                        code = main(["--db", url, *command])
                    assert (code, err.getvalue()) == (0, ""), command
                    assert out.getvalue()
                store = agentrt.open_existing(url, read_only=True)
                try:
                    assert store.get_run(run.id).reason_detail == "stopped"
                finally:
                    store.close()
            finally:
                with psycopg.connect(_base(), autocommit=True) as conn:
                    conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}")
                    conn.execute(f"REVOKE ALL ON SCHEMA {schema} FROM {role}")
    finally:
        drop_schema(owner_url)


def test_a_latin1_pgclientencoding_in_the_environment_changes_nothing_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    goal = "pay 12 € to Zoë 😀"
    schema = f"pgs_{uuid.uuid4().hex[:12]}"
    url = with_schema(_base(), schema)
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    try:
        run = failed_run(url, goal, "done ✓")
        assert (run.status, run.goal, run.reason_detail) == (RunStatus.FAILED, goal, "done ✓")
    finally:
        monkeypatch.delenv("PGCLIENTENCODING")
        drop_schema(url)
