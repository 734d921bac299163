"""The store layer: the only code that holds SQL, and the way the rest of the package opens a store.

`Store` and `Tx` (`_base`) are the interface the rest of the package holds;
`open_store(target)` and `open_existing(target, read_only)` choose a backend
by what `target` names: a `postgresql://` URL is a schema on a PostgreSQL
server (`postgres/`, which alone imports psycopg, loaded only then); anything
else is a SQLite file path (or `":memory:"`), opened by the SQLite backend in
`sqlite/`. Each backend is a
package of its own; nothing above this layer imports a backend's driver or
writes SQL (`tests/test_layering.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, cast

from .._db_url import other_scheme_refusal
from .._errors import ConfigError, StoreError
from .._records import Run
from ._base import Renewer, Snapshot, Store, Tx
from .sqlite import SqliteStore, open_sqlite_existing, open_sqlite_store
from .sqlite._codecs import run_from_row
from .sqlite._migrations import (
    CREATE_IN_SCHEMA,
    CREATE_ONE,
    MIGRATE_IT,
    RUNTIME_VERSION,
    SCHEMA_VERSION,
)

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def _is_postgres(target: object) -> bool:
    return isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES)


def refuse_other_url(target: object) -> None:
    """Refuse a URL of a scheme agentrt does not read (`StoreError`, its password hidden),
    rather than open it as a SQLite file's path (decision 0191); nothing for a PostgreSQL
    URL, a path or a `Path`. For code that turns a database string into a `Path` (which
    folds the URL's `//`) before any open could see it."""
    refusal = other_scheme_refusal(target) if isinstance(target, str) else None
    if refusal is not None:
        raise StoreError(refusal)


def open_store(path: str | os.PathLike[str], *, chain_partitions: int | None = None) -> Store:
    """Open the database at `path` for writing, creating it (0600) or migrating it as needed.

    A `postgresql://` URL opens (creating or migrating) the store's schema on that
    server instead (`?schema=NAME`, default `agentrt`; docs/postgres.md).

    `chain_partitions` is N, the event chain's partitions, for a record created now
    (decision 0093; default 1 for SQLite, 16 for PostgreSQL); a record that exists
    keeps its own N, and another given for it is refused (`StoreError`).

    `":memory:"` gives a private in-memory store. Refuses a symlink, a file with
    a second hard link, an insecure file, sidecar or directory, a trigger or
    view, an unreadable schema, a newer schema, and a file whose
    `min_writer_version` is above this runtime. A URL of another scheme
    (`postgresql+psycopg://`, `sqlite://`) is refused, not taken for a path.
    """
    refuse_other_url(path)
    if _is_postgres(path):
        from .postgres import open_postgres_store

        return open_postgres_store(str(path), chain_partitions=chain_partitions)
    return open_sqlite_store(path, chain_partitions=chain_partitions)


class Migrated(NamedTuple):
    """What a migration did: the version it found (0: it created the tables) and the one it
    left (`reached`); found == reached: there was nothing to do."""

    found: int
    reached: int


def migrate_store(
    path: str | os.PathLike[str], *, proxy: bool, now: datetime
) -> tuple[Migrated, Migrated | None]:
    """The operator's explicit migration (`agentrt migrate`, decision 0201): create the
    record at `path` if it holds none, or apply its pending migrations, and with `proxy`
    the MCP proxy's tables too (applied at `now`); what each did (None: not asked).

    As `open_store`, and refusing what it would change beyond the record: a database that
    holds tables but no agentrt record (another program's; a new path or an empty file or
    schema is created), a file whose mode is loose (refused, never tightened). A newer
    schema or a `min_writer_version` above this runtime is refused as by `open_store`."""
    refuse_other_url(path)
    store: SqliteStore  # or PostgresStore, its subclass
    if _is_postgres(path):
        from .postgres import open_postgres_store

        store = open_postgres_store(str(path), asked=True)
    else:
        if os.fspath(path) == ":memory:":
            raise StoreError("a migration needs a database file; ':memory:' is always new")
        store = open_sqlite_store(path, asked=True)
    with store:
        schema = Migrated(store.found_version, SCHEMA_VERSION)
        if not proxy:
            return schema, None
        reached = store.migrate_proxy(now)
        return schema, Migrated(store.proxy_found_version or 0, reached)


def open_existing(path: str | os.PathLike[str], read_only: bool = False) -> Store:
    """Open an existing agentrt database: never creates, never migrates.

    Refuses a symlink (`SymlinkError`), a second hard link (`HardLinkError`), an
    insecure file or directory, a trigger or view, an unreadable schema, and
    any schema version but this code's own (`SchemaVersionError`, naming which
    side is newer). A read-only open works beside a live writer and in a
    directory this process cannot write.
    """
    refuse_other_url(path)
    if _is_postgres(path):
        from .postgres import open_postgres_existing

        return open_postgres_existing(str(path), read_only)
    return open_sqlite_existing(path, read_only)


def drop_postgres_schema(url: str) -> bool:
    """Drop the PostgreSQL schema `url` names, with everything in it (False: there was
    none); `ConfigError` for anything but a `postgresql://` URL. For records made to be
    thrown away (the crash test kit's cases)."""
    if not _is_postgres(url):
        raise ConfigError(f"not a postgresql:// URL: {url!r}")
    from .postgres import drop_schema

    return drop_schema(url)


def run_from_columns(columns: Mapping[str, Any]) -> Run:
    """A run from the columns of its `runs` record (the record format's names: `status`,
    `limits_json`, `created_at`, ...), decoded as every store decodes a read of its row:
    what will not decode sets `decode_error`, never raises."""
    return run_from_row(cast(Any, dict(columns)))


__all__ = [
    "CREATE_IN_SCHEMA",
    "CREATE_ONE",
    "MIGRATE_IT",
    "RUNTIME_VERSION",
    "SCHEMA_VERSION",
    "Migrated",
    "Renewer",
    "Snapshot",
    "Store",
    "Tx",
    "drop_postgres_schema",
    "migrate_store",
    "open_existing",
    "open_store",
    "refuse_other_url",
    "run_from_columns",
]
