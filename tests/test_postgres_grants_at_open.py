"""A role missing a grant the store needs is refused at open, in one line naming the grant.

Found by following docs/postgres.md as a new operator: a runtime role missing one
privilege (an `UPDATE` revoked, or the tables made before `ALTER DEFAULT PRIVILEGES`
ran, so that none was granted) opened the store, and the first write failed in the
middle of a run with `permission denied for table chain_head`; a role with no `SELECT`
was told `permission denied for table schema_migrations`, and no more. Each open now
checks the role's privileges on the store's tables (`SELECT`, `INSERT`, `UPDATE` for a
writer, `SELECT` for a read-only open) and says which are missing and the `GRANT` that
gives them. Roles are the whole server's: each test makes its own and drops them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

import agentrt
from agentrt._store.postgres import _migrations as pg_migrations
from agentrt.cli import main
from test_postgres_docs import names, set_up

__all__ = ["names"]  # the fixture, imported for its tests


def revoke(names: dict[str, str], statement: str) -> None:
    with psycopg.connect(names["base"], autocommit=True) as conn:
        conn.execute(statement.format(schema=names["schema"], runtime=names["runtime"]))


def test_a_writer_missing_one_grant_is_refused_at_open_and_may_still_read(
    names: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    owner, runtime = set_up(names)
    agentrt.open_store(owner).close()
    revoke(names, "REVOKE UPDATE ON {schema}.chain_head FROM {runtime}")
    said = (
        f"cannot open {runtime}: the role {names['runtime']} lacks UPDATE on chain_head; a "
        "writer needs SELECT, INSERT and UPDATE on every table of the schema (as the owner: "
        f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {names['schema']} TO "
        f"{names['runtime']})"
    )
    for opening in (agentrt.open_existing, agentrt.open_store):
        with pytest.raises(agentrt.StoreError) as refused:
            opening(runtime)
        assert str(refused.value) == said
    agentrt.open_existing(runtime, read_only=True).close()
    assert main(["--db", runtime, "runs"]) == 0
    assert main(["--db", runtime, "approve", "0123456789ab", "--yes"]) == 1
    assert capsys.readouterr().err == f"agentrt: {said}\n"


def test_tables_granted_nothing_are_refused_to_a_reader_naming_select(
    names: dict[str, str],
) -> None:
    owner, runtime = set_up(names)
    agentrt.open_store(owner).close()
    # As when ALTER DEFAULT PRIVILEGES ran after the owner had made the tables.
    revoke(names, "REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {runtime}")
    with pytest.raises(agentrt.StoreError) as refused:
        agentrt.open_existing(runtime, read_only=True)
    assert str(refused.value) == (
        f"cannot open {runtime}: the role {names['runtime']} lacks SELECT on agentrt_meta, "
        "approvals, chain_head, events, model_calls, runs, schema_migrations, steps, "
        "stored_values, tool_specs; a reader needs SELECT on every table of the schema (as "
        f"the owner: GRANT SELECT ON ALL TABLES IN SCHEMA {names['schema']} TO "
        f"{names['runtime']})"
    )


def test_the_runtime_role_before_the_owner_is_told_the_owner_opens_it_first(
    names: dict[str, str],
) -> None:
    _, runtime = set_up(names)
    with pytest.raises(agentrt.StoreError) as refused:
        agentrt.open_store(runtime)
    assert str(refused.value) == (
        f"cannot open {runtime}: schema {names['schema']} holds no agentrt store yet, and "
        f"this role may not create its tables (permission denied for schema "
        f"{names['schema']}): the schema's owner creates them first (agentrt --db URL migrate, "
        "or open_store)"
    )


def test_the_runtime_role_after_an_upgrade_is_told_the_owner_migrates_it(
    names: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, runtime = set_up(names)
    with monkeypatch.context() as old:  # the owner made it with an agentrt of schema 4
        old.setattr(pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[:4])
        old.setattr(pg_migrations, "SCHEMA_VERSION", 4)
        old.setattr(pg_migrations, "settle_partitions", lambda *a, **k: None)
        agentrt.open_store(owner).close()
    with pytest.raises(agentrt.StoreError) as refused:
        agentrt.open_store(runtime)
    said = str(refused.value)
    assert said.startswith(
        f"cannot open {runtime}: the store is at schema version 4 and this agentrt needs "
        f"{pg_migrations.SCHEMA_VERSION}, and this role may not migrate it (must be owner of "
    )
    assert said.endswith(
        "): the schema's owner migrates it first (agentrt --db URL migrate, or open_store)"
    )
    agentrt.open_store(owner).close()  # as the document says; then the runtime role opens it
    agentrt.open_store(runtime).close()


def test_a_proxy_missing_a_grant_on_its_own_tables_is_refused_at_open(
    names: dict[str, str],
) -> None:
    # The proxy's tables are the schema's too: a runtime role missing INSERT on
    # proxy_requests opened (the store's tables were all granted) and its first call failed
    # with `permission denied for table proxy_requests`, mid-call.
    owner, runtime = set_up(names)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with agentrt.open_store(owner) as store:
        store.migrate_proxy(now)  # the owner's `agentrt-proxy --check`, as the document says
    revoke(names, "REVOKE INSERT ON {schema}.proxy_requests FROM {runtime}")
    with agentrt.open_store(runtime) as store, pytest.raises(agentrt.StoreError) as refused:
        store.migrate_proxy(now)  # what the proxy does right after its open
    assert str(refused.value) == (
        f"cannot open {runtime}: the role {names['runtime']} lacks INSERT on proxy_requests; "
        "a writer needs SELECT, INSERT and UPDATE on every table of the schema (as the owner: "
        f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {names['schema']} TO "
        f"{names['runtime']})"
    )
    agentrt.open_store(runtime).close()  # a Driver or a Gate never touches the proxy's rows
