"""A PostgreSQL URL whose password holds `?` or `#` unencoded is refused, its password
never printed (decision 0141; found by an attack: the password was printed).

libpq (and psycopg's `conninfo_to_dict`) read `postgresql://user:PASS@host/db` up
to the last `@` before the first `/`, so `root:pw?Zq9xK@host` is user `root` with
password `pw?Zq9xK`. agentrt's `_db_url` splits the authority at `?` (and urllib
at `?` and `#`) first, finds no password, and prints the URL with it in the
refusal. Nothing here needs a server: port 1 refuses, or the URL is refused
before any connection.
"""

from __future__ import annotations

import pytest

from agentrt.cli import main

PIECES = ("pw", "Zq9xK")


@pytest.mark.parametrize("mark", ["?", "#"])
def test_a_password_with_a_question_mark_or_hash_is_never_printed(
    capsys: pytest.CaptureFixture[str], mark: str
) -> None:
    password = f"pw{mark}Zq9xK"
    psycopg = pytest.importorskip("psycopg")
    # The premise: libpq takes all of it as the password.
    parsed = psycopg.conninfo.conninfo_to_dict(f"postgresql://root:{password}@127.0.0.1:1/test")
    assert parsed.get("password") == password

    url = f"postgresql://root:{password}@127.0.0.1:1/test"
    code = main(["--db", url, "runs"])
    out, err = capsys.readouterr()
    assert code == 1
    printed = out + err
    assert "Zq9xK" not in printed, printed
    assert f"root:{PIECES[0]}" not in printed, printed
    assert printed == (
        "agentrt: cannot open postgresql://root:***@127.0.0.1:1/test: the user part of this "
        "PostgreSQL URL holds a `?` or `#` before its `@`, which drivers and URL parsers split "
        "differently: percent-encode them in the password (%3F, %23); nothing was opened\n"
    )
