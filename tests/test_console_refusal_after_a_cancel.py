"""A decision that lost to a cancel is headed as a cancel on the console's refusal page.

Decision 0161 made the refusal's detail name who cancelled the run; the page's heading
still said "Expired" and its first sentence "the request expired", which reads as the
request's time having run out. SQLite and PostgreSQL (`database`).
"""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentrt import Decision, cancel
from agentrt.console import ConsoleConfig, create_app
from support.console import Program, send

BASE = "http://127.0.0.1:8765"
ORIGIN = {"Origin": BASE}


def test_deciding_a_request_whose_run_was_cancelled_is_headed_the_run_was_cancelled(
    database: str,
) -> None:
    program = Program(database, [send("alice"), Decision.complete({"sent": 1})])
    run = program.start()
    shown = program.pending(run.id)
    config = ConsoleConfig(db_path=str(database), by="alice")
    c = TestClient(create_app(config), base_url=BASE, follow_redirects=False)
    assert shown.hash in c.get(f"/runs/{run.id}").text
    # Behind the page's back, an operator cancels the run: its pending request expires.
    cancel(program.store, run.id, by="ops", note="stop")

    response = c.post(
        f"/runs/{run.id}/approvals/{shown.id}/approve",
        data={"csrf": config.csrf, "note": "looks right", "hash": shown.hash},
        headers=ORIGIN,
    )

    assert response.status_code == 410
    assert "<h1>The run was cancelled</h1>" in response.text
    assert "Nothing was decided: the run was cancelled." in response.text
    assert "the request expired" not in response.text
    assert "cancelled by ops" in response.text
    assert program.store.get_approval(run.id, shown.id).status == "expired"
    program.close()
