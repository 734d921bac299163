"""A run page stays bounded however much a run holds or its model writes.

The timeline clipped each entry's detail to 240 characters, but not its title,
which carries model-written text too (the name of the tool the model asks for,
an unknown event's type): a 50,000-character tool name was on the page whole,
once per event that names it.
"""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentrt import Decision
from agentrt.console import ConsoleConfig, create_app
from support.console import Program


def page_of(database: str, run_id: str) -> str:
    config = ConsoleConfig(db_path=database, by="alice")
    c = TestClient(create_app(config), base_url="http://127.0.0.1:8765")
    response = c.get(f"/runs/{run_id}")
    assert response.status_code == 200
    return response.text


def test_a_long_tool_name_the_model_writes_is_clipped_in_the_timelines_title_with_its_length(
    database: str,
) -> None:
    name = "t" * 5000
    program = Program(database, [Decision.tool_call(name, {"x": 1}), Decision.complete(1)])
    run = program.start()
    program.close()
    trail = page_of(database, run.id).split("What happened")[1]
    title = "Asks to call " + name
    assert '<span class="evtitle">' + title[:160] + "… (+4,853 chars)</span>" in trail
    assert "t" * 161 not in trail
