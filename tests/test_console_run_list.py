"""The run list's pages past the end of the list.

`/?offset=100` with three runs said "runs 0–100 of 3" (runs that do not exist),
and its "← newer" link went to offset 50, another empty page; from
`/?offset=999999999999` a person had to click about twenty billion times to reach
a run. A page past the end now says there is no run there and how many there
are, and its "← newer" link goes to the last page that shows runs. And when more
runs wait than the "Waiting for a person" cards show, the section says how many
more and links to every one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentrt import Decision
from agentrt.console import ConsoleConfig, create_app
from support.console import Program, send


def _count_and_pager(c: TestClient, query: str) -> tuple[list[str], list[str]]:
    page = c.get(query).text.split("All runs")[1]
    return re.findall(r'<p class="count">(.*?)</p>', page), re.findall(
        r'<a class="button ghost" href="([^"]*)">([^<]*)</a>', page
    )


def test_a_page_past_the_last_run_says_none_are_there_and_leads_back_to_the_last_page(
    database: str,
) -> None:
    for i in range(3):
        Program(database, [Decision.complete(i)], prefix=f"{i + 1}").start(f"run {i}")
    config = ConsoleConfig(db_path=database, by="alice")
    c = TestClient(create_app(config), base_url="http://127.0.0.1:8765")
    assert _count_and_pager(c, "/?offset=100") == (
        ["no runs after the first 100; 3 in all"],
        [("/?offset=0", "← newer")],
    )
    assert _count_and_pager(c, "/?offset=999999999999&status=COMPLETED") == (
        ["no runs after the first 999,999,999,999; 3 completed in all"],
        [("/?offset=0&amp;status=COMPLETED", "← newer")],
    )
    # A page that shows runs is as it was.
    assert _count_and_pager(c, "/?offset=2") == (
        ["runs 3–3 of 3, newest first"],
        [("/?offset=0", "← newer")],
    )


def test_more_runs_waiting_than_the_cards_show_are_counted_with_a_link_to_every_one(
    db_path: Path,
) -> None:
    """51 runs ask a person: the badge said 51, 50 cards were shown, and the run waiting
    longest (the list is newest first) was nowhere in the section, nothing saying so."""
    program = Program(db_path, [send(f"person {i}") for i in range(51)])
    for i in range(51):
        assert program.start(f"goal {i}").status == "WAITING_FOR_APPROVAL"
    program.close()
    c = TestClient(
        create_app(ConsoleConfig(db_path=str(db_path), by="alice")),
        base_url="http://127.0.0.1:8765",
    )
    waiting = c.get("/").text.split("All runs")[0]
    assert waiting.count('class="card waiting"') == 50
    assert (
        '<p class="more">and 1 more waiting run, the longest waiting among them: '
        '<a href="/?status=WAITING_FOR_APPROVAL">every waiting run</a></p>'
    ) in waiting
