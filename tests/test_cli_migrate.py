"""`agentrt migrate`: the one command that creates or migrates a record, and only when asked.

Every other command opens an existing record of this schema version only. `migrate`
creates the record at a path (or in a schema) that holds none, applies the migrations an
older release's record lacks, or says the record is current, in one line naming the
database (a URL's password `***`); with `--proxy` it does the same for the MCP proxy's
tables. It changes nothing of a file or schema that holds another program's tables, of
a record a newer agentrt wrote, or when its role may not create the tables: refused in
one line, exit 1 (decision 0201). Real processes, real SQLite files and the real
PostgreSQL test server.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest

import agentrt
from agentrt._store.sqlite import _migrations as migrations
from support.database import pooled_schema
from support.old_records import TABLES, applied_versions, make_old_record, raw_rows
from support.pg_roles import role_with
from support.postgres import postgres_schema
from test_cli import agentrt_cmd
from test_cli_not_agentrt_file import another_applications_database, tables
from test_cli_postgres import SECRET, with_password

VERSION = migrations.SCHEMA_VERSION
PROXY_VERSION = migrations.PROXY_MIGRATIONS[-1].version


def fingerprint(path: Path) -> tuple[str, int, list[str]]:
    """The file's bytes (hashed), its mode, and what lies beside it."""
    beside = sorted(p.name for p in path.parent.iterdir())
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode, beside


def migrations_applied_at(path: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute("SELECT version, applied_at FROM schema_migrations ORDER BY 1"))
    finally:
        conn.close()


# --- SQLite ---------------------------------------------------------------------------------


def test_a_new_path_is_created_at_the_current_version_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{db}: created at schema version {VERSION}\n"
    assert db.stat().st_mode & 0o777 == 0o600
    agentrt.open_existing(db).close()  # what every other command opens
    assert applied_versions(db) == list(range(1, VERSION + 1))
    assert "proxy_migrations" not in tables(db)  # not asked for


def test_a_current_file_is_said_to_be_current_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    agentrt.open_store(db).close()
    before = migrations_applied_at(db)
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{db}: already at schema version {VERSION}\n"
    assert migrations_applied_at(db) == before


@pytest.mark.parametrize("version", [1, 4])
def test_an_older_releases_record_is_migrated_keeping_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    db = tmp_path / "old.db"
    make_old_record(db, version, monkeypatch)
    kept = tmp_path / "kept.db"
    kept.write_bytes(db.read_bytes())
    # The other commands refuse it and name the command that migrates it.
    refused = agentrt_cmd("--db", str(db), "runs")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"agentrt: refusing {db}: the database was written by an older agentrt (schema "
        f"version {version}; this agentrt {migrations.RUNTIME_VERSION} needs {VERSION}): "
        f"migrate it first: agentrt --db {db} migrate\n"
    )

    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{db}: migrated from schema version {version} to {VERSION}\n"
    assert applied_versions(db) == list(range(1, VERSION + 1))
    assert raw_rows(db, columns_of=kept) == raw_rows(kept)
    listed = agentrt_cmd("--db", str(db), "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["runs"]) == 2
    again = agentrt_cmd("--db", str(db), "migrate")
    assert again.stdout == f"{db}: already at schema version {VERSION}\n"
    assert set(TABLES) <= set(tables(db))


def test_another_programs_database_is_refused_and_left_byte_for_byte(tmp_path: Path) -> None:
    db = tmp_path / "billing.db"
    another_applications_database(db)
    before = fingerprint(db)
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {db}: this database holds no agentrt record but other tables "
        "(perhaps the path is not the one you meant); agentrt creates a record only at a new "
        "path or in an empty database: nothing was changed\n"
    )
    assert fingerprint(db) == before
    assert tables(db) == ["invoices"]


