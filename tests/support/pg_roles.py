"""Roles and databases of their own on the test PostgreSQL server, for tests of what a
role's or a database's settings do to the store (decision 0157).

Each is made with a unique name and dropped afterwards, with everything it owns; the
shared role and the test database are never altered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from .postgres import server_url


def base_url() -> str:
    """The test server's URL (skips, or fails under CI, without one)."""
    return server_url("a role's or a database's settings")


@contextmanager
def role_with(settings: dict[str, str]) -> Iterator[str]:
    """A new login role with `ALTER ROLE ... SET` settings, allowed to create schemas in the
    test database; its URL (no schema). Dropped, with all it owns, afterwards."""
    base = base_url()
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


@contextmanager
def database_encoded(encoding: str) -> Iterator[str]:
    """A new database of the server in `encoding`; its URL. Dropped afterwards."""
    base = base_url()
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
