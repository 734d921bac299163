"""Each large value stored once (decision 0084): held by its SHA-256, read back whole.

A JSON part of at least `INLINE_LIMIT` characters (a large argument, a large
observation) is one row of the table of stored values, and the rows and events
that carry it refer to it. Every read gives the record as written; a stored
value that is missing, altered or swapped fails the records that refer to it,
each on its own, and breaks the event chain where it is first used.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from agentrt._canonical import to_text
from agentrt._capped import truncated_marker
from agentrt._chain import ALTERED
from agentrt._records import Decision, Observation, StepStatus
from agentrt._store import Store
from agentrt._store._records import tool_start, written_observation
from agentrt._store.sqlite import _values

from .conftest import Backend, Tamper
from .world import ALLOW, EPOCH, at, claim, decide, deciding_step, new_run

BIG = "x" * 5000  # over the limit: stored once


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def big_call(store: Store, run_id: str = "r1", body: str = BIG) -> tuple[str, int]:
    """A run whose first step called `write {"body": body}` and got `body` back.

    Returns the step's id and the seq of its `step.decided`."""
    step = decide(store, deciding_step(store, run_id), Decision.tool_call("write", {"body": body}))
    with store.transaction() as tx:
        started = tx.start_tool(
            step,
            tool_start("write", {"body": body}, ALLOW),
            from_statuses=(StepStatus.DECIDING,),
            now=EPOCH,
        )
        tx.finish_tool(
            started,
            StepStatus.DONE,
            written_observation(Observation.tool_result({"echo": body}, "written")),
            {"tool": "write", "summary": "written"},
            failed_event=False,
            now=at(1),
        )
    decided = [e for e in store.list_events(run_id, 0, 100) if e.type == "step.decided"]
    return step.id, decided[0].seq


def test_a_large_argument_is_stored_once_and_every_record_reads_it_whole(
    backend: Backend,
) -> None:
    store = backend.open()
    step_id, decided_seq = big_call(store)
    (step,) = store.list_steps("r1", cap=None)
    assert step.decode_error == ""
    assert step.decision is not None and step.decision.args == {"body": BIG}
    assert step.observation is not None and step.observation.content == {"echo": BIG}
    payloads = {e.type: e.payload for e in store.list_events("r1", 0, 100, cap=None)}
    assert payloads["step.decided"]["args"] == {"body": BIG}
    assert payloads["step.tool_started"] == {"tool": "write", "args": {"body": BIG}}
    assert store.verify_events().intact
    # Held once: the string's JSON text, by its SHA-256; the rows hold its reference.
    tamper = backend.tamper(store)
    token = to_text(BIG)
    assert tamper.stored_values() == {sha256(token): (len(token), token)}
    reference = "\x01" + sha256(token)
    for table, key, column in (
        ("steps", step_id, "decision_json"),
        ("steps", step_id, "observation_json"),
        ("events", decided_seq, "payload_json"),
        ("events", decided_seq + 2, "payload_json"),  # step.tool_started
    ):
        held = tamper.held(table, key, column)
        assert reference in held and len(held) < 300, (table, column, held)


def test_the_same_value_in_another_run_is_the_same_stored_value(backend: Backend) -> None:
    store = backend.open()
    big_call(store, "r1")
    big_call(store, "r2")
    assert len(backend.tamper(store).stored_values()) == 1
    assert [s.decision.args for s in store.list_steps("r2", cap=None) if s.decision] == [
        {"body": BIG}
    ]


