"""A URL naming a schema the database does not have says so, by name.

Found by following docs/postgres.md as a new operator with `schema=agnetrt` for
`schema=agentrt`: the command line answered "the database has no agentrt schema (open
it with open_store to create one)", sending the operator to create a second, empty
record beside the real one, and `open_store` as the runtime role said only
`permission denied for database ...`. Each now names the schema that is not there and
points at the URL's `schema=`. A schema that exists and holds no store keeps its
refusal (tests/test_cli_postgres.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import agentrt
from agentrt._db_url import with_schema
from agentrt.cli import main
from test_postgres_docs import names, set_up

__all__ = ["names"]  # the fixture, imported for its tests


@pytest.fixture
def misspelled(names: dict[str, str]) -> Iterator[tuple[str, str]]:
    """The runtime role's URL naming a schema that does not exist, and the owner's."""
    owner, runtime = set_up(names)
    agentrt.open_store(owner).close()
    wrong = names["schema"] + "x"
    yield with_schema(runtime, wrong), with_schema(owner, wrong)
    with psycopg.connect(names["base"], autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {wrong} CASCADE")


def test_the_command_line_names_a_schema_that_is_not_there(
    misspelled: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = misspelled
    schema = url.rpartition("schema=")[2]
    assert main(["--db", url, "runs"]) == 1
    assert capsys.readouterr().err == (
        f"agentrt: refusing {url}: the database has no schema {schema} (check the URL's "
        "database and schema=)\n"
    )
    with pytest.raises(agentrt.SchemaVersionError):
        agentrt.open_existing(url, read_only=True)


def test_open_store_as_a_role_that_may_not_create_it_names_the_schema(
    misspelled: tuple[str, str],
) -> None:
    url, _ = misspelled
    schema = url.rpartition("schema=")[2]
    with pytest.raises(agentrt.StoreError) as refused:
        agentrt.open_store(url)
    database = url.partition("?")[0].rpartition("/")[2]
    assert str(refused.value) == (
        f"cannot open {url}: the database has no schema {schema}, and this role may not "
        f"create it (permission denied for database {database}): check the URL's database "
        "and schema="
    )
