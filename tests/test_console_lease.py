"""The console says who holds a RUNNING run, on its run list and its run page (decision 0196).

A run whose process was killed mid-call showed as plain "running", exactly as a live
one. The run list now marks a running run no live process holds ("process gone",
"lease lapsed", "nobody holds it") and the run page says its lease in `show`'s words.
The owner's name is the consumer's configured text: it is escaped like any model's.
Both backends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

import agentrt
from agentrt import Decision
from agentrt._clock import format_time, wall_clock
from agentrt.console import ConsoleConfig, create_app
from support.console import HOSTILE, Program
from support.leases import ANOTHER_HOST
from support.left_running import killed_run, live_run, released_at_the_lease_read
from support.rows import execute
from test_cli import clean_env


def client(database: str) -> TestClient:
    config = ConsoleConfig(db_path=database, by="alice")
    return TestClient(create_app(config), base_url="http://127.0.0.1:8765")


def row_of(index: str, run_id: str) -> str:
    """The run list's row of `run_id`."""
    (row,) = [r for r in re.findall(r"<tr>.*?</tr>", index) if f"/runs/{run_id}" in r]
    return row


@pytest.fixture
def live(database: str) -> Iterator[tuple[agentrt.Store, str]]:
    with live_run(database) as held:
        yield held


def test_a_killed_runs_process_is_said_gone_on_the_list_and_its_page_its_owner_escaped(
    database: str,
) -> None:
    run_id = killed_run(database, clean_env(), HOSTILE)
    with agentrt.open_existing(database, read_only=True) as store:
        lease = store.lease(run_id)
    c = client(database)
    index = c.get("/").text
    assert '<span class="lease l-owner_gone">process gone</span>' in row_of(index, run_id)
    page = c.get(f"/runs/{run_id}").text
    (said,) = re.findall(r'<p class="notice warn lease">(.*?)</p>', page)
    escaped_owner = (
        "&lt;script&gt;window.__pwned = 1&lt;/script&gt;&lt;img src=x "
        "onerror=&quot;window.__pwned = 2&quot;&gt;&lt;style&gt;body{display:none}&lt;/style&gt;"
        "pay \\u202eevil\\u202c now\\u200b\\u2066x\\u2069 &amp; &quot;quoted&quot; "
        "&#x27;single&#x27; \\x1b[31mred/"
    )
    assert said.startswith(f"Lease: held by {escaped_owner}")
    assert said.endswith(
        f" until {format_time(lease.expires_at)}, but its process is gone (pid "
        f"{lease.holder['pid']}: no such process): a resume takes the run over at once."
    )
    for markup in (index, page):
        assert "<script>window" not in markup and "<img" not in markup
        for raw in ("\u202e", "\u200b", "\x1b"):
            assert raw not in markup


def test_a_live_run_shows_who_holds_it_until_when_and_no_mark_on_the_list(
    database: str, live: tuple[agentrt.Store, str]
) -> None:
    store, run_id = live
    lease = store.lease(run_id)
    c = client(database)
    assert 'class="lease' not in row_of(c.get("/").text, run_id)
    page = c.get(f"/runs/{run_id}").text
    assert re.findall(r'<p class="notice info lease">(.*?)</p>', page) == [
        f"Lease: held by {lease.owner} until {format_time(lease.expires_at)}."
    ]


def test_a_run_that_is_not_running_shows_no_lease(database: str) -> None:
    program = Program(database, [Decision.complete(1)])
    run = program.start()
    program.close()
    c = client(database)
    for markup in (row_of(c.get("/").text, run.id), c.get(f"/runs/{run.id}").text):
        assert 'class="lease' not in markup and "notice warn lease" not in markup
        assert "Lease:" not in markup


@pytest.mark.parametrize("page", ["list", "run"])
def test_the_list_and_the_run_page_read_a_run_and_its_lease_at_one_moment(
    database: str, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    """A lease given back between the page's read of the run and of its lease is not seen:
    the page's pieces are read in one snapshot (decision 0203)."""
    run_id = killed_run(database, clean_env())
    with agentrt.open_existing(database, read_only=True) as store:
        lease = store.lease(run_id)
    released_at_the_lease_read(monkeypatch, database, run_id)
    c = client(database)
    if page == "list":
        row = row_of(c.get("/").text, run_id)
        assert '<span class="lease l-owner_gone">process gone</span>' in row
    else:
        page_text = c.get(f"/runs/{run_id}").text
        assert re.findall(r'<p class="notice warn lease">(.*?)</p>', page_text) == [
            f"Lease: held by {lease.owner} until {format_time(lease.expires_at)}, but its "
            f"process is gone (pid {lease.holder['pid']}: no such process): a resume takes "
            "the run over at once."
        ]
    with agentrt.open_existing(database, read_only=True) as store:  # given back after it
        assert store.lease(run_id).owner == ""


def _lapsing_in_an_hour(database: str) -> tuple[str, datetime]:
    """A run left RUNNING, held by a process on another host (no proof of its death can
    be had here), whose lease lapses an hour from now by the store's lease clock."""
    run_id = killed_run(database, clean_env())
    with agentrt.open_existing(database, read_only=True) as store:
        expiry = store.lease_now(wall_clock) + timedelta(hours=1)
    execute(
        database,
        "UPDATE runs SET lease_expires_at = ?, lease_holder = ? WHERE id = ?",
        (format_time(expiry), ANOTHER_HOST, run_id),
    )
    return run_id, expiry


@pytest.mark.parametrize("page", ["list", "run"])
def test_a_page_showing_a_held_lease_says_when_to_draw_itself_again(
    database: str, page: str
) -> None:
    """No event is written when a lease lapses: the page names the milliseconds until the
    soonest shown lease lapses (by the lease clock when it was drawn), and its script draws
    it again then (decision 0203)."""
    run_id, expiry = _lapsing_in_an_hour(database)
    c = client(database)
    with agentrt.open_existing(database, read_only=True) as store:
        before = store.lease_now(wall_clock)
        markup = c.get("/" if page == "list" else f"/runs/{run_id}").text
        after = store.lease_now(wall_clock)
    (refresh_in,) = re.findall(r'<main id="main"[^>]* data-refresh-in="(\d+)"', markup)
    assert (expiry - after) // timedelta(milliseconds=1) <= int(refresh_in)
    assert int(refresh_in) <= (expiry - before) // timedelta(milliseconds=1) + 1


def test_a_page_with_no_held_lease_shown_names_no_time_to_draw_itself_again(
    database: str,
) -> None:
    program = Program(database, [Decision.complete(1)])
    run = program.start()
    program.close()
    c = client(database)
    for markup in (c.get("/").text, c.get(f"/runs/{run.id}").text):
        assert 'id="main"' in markup and "data-refresh-in" not in markup
