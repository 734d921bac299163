"""A record whose `agentrt_meta` lost its `chain_partitions` row is refused at every open.

Every record at this schema holds the row from its creation (migration 5 writes N = 1
into a record made before partitions; a new one gets the N it was made with), so a
record without it had it deleted by hand. Until decision 0175 every open took N = 1: a
record of 4 (or PostgreSQL's 16) partitions opened as one of 1, and a writer would then
chain every run's events into partition 0, past the heads it no longer saw. Now
`open_store`, `open_existing` (a reader too) and the command line refuse it in one
sentence naming the record, and nothing is written: every row, the meta rows and the
heads are as they were, the row is not put back.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import agentrt
from agentrt import StoreError
from agentrt.lowlevel import is_db_url
from support.gates import make_gate
from support.rows import execute, query, snapshot
from test_cli import agentrt_cmd, clean_env

SAID = (
    "agentrt_meta has no chain_partitions row, which every record of this schema holds "
    "from its creation, so it was deleted or changed by hand and agentrt will not guess "
    "how many partitions the record's chain has: put the row back with the N the record "
    "was created with (its chain_head table keeps one row per partition), or restore the "
    "record from a backup"
)


def shown(database: str) -> str:
    """How the store names the record: the file's path, or the URL as it shows it."""
    if not is_db_url(database):
        return database
    from agentrt._store.postgres._connection import parse_target

    return parse_target(database).shown


def record_of_many_partitions(database: str) -> list[str]:
    """Three runs begun by a Gate on a record of more than one partition; their ids."""
    partitions = None if is_db_url(database) else 4  # PostgreSQL's default N is 16
    with agentrt.open_store(database, chain_partitions=partitions) as store:
        assert store.partitions > 1
        gate = make_gate(store)
        ids = []
        for goal in ("one", "two", "three"):
            session = gate.begin_sync(goal)
            ids.append(session.run_id)
            session.close_sync()
        assert store.verify_events().intact
    return ids


def state(database: str) -> tuple[object, ...]:
    """Every row, the meta rows, the heads; for a file, its bytes too."""
    files: object = None
    if not is_db_url(database):
        files = sorted(
            (p.name, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in Path(database).parent.iterdir()
        )
    return (
        snapshot(database),
        query(database, "SELECT key, value FROM agentrt_meta ORDER BY key"),
        query(database, "SELECT part, seq, hash FROM chain_head ORDER BY part"),
        files,
    )


def test_every_open_refuses_a_record_without_its_chain_partitions_row(database: str) -> None:
    ids = record_of_many_partitions(database)
    assert execute(database, "DELETE FROM agentrt_meta WHERE key = 'chain_partitions'") == 1
    before = state(database)
    said = f"cannot open {shown(database)}: {SAID}"

    for opening in (
        lambda: agentrt.open_store(database),
        lambda: agentrt.open_store(database, chain_partitions=1),
        lambda: agentrt.open_existing(database),
        lambda: agentrt.open_existing(database, read_only=True),
    ):
        with pytest.raises(StoreError) as refused:
            opening()
        assert type(refused.value) is StoreError
        assert str(refused.value) == said

    for command in (["runs"], ["verify"], ["show", ids[0]], ["cancel", ids[1], "--by", "op"]):
        done = agentrt_cmd("--db", database, *command, env=clean_env())
        assert (done.returncode, done.stdout) == (1, ""), done
        assert done.stderr == f"agentrt: {said}\n"

    assert state(database) == before
    assert ("chain_partitions",) not in [r[:1] for r in before[1]]  # type: ignore[index]
