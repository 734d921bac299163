"""A malformed `offset` is refused with the console's headers (decision 0140).

Found by an attack: a malformed `offset` query crashed the console's index handler.

`GET /?offset=²` passes `str.isdigit()` (superscript two is a digit to Python) but
`int("²")` raises ValueError, which nothing catches: the answer is a bare 500 from
Starlette's error middleware, without the console's security headers (CSP,
X-Frame-Options, nosniff, no-store), and a traceback in the server's log. A
malformed request must be refused (400) with the headers every answer carries.
The rest of the package checks `isascii() and isdigit()` before `int()`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentrt import Decision
from agentrt.console import ConsoleConfig, create_app
from agentrt.console._security import CSP
from support.console import Program, send

BASE = "http://127.0.0.1:8765"


@pytest.mark.parametrize("offset", ["%C2%B2", "%E2%91%A0"])  # '²', '①'
def test_a_non_ascii_digit_offset_is_refused_not_a_500_without_headers(
    db_path: Path, offset: str
) -> None:
    program = Program(db_path, [send("alice"), Decision.complete({})])
    try:
        program.start()
        config = ConsoleConfig(db_path=str(db_path), by="alice")
        c = TestClient(
            create_app(config),
            base_url=BASE,
            follow_redirects=False,
            raise_server_exceptions=False,
        )
        response = c.get(f"/?offset={offset}")
        assert response.status_code == 400, response.status_code
        assert response.headers.get("content-security-policy") == CSP
        assert response.headers.get("x-frame-options") == "DENY"
    finally:
        program.close()