def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, but notes that happen to be here\n" * 20)
    notes.chmod(0o600)
    before = fingerprint(notes)
    done = agentrt_cmd("--db", str(notes), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(f"agentrt: cannot open {notes}: ") and "not a database" in line
    assert fingerprint(notes) == before


def test_a_loose_file_is_refused_not_tightened(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    agentrt.open_store(db).close()
    db.chmod(0o664)
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {db}: it is writable by group or others (mode 0664), and anyone "
        "who can write it can forge an approval; make it owner-only (chmod 600)\n"
    )
    assert db.stat().st_mode & 0o777 == 0o664


@pytest.mark.parametrize("made", ["empty", "record"])
def test_a_file_readable_by_others_is_refused_not_tightened(tmp_path: Path, made: str) -> None:
    """`open_store` tightens a 0644 file; the explicit command changes nothing but the record,
    so it refuses one rather than create or migrate a record anyone on the host can read."""
    db = tmp_path / "agents.db"
    if made == "empty":
        db.touch()
    else:
        agentrt.open_store(db).close()
    db.chmod(0o644)
    before = fingerprint(db)
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {db}: it is readable by group or others (mode 0644), and anyone "
        "who can read it can read every request and result it records; make it owner-only "
        "(chmod 600), then migrate (agentrt migrate leaves a file's mode to you)\n"
    )
    assert fingerprint(db) == before


def test_a_sidecar_readable_by_others_is_refused_not_tightened(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    agentrt.open_store(db).close()
    journal = tmp_path / "agents.db-journal"
    journal.write_bytes(b"")
    journal.chmod(0o644)
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {db}: its -journal file {journal} is readable by group or others (mode "
        "0644), and anyone who can read it can read every request and result it records; "
        "make it owner-only (chmod 600), then migrate (agentrt migrate leaves a file's mode "
        "to you)\n"
    )
    assert journal.stat().st_mode & 0o777 == 0o644


def test_a_record_a_newer_agentrt_wrote_is_refused_in_the_stores_words(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    agentrt.open_store(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE agentrt_meta SET value = '9.0' WHERE key = 'min_writer_version'")
    conn.close()
    before = migrations_applied_at(db)
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {db}: the database was written by a newer agentrt and may be "
        f"written only by agentrt 9.0 or later (this is {migrations.RUNTIME_VERSION}): "
        "upgrade to write it\n"
    )
    assert migrations_applied_at(db) == before


def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    agentrt.open_store(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, '')", (VERSION + 1,)
        )
    conn.close()
    done = agentrt_cmd("--db", str(db), "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {db}: the database was written by a newer agentrt (schema "
        f"version {VERSION + 1}; this agentrt {migrations.RUNTIME_VERSION} knows up to "
        f"{VERSION}): upgrade agentrt to use it\n"
    )


def test_proxy_creates_the_proxys_tables_too_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    done = agentrt_cmd("--db", str(db), "migrate", "--proxy")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"{db}: created at schema version {VERSION}; "
        f"the proxy's tables created at version {PROXY_VERSION}\n"
    )
    with agentrt.open_existing(db) as store:
        assert store.proxy_versions() == list(range(1, PROXY_VERSION + 1))
    again = agentrt_cmd("--db", str(db), "migrate", "--proxy")
    assert again.stdout == (
        f"{db}: already at schema version {VERSION}; "
        f"the proxy's tables already at version {PROXY_VERSION}\n"
    )


