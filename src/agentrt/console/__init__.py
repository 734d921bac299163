"""The web approval console: `agentrt console --db runs.db`.

A small site an operator opens in a browser: the runs waiting for a person
first, then every run; a run's waiting request field by field exactly as it is
hashed, decided with a note and bound to the hash displayed; the audit trail as
a timeline with the chain's verification; live updates while a run moves.

It is an extra (`pip install 'agentrt[console]'`: Starlette and uvicorn);
importing this package imports them, and the core never imports it. Every
asset is in the package (`static/`); nothing is fetched from elsewhere.

Invariants: the console reads through `agentrt.view` and the store's read
methods on a read-only store, and decides only through `agentrt.approve`,
`agentrt.reject` and `agentrt.cancel` with the hash it showed, so it never
decides a request it did not display; everything a model or a server wrote is
escaped (`_html`); who may use it and what the browser is told is `_security`
(decision 0024); the app is `_app`, the pages `_pages`, the reads `_data`.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:
    # ModuleNotFoundError naming the missing module: `agentrt console` answers it in one line.
    raise ModuleNotFoundError(
        "agentrt.console needs Starlette and uvicorn: pip install 'agentrt[console]'",
        name=exc.name,
    ) from exc

from ._app import create_app
from ._security import ConsoleConfig, is_loopback
from ._serve import serve

__all__ = ["ConsoleConfig", "create_app", "is_loopback", "serve"]
