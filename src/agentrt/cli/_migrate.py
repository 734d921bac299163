"""`agentrt migrate`: create the database, or apply its pending migrations, when asked.

No other command creates or migrates a database; this one does, and only that
(decision 0201): a new path (or an empty file or schema) gets a record, an older
release's record its pending migrations, a current one nothing. With `--proxy`, the
MCP proxy's tables are created or migrated too. It prints one line, the database
named as `shown_db` names it (a URL's password `***`): what it found and did. A
database holding another program's tables, a record a newer agentrt wrote, a file
whose mode is loose or a role that may not create the tables is refused by the store,
in one sentence, nothing changed (exit 1). All of it is the store's
(`agentrt._store.migrate_store`); no SQL here.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..trace import sanitize
from ._opening import migrate_db
from ._output import EXIT_OK, Output, db_path, shown_db

if TYPE_CHECKING:
    from .._store import Migrated


def migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--proxy",
        action="store_true",
        help="create or migrate the MCP proxy's tables too (agentrt-proxy's, docs/mcp.md)",
    )


def cmd_migrate(args: argparse.Namespace, out: Output) -> int:
    schema, proxy = migrate_db(args, proxy=bool(args.proxy))
    shown = sanitize(shown_db(db_path(args)))
    if _done(schema) != "current" or (proxy is not None and _done(proxy) != "current"):
        # Nothing to do is no change: a lost report then says that nothing was changed.
        out.done = f"the migration was done ({shown}: {_said(schema, 'schema version')}" + (
            ")" if proxy is None else f"; the proxy's tables {_said(proxy, 'version')})"
        )
    if out.json:
        out.document(
            {"database": shown_db(db_path(args)), "schema": _json(schema),
             "proxy": None if proxy is None else _json(proxy)}
        )  # fmt: skip
        return EXIT_OK
    line = f"{shown}: {_said(schema, 'schema version')}"
    if proxy is not None:
        line += f"; the proxy's tables {_said(proxy, 'version')}"
    out.line(line)
    return EXIT_OK


def _done(migrated: Migrated) -> str:
    if migrated.found == 0:
        return "created"
    return "current" if migrated.found == migrated.reached else "migrated"


def _said(migrated: Migrated, version: str) -> str:
    """What was done, as the line says it (`version`: what the number is called)."""
    said = {
        "created": f"created at {version} {migrated.reached}",
        "current": f"already at {version} {migrated.reached}",
        "migrated": f"migrated from {version} {migrated.found} to {migrated.reached}",
    }
    return said[_done(migrated)]


def _json(migrated: Migrated) -> dict[str, Any]:
    return {"done": _done(migrated), "from": migrated.found, "to": migrated.reached}


__all__ = ["cmd_migrate", "migrate_arguments"]
