"""Opening the database a command was given, and saying in one sentence why it was refused.

The command line opens an existing database only: it never creates or migrates
one (`open_db` refuses a missing path before the store is asked), and opens it
read-only unless the command writes; `migrate_db` alone creates or migrates one,
for `agentrt migrate`. A refusal from the store (a symlink, a
second hard link, loose modes, a foreign owner, a damaged or unsafe schema, a
newer schema version) becomes `Refused`, one sentence naming the actual
problem of the actual file (the database or its -wal, -shm or -journal file).

A `postgresql://` URL is handed to the store as it is (there is no file to look
for first); what it says goes into the sentence with the URL's password
printed `***`, as does a URL too malformed to split, or the missing extra.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._db_url import not_a_path
from .._errors import (
    AgentrtError,
    HardLinkError,
    InsecureDirectoryError,
    InsecureModeError,
    SchemaVersionError,
    StoreError,
    SymlinkError,
    UnreadableSchemaError,
    UnsafeSchemaError,
)
from ._output import arg, db_path, is_db_url, redact_db, shown_db

if TYPE_CHECKING:
    from .._store import Migrated, Store


def open_existing(path: str, read_only: bool = False) -> Store:
    """The store's `open_existing`, imported here at the first open: a command that opens
    no database (`agentrt --help`) does not load the store (decision 0090)."""
    from .._store import open_existing as store_open_existing

    return store_open_existing(path, read_only=read_only)


def open_db(args: argparse.Namespace, *, write: bool = False) -> Store:
    """The database this command was given, opened read-only unless `write`; refused in one
    sentence (`Refused`) when the store refuses it; never created."""
    path = db_path(args)
    _refuse_memory(path)
    if not not_a_path(path) and not os.path.lexists(path):
        raise StoreError(
            f"no database at {path} (agentrt opens existing databases only and never creates one)"
        )
    return refused_in_one_sentence(path, lambda: open_existing(path, read_only=not write))


def migrate_db(args: argparse.Namespace, *, proxy: bool) -> tuple[Migrated, Migrated | None]:
    """The database this command was given, created or migrated (`agentrt migrate`, the
    store's `migrate_store`); refused in one sentence (`Refused`) as `open_db` is."""
    from .._clock import wall_clock
    from .._store import migrate_store

    path = db_path(args)
    _refuse_memory(path)
    return refused_in_one_sentence(path, lambda: migrate_store(path, proxy=proxy, now=wall_clock()))


IN_MEMORY = (
    "':memory:' is a private in-memory database, gone when the command ends: give a file path"
)
"""Why `--db :memory:` is refused by every command (decision 0205): the store's own words
(`cannot open :memory:: ...`, `no database at :memory:`) do not say it."""


def _refuse_memory(path: str) -> None:
    if path == ":memory:":
        raise StoreError(IN_MEMORY)


_T = TypeVar("_T")


def refused_in_one_sentence(path: str, work: Callable[[], _T]) -> _T:
    """`work` on the database at `path`, each refusal of the store's one sentence (`Refused`):
    its own, a URL too malformed to split, a missing `postgres` extra."""
    try:
        return work()
    except AgentrtError as e:
        raise Refused(path, e) from e
    except ValueError as e:  # a URL urllib cannot split (an unclosed `[`, a bad port)
        if not is_db_url(path):
            raise
        raise Refused(path, StoreError(f"it is not a usable URL ({e})")) from None
    except ModuleNotFoundError as e:
        if not is_db_url(path) or (e.name or "").split(".")[0] != "psycopg":
            raise
        raise Refused(
            path,
            StoreError("the PostgreSQL store needs its extra: pip install 'agentrt[postgres]'"),
        ) from None


class Refused(Exception):
    """The database itself was refused at open; carries one sentence for the operator."""

    def __init__(self, path: str, error: AgentrtError) -> None:
        super().__init__(refusal_sentence(path, error))


def refusal_sentence(path: str, error: AgentrtError) -> str:
    """One sentence saying why the database at `path` was refused (a URL's password `***`)."""
    if not_a_path(path):
        return _url_refusal(path, error)
    if isinstance(error, SymlinkError):
        return (
            f"refusing {path}: it is a symlink, and agentrt opens only the database file "
            "itself, never a link to it"
        )
    if isinstance(error, HardLinkError):
        return (
            f"refusing {path}: it has another name (a second hard link), which could be "
            "changed out of sight of agentrt's checks; keep only one name for the database"
        )
    if isinstance(error, InsecureDirectoryError):
        return f"refusing {path}: {error}"
    if isinstance(error, InsecureModeError):
        return f"refusing {path}: {_insecure_reason(path, str(error))}"
    if isinstance(error, UnreadableSchemaError):
        return (
            f"refusing {path}: its schema (the list of its tables and indexes) is damaged or "
            "was edited by hand, so agentrt cannot check that it is safe to use"
        )
    if isinstance(error, UnsafeSchemaError):
        return (
            f"refusing {path}: it holds a trigger or a view, which could run hidden code "
            "whenever agentrt reads or writes it"
        )
    if isinstance(error, SchemaVersionError):
        return f"refusing {path}: {_operators_words(path, str(error))}"
    said = str(error)
    for named in {path, os.path.abspath(path)}:  # the store names the file itself
        if said.startswith(
            (
                f"cannot open {named}: ",
                f"cannot open {named} for writing: ",
                f"cannot read {named}: ",
            )
        ):
            return said
    return f"cannot open {path}: {error}"


def _url_refusal(path: str, error: AgentrtError) -> str:
    """Why the PostgreSQL URL `path` was refused: the store's words on one line, with no
    password in them (the store hides the user's; a `password=` parameter is hidden here)."""
    said = " ".join(redact_db(str(error), path).split()).rstrip(".")
    if isinstance(error, SchemaVersionError):
        said = _operators_words(path, said)
    shown = shown_db(path)
    if said.startswith("cannot open "):  # the store names the URL itself (shown, no password)
        return redact_db(said, path)
    verb = (
        "refusing" if isinstance(error, SchemaVersionError | UnsafeSchemaError) else "cannot open"
    )
    return redact_db(f"{verb} {shown}: {said}", path)


def _operators_words(path: str, said: str) -> str:
    """The store's refusal with its advice to a programmer (`open_store`) made the command
    an operator runs: `agentrt --db PATH migrate`, or on PostgreSQL the schema owner's
    (decision 0201: the URL given may be the runtime role's, which may not)."""
    from .._store import CREATE_IN_SCHEMA, CREATE_ONE, MIGRATE_IT

    if not_a_path(path):  # the schema's owner runs it, not the runtime role (docs/postgres.md)
        told = {
            MIGRATE_IT: "the schema's owner migrates it first: agentrt --db OWNER_URL migrate",
            CREATE_IN_SCHEMA: (
                "to create one in a new or empty schema, its owner runs: "
                "agentrt --db OWNER_URL migrate"
            ),
        }
    else:
        command = f"agentrt --db {arg(path)} migrate"
        told = {
            MIGRATE_IT: f"migrate it first: {command}",
            CREATE_ONE: f"to create one at a new path or in an empty file: {command}",
        }
    for programmer, operator in told.items():
        if said.endswith(programmer):
            return said.removesuffix(programmer) + operator
    return said


# What `filesafety` says when it refuses a file (InsecureModeError), read back so
# that the sentence names the problem the file actually has.
_WHAT = r"(?P<what>database|[a-z]+ file) (?P<file>.+)"
_OWNED = re.compile(
    _WHAT + r" is owned by uid (?P<uid>[0-9]+), not by this process \(uid (?P<me>[0-9]+)\)"
)
_WRITABLE = re.compile(_WHAT + r" is writable by group or others \(mode (?P<mode>[0-7]+)\)")
_READABLE = re.compile(_WHAT + r" is readable by group or others \(mode (?P<mode>[0-7]+)\)")
_NOT_REGULAR = re.compile(r"(?P<file>.+) is not a regular file \(an? (?P<kind>[a-z ]+)\)")
_CANNOT = re.compile(r"cannot (?P<verb>inspect|tighten) (?P<file>.+?)(?: to 0600)?: (?P<why>.+)")


def _subject(path: str, what: str, file: str) -> str:
    if file == path:
        return "it"
    return f"the database {file}" if what == "database" else f"its -{what} {file}"


def _insecure_reason(path: str, message: str) -> str:
    """Why the file at `path` (or a -wal, -shm or -journal file beside it) is refused."""
    message = message.strip()
    if m := _WRITABLE.match(message):
        lock = m["what"] == "lock file"  # the writers' turns: it holds no record
        harm = "hold up every writer to its busy timeout" if lock else "forge an approval"
        return (
            f"{_subject(path, m['what'], m['file'])} is writable by group or others (mode "
            f"{m['mode']}), and anyone who can write it can {harm}; make it "
            "owner-only (chmod 600)"
        )
    if m := _READABLE.match(message):  # `agentrt migrate`, which tightens nothing
        return (
            f"{_subject(path, m['what'], m['file'])} is readable by group or others (mode "
            f"{m['mode']}), and anyone who can read it can read every request and result it "
            "records; make it owner-only (chmod 600), then migrate (agentrt migrate leaves a "
            "file's mode to you)"
        )
    if m := _OWNED.match(message):
        lock = m["what"] == "lock file"
        harm = "hold up every writer" if lock else "rewrite any record or forge an approval"
        return (
            f"{_subject(path, m['what'], m['file'])} is owned by uid {m['uid']}, not by you "
            f"(uid {m['me']}), and its owner could {harm}"
        )
    if m := _NOT_REGULAR.match(message):
        return (
            f"{m['file']} is a {m['kind']}, not a regular file, so agentrt will not open the "
            "database beside it; move it out of the way"
        )
    if m := _CANNOT.match(message):
        return f"agentrt cannot {m['verb']} {m['file']} ({m['why'].rstrip('.')})"
    # Anything else, in the store's own words, kept to one sentence.
    return message.rstrip(".").replace(". ", "; ")


__all__ = ["Refused", "migrate_db", "open_db", "refusal_sentence"]
