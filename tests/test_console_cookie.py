"""Two consoles on one machine, each with its own token, keep their logins apart.

A browser keeps cookies by host, not by port: two consoles on one host
(`agentrt console --db a.db --port 8765 --token A` and `--db b.db --port 8766
--token B`) both set a cookie named `agentrt_console`, so logging in to the
second replaced the first's cookie and logged the browser out of the first (its
open page then polled into 401s: "connection lost"). The cookie's name now
depends on the token (never on the port: a console restarted on another port
with the same token still knows the browser, decision 0024).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentrt import Decision
from agentrt.console import ConsoleConfig, create_app
from support.console import Program

TOKEN_A = "a" * 12 + "-the-first-console"
TOKEN_B = "b" * 12 + "-the-second-console"


def _console(db: Path, port: int, token: str, jar: TestClient | None = None) -> TestClient:
    config = ConsoleConfig(db_path=str(db), by="alice", host="127.0.0.2", port=port, token=token)
    client = TestClient(
        create_app(config), base_url=f"http://127.0.0.2:{port}", follow_redirects=False
    )
    if jar is not None:  # one browser: one cookie jar for every port of the host
        client._cookies = jar._cookies
    return client


def test_logging_in_to_a_second_console_on_the_same_host_keeps_the_browser_logged_in_to_the_first(
    tmp_path: Path,
) -> None:
    a_db, b_db = tmp_path / "a.db", tmp_path / "b.db"
    for db in (a_db, b_db):
        program = Program(db, [Decision.complete(1)])
        program.start()
        program.close()
    first = _console(a_db, 8765, TOKEN_A)
    second = _console(b_db, 8766, TOKEN_B, jar=first)
    assert first.get(f"/login?token={TOKEN_A}").status_code == 303
    assert first.get("/").status_code == 200
    assert second.get("/").status_code == 401  # the first console's cookie opens nothing here
    assert second.get(f"/login?token={TOKEN_B}").status_code == 303
    assert second.get("/").status_code == 200
    assert first.get("/").status_code == 200
    # The first console restarted on another port with the same token still knows the browser.
    restarted = _console(a_db, 8799, TOKEN_A, jar=first)
    assert restarted.get("/").status_code == 200