def test_a_value_under_the_limit_stays_in_its_row(backend: Backend) -> None:
    store = backend.open()
    small = "y" * (_values.INLINE_LIMIT // 2)  # each row that holds it stays under the limit
    step_id, _ = big_call(store, body=small)
    tamper = backend.tamper(store)
    assert tamper.stored_values() == {}
    held = tamper.held("steps", step_id, "decision_json")
    assert "\x01" not in held and small in held


def test_large_parts_nest_and_read_back_exactly(backend: Backend) -> None:
    store = backend.open()
    # A list of many small items (large as a whole), holding a large string, and numbers
    # whose literals must come back as written.
    args: dict[str, Any] = {
        "rows": [{"n": n, "label": f"row {n}"} for n in range(150)] + [BIG],
        "big": BIG,
        "unicode": "é" * 1500,
    }
    step = decide(store, deciding_step(store), Decision.tool_call("write", args))
    (read,) = store.list_steps("r1", cap=None)
    assert read.decision == step.decision and read.decode_error == ""
    values = backend.tamper(store).stored_values()
    assert sha256(to_text(BIG)) in values
    assert any("\x01" in body for _, body in values.values())  # the list refers to BIG
    assert store.verify_events().intact


def test_a_capped_read_cuts_a_stored_value_as_it_cuts_one_held_in_its_row(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.open()
    big_call(store, "r1")
    with monkeypatch.context() as m:  # the same call, written as before migration 4
        m.setattr(_values, "INLINE_LIMIT", 10**12)
        big_call(store, "r2")
    for cap in (40, 10_000):
        packed = store.list_events("r1", 0, 100, cap=cap)
        inline = store.list_events("r2", 0, 100, cap=cap)
        assert [e.payload for e in packed] == [e.payload for e in inline]
        assert repr(store.list_steps("r1", cap=cap)[0].decision) == repr(
            store.list_steps("r2", cap=cap)[0].decision
        )
    decided = [e for e in store.list_events("r1", 0, 100, cap=40) if e.type == "step.decided"]
    whole = to_text(Decision.tool_call("write", {"body": BIG}).to_json())
    assert decided[0].payload == truncated_marker(len(whole), whole[:40])


def _damaged_value(store: Store, tamper: Tamper) -> str:
    (hash,) = tamper.stored_values()
    return hash


def test_an_altered_stored_value_fails_its_records_and_breaks_the_chain(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store, "r0")  # a run that does not use the value
    _, decided_seq = big_call(store)
    tamper = backend.tamper(store)
    hash = _damaged_value(store, tamper)
    assert tamper.set_stored_value(hash, to_text("z" * 5000)) == 1
    (step,) = store.list_steps("r1", cap=None)
    assert step.decision is None and step.observation is None
    assert f"decision_json: stored value {hash} does not match its hash" in step.decode_error
    assert f"observation_json: stored value {hash} does not match its hash" in step.decode_error
    events = store.list_events(None, 0, 100, cap=None)
    broken = [e for e in events if e.decode_error]
    assert [e.type for e in broken] == ["step.decided", "step.tool_started"]
    assert store.get_run("r0").decode_error == ""
    report = store.verify_events()
    assert not report.intact and report.first_break is not None
    assert (report.first_break.seq, report.first_break.problem) == (decided_seq, ALTERED)
    assert f"stored value {hash} does not match its hash" in report.first_break.detail


def test_a_swapped_stored_value_is_detected(backend: Backend) -> None:
    store = backend.open()
    big_call(store, "r1")
    big_call(store, "r2", body="w" * 5000)
    tamper = backend.tamper(store)
    values = tamper.stored_values()
    first, second = sha256(to_text(BIG)), sha256(to_text("w" * 5000))
    assert set(values) == {first, second}
    tamper.set_stored_value(first, values[second][1])
    (step,) = store.list_steps("r1", cap=None)
    assert f"stored value {first} does not match its hash" in step.decode_error
    assert store.list_steps("r2", cap=None)[0].decode_error == ""
    assert not store.verify_events().intact


def test_a_missing_stored_value_fails_its_records_only(backend: Backend) -> None:
    store = backend.open()
    _, decided_seq = big_call(store)
    tamper = backend.tamper(store)
    hash = _damaged_value(store, tamper)
    assert tamper.delete_stored_value(hash) == 1
    (step,) = store.list_steps("r1", cap=None)
    assert f"refers to stored value {hash}, which is missing" in step.decode_error
    assert store.get_run("r1").decode_error == ""
    claim(store, "r1", ids="t")  # the run still goes on
    report = store.verify_events()
    assert report.first_break is not None and report.first_break.seq == decided_seq
    assert "which is missing" in report.first_break.detail


def test_a_database_of_schema_3_holding_large_values_migrates_and_reads_the_same_records(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrt._store.postgres import _migrations as postgres_migrations
    from agentrt._store.sqlite import _migrations as sqlite_migrations
    from support.previous_release import previous_release_chain

    from .world import everything, waiting_run

    if not backend.shared:
        pytest.skip(f"{backend.name}: an in-memory database is gone once closed")
    backend.unmade()
    with monkeypatch.context() as old:  # the previous release: schema 3, every value in its row
        previous_release_chain(old)  # and its one chain (decision 0093)
        for module in (sqlite_migrations, postgres_migrations):
            old.setattr(module, "MIGRATIONS", module.MIGRATIONS[:3])
            old.setattr(module, "SCHEMA_VERSION", 3)
        old.setattr(_values, "INLINE_LIMIT", 10**12)
        store = backend.open()
        big_call(store, "r1")
        waiting_run(store, "r2")
        before = everything(store)
        assert store.verify_events().intact
        store.close()
    store = backend.open()  # opened by this release: migrated to 4
    assert everything(store) == before
    assert store.verify_events().intact
    tamper = backend.tamper(store)
    assert tamper.stored_values() == {}  # nothing rewritten
    big_call(store, "r3")  # new writes store the value once, beside the old rows
    assert len(tamper.stored_values()) == 1
    (step,) = store.list_steps("r3", cap=None)
    assert step.decision is not None and step.decision.args == {"body": BIG}
    assert store.list_steps("r1", cap=None)[0].decision == step.decision
    assert store.verify_events().intact
