"""The signed webhook against hostile input: replays in a widened window, ids no store can
hold, the longest decision the interface accepts, notes that are not text, and a trusted
proxy seen through a dual-stack socket.

A nonce is remembered for the app's whole window whatever cache the operator passes; an id
holding a NUL is 404 on SQLite and PostgreSQL alike; every decision a `Decision` accepts
fits the body cap however its JSON is escaped; a `by` or `note` no store can keep is a 400
in one sentence; an IPv4-mapped peer is the IPv4 proxy it maps.
"""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the webhook extra is not installed")

import json
import logging

import agentrt
from agentrt.approver import (
    MAX_BODY,
    Decision,
    NonceCache,
    WebhookClient,
    signed_headers,
)
from agentrt.approver._local import BY_MAX, NOTE_MAX
from agentrt.approver._peers import ClientKey
from conftest import FakeClock
from test_webhook import NOW, SECRET, Hook, error, waiting

# --- replays ----------------------------------------------------------------------------------


@pytest.mark.parametrize("own_skew", [None, 300], ids=["default-cache", "cache-of-300s"])
def test_a_nonce_is_refused_for_the_apps_whole_window_whatever_cache_the_operator_passes(
    store: agentrt.Store, own_skew: int | None
) -> None:
    """An operator widens the window (`skew=600`) and passes a `NonceCache` of their own;
    a captured request replayed 400 s later, still inside the window, is refused 401."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    cache = (
        NonceCache(max_entries=50_000)
        if own_skew is None
        else NonceCache(skew=own_skew, max_entries=50_000)
    )
    hook = Hook(store, clock, skew=600, nonces=cache)
    path = f"/runs/{run.id}/approvals/{approval.id}"
    headers = signed_headers(SECRET, "GET", path, b"", timestamp=NOW, nonce="captured")
    assert hook.http.get(path, headers=headers).status_code == 200
    hook.wall.t = NOW + 400
    assert error(hook.http.get(path, headers=headers)) == (401, "unauthorized")
    hook.wall.t = NOW + 599  # the last second of the window: still remembered
    assert error(hook.http.get(path, headers=headers)) == (401, "unauthorized")


def test_a_nonce_cache_keeps_a_nonce_for_the_longer_of_its_own_skew_and_the_window() -> None:
    """The cache's own `skew` is a minimum: a webhook's wider window extends it, a narrower
    one never shortens it."""
    cache = NonceCache(skew=300)
    assert cache.add("wide", NOW, NOW, window=600)
    assert cache.add("narrow", NOW, NOW, window=10)
    assert not cache.add("narrow", NOW, NOW + 299, window=10)
    assert not cache.add("wide", NOW, NOW + 599, window=600)
    assert cache.add("narrow", NOW + 599, NOW + 599, window=10)  # forgotten after 300 s


# --- ids no store can hold --------------------------------------------------------------------


def test_an_id_holding_a_nul_is_404_on_every_store_and_nothing_is_logged_as_a_failure(
    any_store: agentrt.Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A bot relays ids a user pasted: `/runs/a%00b/...` and `/approvals/x%00y` are 404
    not_found on SQLite and PostgreSQL alike (PostgreSQL text cannot hold a NUL, so no run
    or approval has such an id), never a 500 with a traceback; nothing is decided."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(any_store, clock)
    hook = Hook(any_store, clock)
    asked = {
        "list": ("GET", "/runs/a%00b/approvals", None),
        "show": ("GET", f"/runs/{run.id}/approvals/x%00y", None),
        "approve": (
            "POST",
            f"/runs/{run.id}/approvals/x%00y/approve",
            {"hash": approval.hash, "by": "alice"},
        ),
        "reject": ("POST", f"/runs/a%00b/approvals/{approval.id}/reject", {"hash": "h", "by": "a"}),
        "cancel": ("POST", "/runs/a%00b/cancel", {"by": "alice"}),
    }
    with caplog.at_level(logging.INFO, logger="agentrt"):
        answers = {what: error(hook.send(*how)) for what, how in asked.items()}
    assert answers == {what: (404, "not_found") for what in asked}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any_store.get_approval(run.id, approval.id).status == "pending"


# --- the longest decision ---------------------------------------------------------------------


def test_the_longest_decision_the_interface_accepts_is_delivered_by_the_client(
    store: agentrt.Store,
) -> None:
    """A bot approves with the longest `by` and `note` a `Decision` accepts (200 and 4,000
    characters outside the BMP, 4 bytes each in UTF-8): the webhook takes it and records it."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    client = WebhookClient("http://hook.test", SECRET, http=hook.http, now=hook.wall)
    by, note = "\U0001f600" * BY_MAX, "\U0001f44d" * NOTE_MAX
    Decision(run.id, approval.id, approval.hash, by, note)  # the interface accepts it
    done = client.approve(run.id, approval.id, approval.hash, by, note)
    assert done["approval"]["decided_by"] == by
    assert store.get_approval(run.id, approval.id).note == note


