"""Attacks on the signed approval webhook: replays, hostile ids and bodies."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the webhook extra is not installed")

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import agentrt
from agentrt.approver import Decision, NonceCache, WebhookClient, WebhookError, signed_headers
from agentrt.approver._local import BY_MAX, NOTE_MAX
from conftest import FakeClock
from support.postgres import postgres_schema
from test_webhook import NOW, SECRET, Hook, error, waiting


def test_a_replay_inside_a_wider_window_is_refused_when_the_operator_sizes_the_nonce_cache(
    store: agentrt.Store,
) -> None:
    """An operator widens the window (`skew=600`) and passes a `NonceCache` of their own size;
    today the cache forgets each nonce after its own default 300 s, so a captured request
    replayed 400 s later is served again. A nonce must be refused for the app's whole window."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock, skew=600, nonces=NonceCache(max_entries=50_000))
    path = f"/runs/{run.id}/approvals/{approval.id}"
    headers = signed_headers(SECRET, "GET", path, b"", timestamp=NOW, nonce="captured")
    assert hook.http.get(path, headers=headers).status_code == 200
    hook.wall.t = NOW + 400  # still inside the 600 s window the app was given
    replay = hook.http.get(path, headers=headers)
    assert replay.status_code == 401, f"the replayed request was served: {replay.status_code}"
    assert error(replay) == (401, "unauthorized")


@pytest.fixture
def pg_store() -> Iterator[agentrt.Store]:
    with ExitStack() as stack:
        store = agentrt.open_store(postgres_schema(stack, "the webhook's hostile ids"))
        stack.callback(store.close)
        yield store


def test_an_id_holding_a_nul_is_404_on_postgresql_as_on_sqlite_not_a_500(
    pg_store: agentrt.Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A bot relays ids a user pasted; a signed request for `/runs/a%00b/...` is 404 on SQLite,
    but on PostgreSQL the store's NUL refusal escapes as 500 internal_error with a traceback
    logged. No run or approval can hold a NUL there, so it should be 404 not_found."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(pg_store, clock)
    hook = Hook(pg_store, clock)
    asked = {
        "list": ("GET", "/runs/a%00b/approvals", None),
        "show": ("GET", f"/runs/{run.id}/approvals/x%00y", None),
        "approve": (
            "POST",
            f"/runs/{run.id}/approvals/x%00y/approve",
            {"hash": approval.hash, "by": "alice"},
        ),
        "cancel": ("POST", "/runs/a%00b/cancel", {"by": "alice"}),
    }
    answers = {what: error(hook.send(*how)) for what, how in asked.items()}
    assert answers == {what: (404, "not_found") for what in asked}
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert pg_store.get_approval(run.id, approval.id).status == "pending"


def test_the_client_fits_the_longest_decision_the_interface_accepts_in_the_body_cap(
    store: agentrt.Store, db_path: Path
) -> None:
    """A bot approves with the longest `by` and `note` a `Decision` accepts (200 and 4,000
    characters, here outside the BMP); today the client's body is 16,891 bytes and the webhook
    refuses it 413. What the interface accepts must be deliverable through its own channel."""
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    client = WebhookClient("http://hook.test", SECRET, http=hook.http, now=hook.wall)
    by, note = "\U0001f600" * BY_MAX, "\U0001f44d" * NOTE_MAX
    Decision(run.id, approval.id, approval.hash, by, note)  # the interface accepts it
    try:
        done = client.approve(run.id, approval.id, approval.hash, by, note)
    except WebhookError as exc:
        pytest.fail(f"the webhook refused a decision the interface accepts: {exc}")
    assert done["approval"]["decided_by"] == by
    assert store.get_approval(run.id, approval.id).note == note
