"""What a person writes in the console's note is recorded as written, or refused in one line.

The longest note the console takes (`NOTE_LIMIT` characters), written in characters of four
UTF-8 bytes, is twelve bytes each once percent-encoded in the form: it fits the body the
console reads (it was refused as too large). A note no store can keep (a NUL, which a
PostgreSQL text cannot hold) is a 400 saying why, with nothing decided, on both backends
(decision 0149). The same holds for `agentrt.approve`, `reject` and `cancel` called directly.
"""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

import agentrt
from agentrt import Decision
from agentrt.console import ConsoleConfig, create_app
from agentrt.console._pages import NOTE_LIMIT
from support.console import Program, send

BASE = "http://127.0.0.1:8765"
ORIGIN = {"Origin": BASE}


def waiting_run(database: str) -> tuple[Program, str]:
    program = Program(database, [send("alice"), Decision.complete({"sent": 1})])
    run = program.start()
    assert run.status == "WAITING_FOR_APPROVAL"
    return program, run.id


def console(database: str) -> tuple[TestClient, ConsoleConfig]:
    config = ConsoleConfig(db_path=database, by="alice")
    return TestClient(create_app(config), base_url=BASE, follow_redirects=False), config


def test_the_longest_note_in_four_byte_characters_is_recorded_as_written(database: str) -> None:
    program, run_id = waiting_run(database)
    try:
        approval = program.pending(run_id)
        c, config = console(database)
        note = "\U0001f600" * NOTE_LIMIT
        response = c.post(
            f"/runs/{run_id}/approvals/{approval.id}/approve",
            data={"csrf": config.csrf, "hash": approval.hash, "note": note},
            headers=ORIGIN,
        )
        assert response.status_code == 303, response.text
        decided = program.store.get_approval(run_id, approval.id)
        assert (decided.status, decided.note) == ("approved", note)
    finally:
        program.close()


def test_a_note_no_store_can_keep_is_a_400_and_nothing_is_decided(database: str) -> None:
    program, run_id = waiting_run(database)
    try:
        approval = program.pending(run_id)
        c, config = console(database)
        response = c.post(
            f"/runs/{run_id}/approvals/{approval.id}/approve",
            data={"csrf": config.csrf, "hash": approval.hash, "note": "paid\x00 twice"},
            headers=ORIGIN,
        )
        assert response.status_code == 400
        assert "The note cannot be recorded: it holds a NUL character at position 5." in (
            response.text
        )
        cancel = c.post(
            f"/runs/{run_id}/cancel", data={"csrf": config.csrf, "note": "\x00"}, headers=ORIGIN
        )
        assert cancel.status_code == 400
        assert program.store.get_approval(run_id, approval.id).status == "pending"
        assert program.store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    finally:
        program.close()


@pytest.mark.parametrize("field", ["by", "note"])
def test_the_operator_functions_refuse_text_no_store_can_keep(database: str, field: str) -> None:
    program, run_id = waiting_run(database)
    try:
        approval = program.pending(run_id)
        texts = {"by": "alice", "note": "fine", field: "a\x00b"}
        with pytest.raises(ValueError, match=f"^{field} cannot be recorded: it holds a NUL"):
            agentrt.approve(program.store, run_id, approval.id, texts["by"], texts["note"])
        texts[field] = "a\ud800b"
        with pytest.raises(ValueError, match=f"^{field} cannot be recorded: it holds"):
            agentrt.reject(program.store, run_id, approval.id, texts["by"], texts["note"])
        with pytest.raises(ValueError, match=f"^{field} cannot be recorded"):
            agentrt.cancel(program.store, run_id, texts["by"], texts["note"])
        assert program.store.get_approval(run_id, approval.id).status == "pending"
        assert program.store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    finally:
        program.close()
