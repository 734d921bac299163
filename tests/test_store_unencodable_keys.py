"""A run id UTF-8 cannot hold (a lone surrogate: what argv carries for a byte that is not
UTF-8) is a key no row holds, alike on SQLite and PostgreSQL (review of decision 0155,
which made SQLite's reads say so while PostgreSQL raised psycopg's `UnicodeEncodeError`
from every read, the operator functions and `agentrt show`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentrt

BAD = "\udcff"  # `agentrt show $'\xff'`: argv's surrogate escape of the byte 0xff


def test_reads_of_an_unencodable_run_id_find_nothing(any_store: agentrt.Store) -> None:
    store = any_store
    with pytest.raises(agentrt.NotFoundError):
        store.get_run(BAD)
    assert store.list_steps(BAD) == []
    assert store.list_events(run_id=BAD) == []
    assert store.pending_approvals(BAD) == []
    assert store.list_approvals(BAD) == []
    assert store.lease_state(BAD) is None


def test_operator_functions_refuse_an_unencodable_run_id_as_a_store_error(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    with pytest.raises(agentrt.StoreError):
        agentrt.cancel(store, BAD, "ops")
    with pytest.raises((agentrt.StoreError, agentrt.NotFoundError)):
        agentrt.approve(store, BAD, BAD, "ann", shown_hash="0" * 64)
    with pytest.raises(agentrt.StoreError):
        store.query("SELECT id FROM runs WHERE id = ?", (BAD,))


def test_show_of_an_unencodable_run_id_says_no_run(database: str) -> None:
    agentrt.open_store(database).close()
    shown = subprocess.run(
        [sys.executable, "-m", "agentrt", "show", BAD, "--db", database],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 1, shown.stderr
    assert "no run" in shown.stderr and "Traceback" not in shown.stderr, shown.stderr
