"""The door for code that builds on the runtime's machinery, not on its surface.

`agentrt` is the door for applications: runs, tools, policies, the Driver and
the Gate. This module is the second door, for libraries that sit on the
machinery itself: the crash test kit (`agentrt.testkit` imports nothing private
from outside its own package; `tests/test_layering.py` checks it), the Gate's
adapters and proxies. Everything else under a leading underscore is internal
and may change in any release (docs/decisions/0034).

What it holds:

- **Crash points and probes.** `POINT_*` name the commits (and, for
  `POINT_TOOL_EFFECT` and `POINT_MODEL_DISPATCHED`, the moments inside a call)
  where a probe can stop a process; a `Probe` is called as `probe(point, session)`
  with the `RunSession` that reached it. `agentrt.testkit.Point` spells the same
  names for scenarios.
- **Running coroutines.** `run_sync` runs one to completion on an event loop of
  its own, as the `_sync` twins do; refused inside a running loop.
- **Policies.** `evaluate` asks a policy about a request (awaiting a coroutine
  policy); `INTERRUPTED_SIDE_EFFECT` is the kind of approval a call cut off by
  a crash waits on; `validate_policy_decision` names what is wrong with a result (None
  when it is a usable `PolicyDecision`); `policy_id_of` is the identity recorded
  with each evaluation.
- **Values.** `JSON` (a plain JSON value's type), `copy_json` (a deep copy that
  keeps number literals exactly), `parse_json` (one JSON value parsed, its
  number literals kept), `Clock` and `IdFactory` (the injectable clock
  and id source's types), `wall_clock`, and `parse_time` (a stored time read
  back, None when it does not parse).
- **Events.** The names of the audit events the test kit's invariants read
  (`STEP_TOOL_STARTED`, `STEP_TOOL_FINISHED`, `STEP_INTERRUPTED`, `STEP_RECONCILED`).
- **Tools.** `tool_class` checks and normalises what a tool's author says it
  does (side effect, timeout, terminal), as `agentrt.tool` does; the framework
  adapters classify the frameworks' tools through it.
- **Finding a framework's call.** An integration records a framework's tool
  call id in its decision's reason; `steps_with_reasons(store, run_id,
  reasons)` returns the run's steps whose decoded decision gives one of those
  reasons, in step order, in one indexed read whatever the run's length, and
  `step_of_run(store, run_id, step_id)` one step by its id (docs/decisions/0060).
- **Named reads** over a plain `sqlite3` connection to a SQLite file, outside any
  `Store`: `plain_reader` opens such a connection read-only, `newest_event`,
  `event_hash_exists` and `every_record_id`. (The crash test kit no longer
  uses them: it reads through the store interface, on SQLite and PostgreSQL
  alike, docs/decisions/0097.)
- **Databases by name.** `is_db_url` (a `postgresql://` URL, not a file's
  path), `refuse_other_url` (the open's refusal of a URL of another scheme, for a
  caller about to make a string a `Path`), `shown_db` (as it may be printed, its
  password hidden), `schema_of`
  and `with_schema` (the schema a URL names, and the URL naming another), and
  `drop_postgres_schema` (drop a schema made to be thrown away, as the kit's
  crash matrix does with its cases').
- **Fresh SQLite files from an image.** `fresh_sqlite_image(chain_partitions)`
  creates a record as `open_store` does, checkpointed into its main file, and
  keeps its bytes (a `SqliteImage`); `image.write_new(path)` writes a new file
  from them, 0600 and this user's, never over something already there. The
  crash matrix gives each case such a copy instead of creating and migrating
  each from nothing (decision 0185).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._canonical import copy_json, parse_json
from ._clock import Clock, IdFactory, parse_time, wall_clock
from ._commit_plan import (
    POINT_ALLOWED,
    POINT_ATTACH_ALLOWED,
    POINT_DECIDED,
    POINT_INTERRUPTED,
    POINT_MODEL_DISPATCHED,
    POINT_PAUSED,
    POINT_RESUMED,
    POINT_STEP_STARTED,
    POINT_TOOL_EFFECT,
    POINT_TOOL_FINISHED,
    POINT_TOOL_STARTED,
)
from ._db_url import is_db_url, schema_of, shown_db, with_schema
from ._events import STEP_INTERRUPTED, STEP_RECONCILED, STEP_TOOL_FINISHED, STEP_TOOL_STARTED
from ._policy import INTERRUPTED_SIDE_EFFECT, evaluate, policy_id_of
from ._records import JSON
from ._session import (
    Probe,
    RunSession,
    run_sync,
    validate_policy_decision,
)
from ._store import drop_postgres_schema, refuse_other_url
from ._store.sqlite._image import SqliteImage
from ._store.sqlite._image import fresh_image as fresh_sqlite_image
from ._store.sqlite._reads import event_hash_exists, every_record_id, newest_event, plain_reader
from ._tools import tool_class

if TYPE_CHECKING:
    from collections.abc import Collection

    from ._records import Step
    from ._store import Store


def steps_with_reasons(store: Store, run_id: str, reasons: Collection[str]) -> list[Step]:
    """The run's steps whose decoded decision gives one of `reasons`, in step order.

    One indexed read whatever the run's length (docs/decisions/0060).
    """
    return store.steps_with_reasons(run_id, reasons)


def step_of_run(store: Store, run_id: str, step_id: str) -> Step | None:
    """The run's step with this id, or None."""
    return store.step_of_run(run_id, step_id)


__all__ = [
    "INTERRUPTED_SIDE_EFFECT",
    "JSON",
    "POINT_ALLOWED",
    "POINT_ATTACH_ALLOWED",
    "POINT_DECIDED",
    "POINT_INTERRUPTED",
    "POINT_MODEL_DISPATCHED",
    "POINT_PAUSED",
    "POINT_RESUMED",
    "POINT_STEP_STARTED",
    "POINT_TOOL_EFFECT",
    "POINT_TOOL_FINISHED",
    "POINT_TOOL_STARTED",
    "STEP_INTERRUPTED",
    "STEP_RECONCILED",
    "STEP_TOOL_FINISHED",
    "STEP_TOOL_STARTED",
    "Clock",
    "IdFactory",
    "Probe",
    "RunSession",
    "SqliteImage",
    "copy_json",
    "drop_postgres_schema",
    "evaluate",
    "event_hash_exists",
    "every_record_id",
    "fresh_sqlite_image",
    "is_db_url",
    "newest_event",
    "parse_json",
    "parse_time",
    "plain_reader",
    "policy_id_of",
    "refuse_other_url",
    "run_sync",
    "schema_of",
    "shown_db",
    "step_of_run",
    "steps_with_reasons",
    "tool_class",
    "validate_policy_decision",
    "wall_clock",
    "with_schema",
]
