"""The store layer: the only code that holds SQL, and the way the rest of the package opens a store.

`open_store(target)` and `open_existing(target, read_only)` choose a backend
by what `target` names (today every target is a SQLite file path, or
`":memory:"`), and `Store` / `Tx` are what the rest of the package holds.
Each backend lives in a package of its own (`sqlite/`); nothing above this
layer imports a backend's driver or writes SQL (`tests/test_layering.py`).
"""

from __future__ import annotations

from .sqlite import SqliteStore as Store
from .sqlite import SqliteTx as Tx
from .sqlite import open_sqlite_existing as open_existing
from .sqlite import open_sqlite_store as open_store
from .sqlite._migrations import RUNTIME_VERSION

__all__ = ["RUNTIME_VERSION", "Store", "Tx", "open_existing", "open_store"]
