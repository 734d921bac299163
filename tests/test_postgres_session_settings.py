"""What the URL, the role's and the database's settings do to the store (decision 0157).

A URL's parameters reach libpq as written (a `%20` a space, not a `+`); the store's
session sets its own client encoding (UTF-8) and DateStyle (ISO) over the role's, the
database's and the environment's; a database not in UTF-8 is refused at open; the
migration is READ COMMITTED whatever the role's default isolation; a role that may not
use the schema is told so; a role granted only SELECT reads everything. Each test makes
its roles, schemas or databases and drops them (`support/pg_roles.py`).
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
import uuid

import psycopg
import pytest

import agentrt
from agentrt import Decision, RunStatus
from agentrt._store.postgres._store import drop_schema
from agentrt.cli import main
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.pg_roles import base_url as _base
from support.pg_roles import database_encoded, role_with
from support.postgres import with_schema


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


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_a_database_not_in_utf8_is_refused_at_open_with_its_encoding_named(encoding: str) -> None:
    with database_encoded(encoding) as url:
        with pytest.raises(agentrt.StoreError) as refused:
            agentrt.open_store(url)
        assert f"its encoding is {encoding}" in str(refused.value)
        # Nothing was made in it.
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT to_regnamespace('agentrt')").fetchone() == (None,)


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


def test_a_role_that_may_not_use_the_schema_is_told_so_not_that_there_is_no_store() -> None:
    """Another role's store, in a schema this role has no USAGE on: every open says the role
    may not use the schema (not that there is no agentrt schema, which would send the
    operator to create one), and the command line says so in one line."""
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
