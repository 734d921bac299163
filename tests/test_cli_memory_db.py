"""`--db :memory:` is refused in one sentence that says why (decision 0205).

`agentrt --db :memory: migrate` read "cannot open :memory:: a migration needs a database
file; ...", the colon doubled, and `runs` "no database at :memory:": neither says that
`:memory:` names no file but a private database that ends with the command.
"""

from __future__ import annotations

import pytest

from test_cli import agentrt_cmd

SAID = (
    "agentrt: ':memory:' is a private in-memory database, gone when the command ends: "
    "give a file path\n"
)


@pytest.mark.parametrize(
    "command", [["migrate"], ["migrate", "--proxy"], ["runs"], ["show", "0" * 32], ["verify"]]
)
def test_memory_is_refused_saying_it_is_a_private_database_gone_when_the_command_ends(
    command: list[str],
) -> None:
    result = agentrt_cmd("--db", ":memory:", *command)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", SAID)
