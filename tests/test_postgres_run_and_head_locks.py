"""A run's lock takes its chain partition's head with it, in one statement (decision 0108).

The order every transaction takes them in is kept: the run, then the head. A lock
that waits for the run holds no head meanwhile, and one that waits for the head
already holds the run. Each wait is seen on the server (`pg_locks`: the store's
backend waiting for a lock), never guessed from a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

import agentrt
from agentrt._chain import partition_of
from agentrt._errors import StoreError, UnsafeSchemaError
from agentrt._store.postgres import PostgresStore
from support.postgres import held_run, postgres_schema, store_holding_r1

NOW = datetime(2026, 12, 3, tzinfo=UTC)


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the run's and the head's locks")


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    with store_holding_r1(url, NOW) as opened:
        yield opened


def other(url: str) -> psycopg.Connection[Any]:
    """A connection of its own to the store's schema, in a transaction."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    conn = psycopg.connect(base)
    conn.execute(f"SET search_path TO {schema}")
    conn.execute("SET lock_timeout = 0")
    return conn


def locked_elsewhere(url: str, sql: str, params: tuple[Any, ...]) -> bool:
    """Whether the row `sql` selects is locked by another transaction (`NOWAIT` refused)."""
    with other(url) as probe:
        try:
            probe.execute(sql + " FOR UPDATE NOWAIT", params)
        except pg_errors.LockNotAvailable:
            return True
        finally:
            probe.rollback()
    return False


def head_locked(url: str, part: int) -> bool:
    return locked_elsewhere(url, "SELECT 1 FROM chain_head WHERE part = %s", (part,))


def run_locked(url: str, run_id: str) -> bool:
    return locked_elsewhere(url, "SELECT 1 FROM runs WHERE id = %s", (run_id,))


def wait_until_waiting(url: str, pid: int) -> None:
    """Return once the backend `pid` waits for a lock (asked of the server, not slept)."""
    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as watcher:
        for _ in range(100_000):
            found = watcher.execute(
                "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            ).fetchone()
            if found is not None:
                return
    raise AssertionError(f"backend {pid} never waited for a lock")


def lock_in_thread(store: PostgresStore) -> tuple[threading.Thread, list[Any]]:
    """`lock_run("r1")` in a transaction on a thread; its outcome lands in the list."""
    outcome: list[Any] = []

    def work() -> None:
        try:
            with store.transaction() as tx:
                outcome.append(tx.lock_run("r1"))
        except BaseException as e:  # reported by the test
            outcome.append(e)

    thread = threading.Thread(target=work)
    thread.start()
    return thread, outcome


def test_a_runs_lock_holds_its_partitions_head_and_the_first_append_reads_it_from_there(
    store: PostgresStore, url: str
) -> None:
    part = partition_of("r1", store.partitions)
    with store.transaction() as tx:
        assert tx.lock_run("r1") is not None
        assert run_locked(url, "r1") and head_locked(url, part)
        sent: list[str] = []
        execute = tx.execute

        def counted(sql: str, params: Any = ()) -> Any:
            sent.append(sql)
            return execute(sql, params)

        tx.execute = counted  # type: ignore[method-assign]
        tx.append_event("r1", "", NOW, "run.note", {"n": 1})
        assert sent == []  # the head came with the run's lock
    report = store.verify_events()
    assert report.intact
    assert [e.type for e in store.list_events("r1")] == ["run.created", "run.started", "run.note"]


def test_a_lock_waiting_for_the_run_holds_no_head_meanwhile(store: PostgresStore, url: str) -> None:
    part = partition_of("r1", store.partitions)
    holder = other(url)
    holder.execute("SELECT 1 FROM runs WHERE id = 'r1' FOR UPDATE")
    thread, outcome = lock_in_thread(store)
    try:
        wait_until_waiting(url, store._pg.info.backend_pid)
        assert not head_locked(url, part)
    finally:
        holder.rollback()
        holder.close()
        thread.join()
    assert outcome and outcome[0] is not None and not isinstance(outcome[0], BaseException)


def test_a_lock_waiting_for_the_head_already_holds_the_run(store: PostgresStore, url: str) -> None:
    part = partition_of("r1", store.partitions)
    holder = other(url)
    holder.execute("SELECT 1 FROM chain_head WHERE part = %s FOR UPDATE", (part,))
    thread, outcome = lock_in_thread(store)
    try:
        wait_until_waiting(url, store._pg.info.backend_pid)
        assert run_locked(url, "r1")
    finally:
        holder.rollback()
        holder.close()
        thread.join()
    assert outcome and outcome[0] is not None and not isinstance(outcome[0], BaseException)


def test_a_run_whose_partition_has_no_head_row_is_still_locked_and_its_append_refused(
    store: PostgresStore, url: str
) -> None:
    part = partition_of("r1", store.partitions)
    with other(url) as damage:
        damage.execute("DELETE FROM chain_head WHERE part = %s", (part,))
        damage.commit()
    with store.transaction() as tx:
        guarded = tx.lock_run("r1")
        assert guarded is not None and guarded.lease.owner == "me"
        assert run_locked(url, "r1")
        with pytest.raises(StoreError, match="the chain has no head for partition"):
            tx.append_event("r1", "", NOW, "run.note", {})


def test_a_runs_lock_first_in_a_transaction_is_refused_before_a_row_level_policy_runs(
    url: str,
) -> None:
    """The guard rides in the transaction's first statement when that is a run's lock
    (decision 0108): the server works it out before it reads any row, so a policy on
    `runs` (whose check here would fail with its own message) never runs for this role."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    role = f"r_{schema}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        made = agentrt.open_store(url)  # made by the superuser, then used by the role
        made.close()
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            admin.execute(
                f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role}"
            )
        as_role = url.replace("root@", f"{role}@", 1)
        store = agentrt.open_store(as_role)
        assert isinstance(store, PostgresStore)
        try:
            held_run(store, "r1", NOW)
            with psycopg.connect(base, autocommit=True) as admin:
                admin.execute(f"SET search_path TO {schema}")
                admin.execute(
                    "CREATE FUNCTION policy_ran() RETURNS boolean LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'the policy ran'; END $$"
                )
                admin.execute("ALTER TABLE runs ENABLE ROW LEVEL SECURITY")
                admin.execute("CREATE POLICY watch ON runs USING (policy_ran())")
            with (
                pytest.raises(UnsafeSchemaError, match="row-level policy 'watch'"),
                store.transaction() as tx,
            ):
                tx.lock_run("r1")
        finally:
            store.close()
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