def test_the_longest_decision_fits_the_body_cap_even_with_every_character_escaped(
    store: agentrt.Store,
) -> None:
    """Another signing client writes its JSON ASCII-only (`\\ud83d\\ude00`, 12 bytes a
    character): the longest decision still fits the cap and is approved."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    body = {"hash": approval.hash, "by": "\U0001f600" * BY_MAX, "note": "\U0001f44d" * NOTE_MAX}
    assert len(json.dumps(body).encode()) <= MAX_BODY
    response = hook.send("POST", f"/runs/{run.id}/approvals/{approval.id}/approve", body)
    assert response.status_code == 202
    assert store.get_approval(run.id, approval.id).note == body["note"]


# --- notes that are not text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("note", "paid \udcff"), ("note", "paid \x00 in full"), ("by", "alice\udcff")],
    ids=["note-lone-surrogate", "note-nul", "by-lone-surrogate"],
)
def test_a_by_or_note_no_store_can_keep_is_a_400_in_one_sentence_and_nothing_is_decided(
    any_store: agentrt.Store, field: str, value: str
) -> None:
    """A bot relays a note holding a lone surrogate (`\\udcff`, JSON allows it) or a NUL:
    400 bad_request saying which field and why, not the codec's message or a 500; the
    approval stays pending."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(any_store, clock)
    hook = Hook(any_store, clock)
    body = {"hash": approval.hash, "by": "alice", "note": "ok", field: value}
    response = hook.send("POST", f"/runs/{run.id}/approvals/{approval.id}/approve", body)
    assert error(response) == (400, "bad_request")
    message = response.json()["error"]
    assert message.startswith(f"{field} must ") and "codec" not in message, message
    assert "\n" not in message
    assert any_store.get_approval(run.id, approval.id).status == "pending"


def test_a_cancel_with_a_note_no_store_can_keep_is_a_400_and_the_run_goes_on(
    any_store: agentrt.Store,
) -> None:
    clock = FakeClock()
    _driver, run, _push, _approval = waiting(any_store, clock)
    hook = Hook(any_store, clock)
    response = hook.send("POST", f"/runs/{run.id}/cancel", {"by": "alice", "note": "x\udcff"})
    assert error(response) == (400, "bad_request")
    assert any_store.get_run(run.id).status == "WAITING_FOR_APPROVAL"


# --- a trusted proxy on a dual-stack socket ---------------------------------------------------


def scope(peer: str, forwarded: str) -> dict[str, object]:
    return {"client": (peer, 40000), "headers": [(b"x-forwarded-for", forwarded.encode())]}


def test_an_ipv4_mapped_peer_is_the_ipv4_proxy_the_operator_named() -> None:
    """Served on `::`, the proxy 127.0.0.1 arrives as `::ffff:127.0.0.1`: it is the proxy
    named, so the client is read from its `X-Forwarded-For`."""
    key = ClientKey(["127.0.0.1"])
    assert key(scope("::ffff:127.0.0.1", "203.0.113.7")) == "203.0.113.7"
    assert key(scope("127.0.0.1", "203.0.113.7")) == "203.0.113.7"


def test_ipv4_mapped_forms_are_their_ipv4_addresses_in_entries_and_trusted_networks() -> None:
    """An operator names a network in its mapped form, and an entry arrives mapped: both are
    read as the IPv4 addresses they map, so one client is one bucket however it is written."""
    key = ClientKey(["::ffff:10.0.0.0/104"])
    assert key(scope("10.1.2.3", "::ffff:203.0.113.7")) == "203.0.113.7"
    assert key(scope("::ffff:10.1.2.3", "10.9.9.9, 198.51.100.9")) == "198.51.100.9"
    assert key({"client": ("::ffff:203.0.113.7", 1), "headers": []}) == "203.0.113.7"
