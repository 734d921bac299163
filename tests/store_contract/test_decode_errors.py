"""A stored value that will not decode is named on its own record; every other record reads.

The tamper hook writes the byte 0xff (never the start of a UTF-8 character) in
front of a column's value. A backend that cannot hold such bytes (PostgreSQL
`text`) says so (`holds_bytes`), and these tests skip it with that reason.
Derived from `tests/test_bad_bytes.py` (all but the SQLite schema tests) and
`tests/test_recover.py::test_recover_reports_a_run_whose_row_holds_bytes_that_are_not_text_and_goes_on`.
"""

from __future__ import annotations

import pytest

from agentrt._errors import StoreError
from agentrt._model import Usage
from agentrt._records import Limits, SideEffect, ToolSpec
from agentrt._store import Store
from agentrt._tools import spec_hash

from .conftest import Backend, Tamper
from .world import EPOCH, FAR, HOLDER, OWNER, decide, deciding_step, new_run, waiting_run


def bad(text: str) -> bytes:
    """`text` with a byte that is not UTF-8 in front of it."""
    return b"\xff" + text.encode()


def why(column: str, text: str) -> str:
    """The decode error a reader gives for `bad(text)` in `column`."""
    return (
        f"{column}: not valid UTF-8 text (invalid start byte: byte 0xff at offset 0 of "
        f"{len(text.encode()) + 1})"
    )


@pytest.fixture
def damaged(backend: Backend) -> tuple[Store, Tamper]:
    if not backend.holds_bytes:
        pytest.skip(f"{backend.name} cannot hold bytes that are not text")
    store = backend.open()
    return store, backend.tamper(store)


def test_a_goal_that_will_not_decode_names_its_column_and_every_other_run_still_lists(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    new_run(store, "r1", goal="the first goal")
    new_run(store, "r2", goal="the second goal")
    assert tamper.write_bytes("runs", "r1", "goal", bad("the first goal")) == 1
    runs = {r.id: r for r in store.list_runs()}
    assert (runs["r1"].goal, runs["r1"].decode_error) == ("", why("goal", "the first goal"))
    assert (runs["r2"].goal, runs["r2"].decode_error) == ("the second goal", "")
    assert store.get_run("r1").decode_error == why("goal", "the first goal")
    with store.transaction() as tx:
        locked = tx.lock_run("r1")
    assert locked is not None and locked.run.decode_error == why("goal", "the first goal")


def test_a_run_status_that_will_not_decode_is_shown_as_read(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    new_run(store)
    tamper.write_bytes("runs", "r1", "status", bad("RUNNING"))
    assert store.run_status("r1") == "\\xffRUNNING"
    assert store.run_status("nope") is None


def test_a_step_that_will_not_decode_names_its_column_and_the_next_step_still_reads(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    from agentrt._records import Decision

    from .world import claim

    first = decide(store, deciding_step(store), Decision.tool_call("read", {"n": 1}))
    claim(store, ids="t")
    stored = '{"args":{"n":1},"kind":"tool_call","reason":"","tool":"read"}'
    tamper.write_bytes("steps", first.id, "decision_json", bad(stored))
    one, two = store.list_steps("r1", cap=None)
    assert (one.decision, one.decode_error) == (None, why("decision_json", stored))
    assert two.decode_error == ""
    assert store.step_of_run("r1", first.id) is not None


def test_an_approval_that_will_not_decode_names_its_column(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    approval = waiting_run(store)
    tamper.write_bytes("approvals", approval.id, "request_json", b"\xff{}")
    (read,) = store.pending_approvals("r1", cap=None)
    assert read.request is None
    assert read.decode_error == (
        "request_json: not valid UTF-8 text (invalid start byte: byte 0xff at offset 0 of 3)"
    )


def test_a_model_call_that_will_not_decode_names_its_column(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    step = deciding_step(store)
    with store.transaction() as tx:
        tx.dispatch_model_call("r1", step.id, "c1", 1, "a-model", Usage(1, 1), 1, EPOCH)
    tamper.write_bytes("model_calls", "c1", "model", bad("a-model"))
    (call,) = store.list_model_calls("r1")
    assert (call.model, call.decode_error) == ("", why("model", "a-model"))


def test_an_event_that_will_not_decode_is_listed_naming_its_column_between_the_others(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    new_run(store, "r1")
    tamper.set_event(2, "payload_json", bad("{}"))
    listed = store.list_events(None, 0, 100, cap=None)
    assert [e.seq for e in listed] == [1, 2]
    assert (listed[1].payload, listed[1].decode_error) == (None, why("payload_json", "{}"))
    assert listed[0].decode_error == ""


def test_verify_names_the_seq_and_column_of_an_event_that_will_not_decode(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    new_run(store, "r1")
    new_run(store, "r2")
    tamper.set_event(3, "payload_json", bad("{}"))
    report = store.verify_events()
    assert (report.intact, report.checked, report.head_seq) == (False, 2, 2)
    assert report.first_break is not None
    assert (report.first_break.seq, report.first_break.problem) == (3, "altered")
    assert report.first_break.detail.startswith(
        "payload_json is not valid UTF-8 text (invalid start byte: byte 0xff at offset 0"
    )


@pytest.mark.parametrize("column", ["lease_owner", "origin", "lease_holder"])
def test_an_unfinished_run_with_a_column_that_will_not_decode_fails_only_its_own_candidate(
    damaged: tuple[Store, Tamper], column: str
) -> None:
    store, tamper = damaged
    for run_id in ("r1", "r2", "r3"):
        new_run(store, run_id)
    value = {"lease_owner": OWNER, "origin": "gate", "lease_holder": HOLDER}[column]
    tamper.write_bytes("runs", "r2", column, bad(value))
    page = store.unfinished_runs(None, 10)
    assert [(c.run_id, c.unreadable) for c in page] == [
        ("r1", ()),
        ("r2", (column,)),
        ("r3", ()),
    ]
    assert page[0].lease.expires_at == FAR


def test_a_tool_spec_that_will_not_decode_is_a_store_error_naming_its_hash(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    from datetime import timedelta

    spec = ToolSpec("lookup", "looks", {"type": "object"}, SideEffect.READ_ONLY, timedelta(1))
    digest = spec_hash(spec)
    with store.transaction() as tx:
        tx.create_run(
            "r1",
            "goal",
            Limits(),
            owner=OWNER,
            lease_expires_at=FAR,
            holder="",
            specs=[(digest, spec)],
            now=EPOCH,
        )
    tamper.write_bytes("tool_specs", digest, "spec_json", b"\xff")
    with pytest.raises(StoreError, match=f"^tool spec {digest} does not decode: not valid UTF-8"):
        store.tool_spec(digest)
    assert store.started_tool_names("r1") == [None]


def test_a_run_created_event_that_will_not_decode_gives_a_tool_name_nobody_can_read(
    damaged: tuple[Store, Tamper],
) -> None:
    store, tamper = damaged
    new_run(store, "r1")
    new_run(store, "r2")
    tamper.set_event(1, "payload_json", bad("{}"))
    assert store.started_tool_names("r1") == [None]  # unknown: never "no tools"
    assert store.started_tool_names("r2") == []
    assert store.started_tool_names("nope") == []
