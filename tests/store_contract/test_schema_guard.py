"""A trigger or view added while a store is open never fires on one of its writes.

Every backend keeps the guard: SQLite's re-checks its file's schema, PostgreSQL's
its schema's catalogue (triggers, rules, views, row-level policies) in every
write transaction. The trigger is planted through the backend's tamper hook. Derived from
`tests/test_schema_recheck.py` (the file rules of `tests/test_store.py` stay
SQLite-only there).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentrt._errors import UnsafeSchemaError
from agentrt._store import Store

from .conftest import Backend, Tamper
from .world import EPOCH, OWNER, everything, new_run, wall_at

SPY = "the database holds trigger 'spy'; agentrt refuses a schema with triggers or views"


@pytest.fixture
def guarded(backend: Backend) -> tuple[Store, Tamper]:
    store = backend.open()
    new_run(store)
    return store, backend.tamper(store)


def test_a_trigger_added_while_open_refuses_every_next_transaction_writing_nothing(
    guarded: tuple[Store, Tamper],
) -> None:
    store, tamper = guarded
    tamper.plant_trigger("runs")
    before = everything(store)
    for _ in range(2):  # not only the first: every write while the trigger is there
        with pytest.raises(UnsafeSchemaError, match=f"^{SPY}$"), store.transaction() as tx:
            tx.release_lease("r1", OWNER, epoch=1)
    assert everything(store) == before
    assert tamper.fired() == 0


def test_a_trigger_added_while_open_refuses_the_next_renewal_writing_nothing(
    guarded: tuple[Store, Tamper],
) -> None:
    store, tamper = guarded
    renewer = store.renewer(wall_at(EPOCH))
    try:
        assert renewer.renew("r1", OWNER, timedelta(seconds=30)) is True
        tamper.plant_trigger("runs")
        before = everything(store)
        with pytest.raises(UnsafeSchemaError, match=f"^{SPY}$"):
            renewer.renew("r1", OWNER, timedelta(seconds=60))
        assert everything(store) == before
    finally:
        renewer.close()
    assert tamper.fired() == 0


def test_a_view_added_while_open_is_refused_naming_it(guarded: tuple[Store, Tamper]) -> None:
    store, tamper = guarded
    tamper.plant_view()
    with pytest.raises(UnsafeSchemaError, match="view 'everything'"), store.transaction() as tx:
        tx.release_lease("r1", OWNER, epoch=1)
    assert store.lease("r1").owner == OWNER


def test_writes_go_on_once_the_trigger_is_removed(guarded: tuple[Store, Tamper]) -> None:
    store, tamper = guarded
    tamper.plant_trigger("runs")
    with pytest.raises(UnsafeSchemaError), store.transaction() as tx:
        tx.release_lease("r1", OWNER, epoch=1)
    tamper.remove("spy")
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1) is True
    assert store.lease("r1").owner == ""
    assert tamper.fired() == 0


def test_a_trigger_added_while_open_refuses_a_transaction_that_first_locks_the_run(
    guarded: tuple[Store, Tamper],
) -> None:
    # PostgreSQL sends BEGIN, the guard and the first statement together (decision 0100):
    # the lock's read and the write after it never run once the guard has found the spy.
    store, tamper = guarded
    tamper.plant_trigger("runs")
    before = everything(store)
    with pytest.raises(UnsafeSchemaError, match=f"^{SPY}$"), store.transaction() as tx:
        tx.lock_run("r1")
        tx.release_lease("r1", OWNER, epoch=1)
    with pytest.raises(UnsafeSchemaError, match=f"^{SPY}$"), store.transaction() as tx:
        tx.lease_now(wall_at(EPOCH))
        tx.release_lease("r1", OWNER, epoch=1)
    with pytest.raises(UnsafeSchemaError, match=f"^{SPY}$"), store.transaction():
        pass  # nothing sent in it: still refused at its end
    assert everything(store) == before
    assert tamper.fired() == 0
