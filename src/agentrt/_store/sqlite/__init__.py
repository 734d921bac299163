"""The SQLite backend: one file, WAL, `synchronous=FULL`, one writer at a time.

`SqliteStore` (opened by `open_sqlite_store` / `open_sqlite_existing`) and the
transaction it hands out, `SqliteTx`, are the embedded default store. Everything
that knows SQL, `sqlite3` or the file's layout lives in this package: the
connections and pragmas (`_connection`), the file's safety (`_filesafety`), the
schema and its migrations (`_migrations`), the row codecs (`_codecs`), the
transaction core and the chain's head (`_tx`), the named reads and writes
(`_reads`, `_writes`), the chain walk's rows (`_chain_rows`) and the proxy's
rows (`_proxy_rows`).
"""

from ._store import SqliteStore
from ._store import open_existing as open_sqlite_existing
from ._store import open_store as open_sqlite_store
from ._writes import SqliteTx

__all__ = ["SqliteStore", "SqliteTx", "open_sqlite_existing", "open_sqlite_store"]