def test_json_says_what_was_done_as_one_document(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    made = agentrt_cmd("--db", str(db), "migrate", "--json")
    assert (made.returncode, made.stderr) == (0, "")
    assert json.loads(made.stdout) == {
        "database": str(db),
        "schema": {"done": "created", "from": 0, "to": VERSION},
        "proxy": None,
    }
    proxy = agentrt_cmd("--json", "--db", str(db), "migrate", "--proxy")
    assert json.loads(proxy.stdout) == {
        "database": str(db),
        "schema": {"done": "current", "from": VERSION, "to": VERSION},
        "proxy": {"done": "created", "from": 0, "to": PROXY_VERSION},
    }
    assert proxy.stdout.count("\n") == 1


def test_the_help_says_only_migrate_creates_or_migrates() -> None:
    done = agentrt_cmd("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "never creates or migrates one, except `agentrt migrate`" in text
    assert "migrate create the database, or apply its pending migrations" in text


# --- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture
def unmade_pg_url() -> Iterator[str]:
    """A schema name on the test server that holds nothing yet (dropped afterwards)."""
    with ExitStack() as stack:
        yield postgres_schema(stack, "agentrt migrate")


def test_a_postgres_schema_is_created_then_current_and_the_password_is_never_printed(
    unmade_pg_url: str,
) -> None:
    url = with_password(unmade_pg_url)
    shown = url.replace(SECRET, "***")
    done = agentrt_cmd("--db", url, "migrate")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{shown}: created at schema version {VERSION}\n"
    agentrt.open_existing(unmade_pg_url).close()
    again = agentrt_cmd("--db", url, "migrate", "--proxy", "--json")
    assert (again.returncode, again.stderr) == (0, "")
    assert SECRET not in again.stdout
    assert json.loads(again.stdout) == {
        "database": shown,
        "schema": {"done": "current", "from": VERSION, "to": VERSION},
        "proxy": {"done": "created", "from": 0, "to": PROXY_VERSION},
    }
    with agentrt.open_existing(unmade_pg_url) as store:
        assert store.proxy_versions() == list(range(1, PROXY_VERSION + 1))


def test_a_postgres_record_already_current_is_said_to_be(tmp_path: Path) -> None:
    with ExitStack() as stack:
        url = pooled_schema(stack, "agentrt migrate")
        done = agentrt_cmd("--db", url, "migrate")
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout == f"{url}: already at schema version {VERSION}\n"


def test_a_postgres_schema_of_another_program_is_refused_and_left_as_it_was(
    unmade_pg_url: str,
) -> None:
    base, schema = unmade_pg_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.invoices (id int)")
    done = agentrt_cmd("--db", unmade_pg_url, "migrate")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {unmade_pg_url}: this schema holds no agentrt record but other "
        "tables (perhaps the URL is not the one you meant); agentrt creates a record only in "
        "a new or empty schema: nothing was changed\n"
    )
    with psycopg.connect(base, autocommit=True) as conn:
        found = conn.execute(
            "SELECT relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    assert found == [("invoices",)]


def test_the_runtime_role_without_create_is_refused_in_one_line(unmade_pg_url: str) -> None:
    base, schema = unmade_pg_url.split("?schema=")
    with role_with({}) as runtime:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
            role = runtime.split("//")[1].split("@")[0]
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        url = with_password(f"{runtime}?schema={schema}")
        shown = url.replace(SECRET, "***")
        done = agentrt_cmd("--db", url, "migrate")
        assert (done.returncode, done.stdout) == (1, "")
        [line] = done.stderr.splitlines()
        assert line.startswith(f"agentrt: cannot open {shown}: schema {schema} holds no agentrt")
        assert f"permission denied for schema {schema}" in line
        assert line.endswith(
            "the schema's owner creates them first (agentrt --db URL migrate, or open_store)"
        )
        assert SECRET not in done.stderr
        with psycopg.connect(base, autocommit=True) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s",
                (schema,),
            ).fetchone()
        assert left == (0,)


def test_the_runtime_role_asked_for_the_proxys_tables_is_told_the_owner_makes_them(
    unmade_pg_url: str,
) -> None:
    base, schema = unmade_pg_url.split("?schema=")
    agentrt.open_store(unmade_pg_url).close()  # the owner made the store, not the proxy's
    with role_with({}) as runtime:
        role = runtime.split("//")[1].split("@")[0]
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            conn.execute(f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role}")
        url = with_password(f"{runtime}?schema={schema}")
        shown = url.replace(SECRET, "***")
        done = agentrt_cmd("--db", url, "migrate", "--proxy")
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == (
            f"agentrt: cannot open {shown}: the MCP proxy's tables are not made yet, and this "
            f"role may not create them (permission denied for schema {schema}): the schema's "
            "owner creates them first (agentrt --db URL migrate --proxy)\n"
        )
        with psycopg.connect(base, autocommit=True) as conn:
            made = conn.execute(
                "SELECT pg_catalog.to_regclass(%s)", (f"{schema}.proxy_migrations",)
            ).fetchone()
        assert made == (None,)  # nothing made


def test_the_other_commands_send_an_older_postgres_record_to_its_owners_migrate(
    unmade_pg_url: str,
) -> None:
    """The URL given may be the runtime role's, which may not migrate: the owner's is named.
    (The version's row taken out reads as an older release's schema: the refusal comes
    from the version alone, before a table is read.)"""
    base, schema = unmade_pg_url.split("?schema=")
    agentrt.open_store(unmade_pg_url).close()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {schema}.schema_migrations WHERE version = %s", (VERSION,))
    url = with_password(unmade_pg_url)
    done = agentrt_cmd("--db", url, "runs")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"agentrt: refusing {url.replace(SECRET, '***')}: the database was written by an "
        f"older agentrt (schema version {VERSION - 1}; this agentrt "
        f"{migrations.RUNTIME_VERSION} needs {VERSION}): the schema's owner migrates it "
        "first: agentrt --db OWNER_URL migrate\n"
    )
