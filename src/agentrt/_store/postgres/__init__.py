"""The PostgreSQL backend: one schema on a server that many hosts share.

`PostgresStore` (opened by `open_postgres_store` / `open_postgres_existing` from a
`postgresql://` URL) and its transaction `PostgresTx` implement the same store
interface as the SQLite backend and pass the same contract suite. Only this
package imports psycopg: the URL and connections (`_connection`), the schema
and its migrations (`_migrations`), the transaction's locks and clock (`_tx`),
the store (`_store`). See docs/postgres.md and decisions 0079-0081.
"""

from ._connection import is_postgres_url
from ._store import PostgresStore, drop_schema
from ._store import open_existing as open_postgres_existing
from ._store import open_store as open_postgres_store
from ._tx import PostgresTx

__all__ = [
    "PostgresStore",
    "PostgresTx",
    "drop_schema",
    "is_postgres_url",
    "open_postgres_existing",
    "open_postgres_store",
]
