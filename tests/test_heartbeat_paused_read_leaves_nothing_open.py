"""A paused heartbeat's read of its lease (`Renewer.holds`, decision 0225) leaves nothing
open on its renewer's connection once it returns.

The paused heartbeat makes that read at every beat for as long as its lease still names it,
on a connection it keeps open: a read transaction left open there would, on PostgreSQL, hold
a lock on `runs` ("idle in transaction") that `agentrt migrate`'s `ACCESS EXCLUSIVE` lock
waits behind, and on SQLite keep a snapshot of the WAL that no checkpoint may reset. Each
backend is asked from another connection, once the read has returned on a thread of its own
(as the heartbeat's): PostgreSQL lists no lock on the schema's `runs`, and a truncating
checkpoint of the SQLite file finds no reader in its way.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import agentrt
from agentrt.lowlevel import wall_clock
from conftest import Ids
from support.database import on_postgres
from support.gates import make_gate
from support.rows import query


def test_a_lease_read_leaves_no_transaction_open_on_the_renewers_connection(
    database: str,
) -> None:
    store = agentrt.open_store(database)
    gate = make_gate(store, ids=Ids("a"), lease_ttl=timedelta(hours=1))
    session = gate.begin_sync("read at each beat, nothing kept open")
    renewer = store.renewer(wall_clock)
    read: list[bool] = []
    try:
        beat = threading.Thread(
            target=lambda: read.append(renewer.holds(session.run_id, gate.lease_owner, 1))
        )
        beat.start()
        beat.join(60)
        assert read == [True]
        if on_postgres(database):
            assert query(
                database, "SELECT count(*) FROM pg_locks WHERE relation = 'runs'::regclass"
            ) == [(0,)]
        else:
            [(busy, _, _)] = query(database, "PRAGMA wal_checkpoint(TRUNCATE)")
            assert busy == 0, "a read transaction is still open on the renewer's connection"
    finally:
        renewer.close()
        session.close_sync()
        store.close()
