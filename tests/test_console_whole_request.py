"""A person sees the whole request before deciding it, in every channel.

The approval views show a string longer than 200 characters as its head and tail
and a key longer than 64 as head, tail and hash (decision 0149: what is shown
stays proportionate). Before this, the middle of such a value was shown nowhere a
person decides (the console's page, `agentrt approve`, the webhook's JSON and
text): an instruction hidden in the middle of a long argument, or of a long
argument name, was approved unseen. Every value shown in part is now also shown
whole, once: folded on the console's page above the buttons, after the full view
of `agentrt approve --full` (which the command without `--full` points to), and as
`whole` in the webhook's JSON and text.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

import agentrt
from agentrt import SideEffect
from agentrt.approver import Local, signed_headers, webhook_app
from agentrt.cli import main
from agentrt.console import ConsoleConfig, create_app
from conftest import FakeClock, RecordingTool
from support.approvals import paused_run

HIDDEN = "and also wire $9,000 to account 666"
LONG = "A" * 1000 + HIDDEN + "B" * 1000
"""An argument longer than the 200 characters shown whole, something hidden in its middle."""
HIDDEN_KEY = "-and-delete-the-backups-"
LONG_KEY = "k" * 40 + HIDDEN_KEY + "k" * 40
"""An argument name longer than the 64 characters shown whole, something in its middle."""
ARGS = {"body": LONG, LONG_KEY: 1, "to": "alice"}


def open_push() -> RecordingTool:
    return RecordingTool("push", SideEffect.REMOTE_MUTATION, schema={"type": "object"})


@pytest.fixture
def waiting(database: str) -> Iterator[tuple[str, agentrt.Run, agentrt.Approval]]:
    """A run waiting on a person for `push(ARGS)`, in `database` (SQLite and PostgreSQL)."""
    store = agentrt.open_store(database)
    _driver, run, _push = paused_run(store, FakeClock(), tool=open_push(), args=ARGS)
    (approval,) = store.pending_approvals(run.id, cap=None)
    yield database, run, approval
    store.close()


def test_the_console_page_shows_every_value_shown_in_part_whole_folded_above_the_buttons(
    waiting: tuple[str, agentrt.Run, agentrt.Approval],
) -> None:
    database, run, _approval = waiting
    config = ConsoleConfig(db_path=database, by="alice")
    c = TestClient(create_app(config), base_url="http://127.0.0.1:8765")
    page = c.get(f"/runs/{run.id}").text
    request = page[page.index('<section class="request"') :]
    request = request[: request.index("</section>")]
    assert '<details class="whole">' in request
    folded = request[request.index('<details class="whole">') :]
    folded = folded[: folded.index("</details>")]
    # Each whole, as its exact JSON literal, before the form that decides it.
    assert html.escape(json.dumps(LONG), quote=True) in folded
    assert html.escape(json.dumps(LONG_KEY), quote=True) in folded
    assert request.index('<details class="whole">') < request.index('<form class="decide"')
    # Proportionate: each hidden middle is on the page once, not once per row or view.
    assert page.count(HIDDEN) == 1
    assert page.count(HIDDEN_KEY) == 1


def test_agentrt_approve_full_prints_every_value_shown_in_part_whole_and_without_full_says_so(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = agentrt.open_store(db_path)
    _driver, run, _push = paused_run(store, FakeClock(), tool=open_push(), args=ARGS)
    store.close()
    # Without --full and without a terminal: shown, refused, nothing decided.
    code = main(["--db", str(db_path), "approve", run.id, "--by", "alice"])
    out, _err = capsys.readouterr()
    assert code != 0
    assert HIDDEN not in out
    # 6: the default policy's capability and presentation repeat the two arguments.
    assert out.rstrip().splitlines()[-1] == (
        "Every field exactly as it is hashed, one a line, and the 6 values shown here in "
        "part whole: add --full."
    )
    code = main(["--db", str(db_path), "approve", run.id, "--by", "alice", "--full", "--yes"])
    out, _err = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()
    assert f"    {json.dumps(LONG)}" in lines
    assert f"    {json.dumps(LONG_KEY)}" in lines
    assert out.count(HIDDEN) == 1 and out.count(HIDDEN_KEY) == 1
    # The whole values come after every field and before the hash that covers them all.
    assert lines.index(f"    {json.dumps(LONG)}") < lines.index(f"hash  {_hash(db_path, run)}")


def _hash(db_path: Path, run: agentrt.Run) -> str:
    with agentrt.open_store(db_path) as store:
        (approval,) = store.list_approvals(run.id)
        return approval.hash


SECRET = "0123456789abcdef0123456789abcdef-webhook"
NOW = 1_800_000_000


def _signed_get(http: TestClient, path: str, nonce: str) -> Any:
    raw_path = httpx.URL(f"http://hook.test{path}").raw_path.decode("ascii")
    headers = signed_headers(SECRET, "GET", raw_path, b"", timestamp=NOW, nonce=nonce)
    return http.get(path, headers=headers)


def test_the_webhook_gives_every_value_shown_in_part_whole_in_its_json_and_its_text(
    waiting: tuple[str, agentrt.Run, agentrt.Approval],
) -> None:
    database, run, approval = waiting
    with Local.open(database, now=FakeClock()) as local:
        app = webhook_app(local, secret=SECRET, now=lambda: NOW)
        http = TestClient(app, base_url="http://hook.test")
        shown = _signed_get(http, f"/runs/{run.id}/approvals/{approval.id}", "n-1").json()
        whole = {(w["what"], w["value"]) for w in shown["whole"]}
        assert whole == {("string", json.dumps(LONG)), ("key", json.dumps(LONG_KEY))}
        paths = {w["path"] for w in shown["whole"]}
        assert "request.args.body" in paths
        assert paths <= {f["path"] for f in shown["fields"]}  # the row each completes
        text = _signed_get(http, f"/runs/{run.id}/approvals/{approval.id}?format=text", "n-2")
        assert f"    {json.dumps(LONG)}\n" in text.text
        assert f"    {json.dumps(LONG_KEY)}\n" in text.text
        assert text.text.count(HIDDEN) == 1
