"""The run list's pages past the end of the list.

`/?offset=100` with three runs said "runs 0–100 of 3" (runs that do not exist),
and its "← newer" link went to offset 50, another empty page; from
`/?offset=999999999999` a person had to click about twenty billion times to reach
a run. A page past the end now says there is no run there and how many there
are, and its "← newer" link goes to the last page that shows runs.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentrt import Decision
from agentrt.console import ConsoleConfig, create_app
from support.console import Program


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
