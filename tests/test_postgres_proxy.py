"""The proxy's config names a PostgreSQL database by URL (issue 21 item 1).

The proxy (a real process, `tests/support/mcp_proxy.py`) keeps its calls in a
schema on the test server; the operator's command, another process, lists and
approves on the same record, and the host's identical re-call is carried out.
The URL carries a password (the test server trusts its clients, so it is never
asked for): it appears nowhere the proxy or the command prints.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from tests.support.mcp_proxy import Shop, agentrt, write_owner_only

from agentrt import ConfigError
from agentrt.mcp.proxy import read_proxy_config
from support.postgres import postgres_schema

CHARGE = {"account": "acme", "cents": 1200}
PASSWORD = "pr0xy-secret"


@pytest.fixture
def url() -> Any:
    with ExitStack() as stack:
        base = postgres_schema(stack, "the proxy on PostgreSQL")
        scheme, _, rest = base.partition("://")
        user, _, host = rest.partition("@")
        yield f"{scheme}://{user}:{PASSWORD}@{host}"


def test_the_config_keeps_a_postgres_url_as_written_and_out_of_its_repr(tmp_path: Path) -> None:
    url = f"postgresql://agent:{PASSWORD}@db.internal:5432/agents?schema=proxy"
    (tmp_path / "m.json").write_text("{}")
    config_path = tmp_path / "proxy.json"
    write_owner_only(
        config_path,
        {
            "format": "agentrt.mcp.proxy/1",
            "database": url,
            "servers": {"s": {"command": ["true"], "manifest": "m.json", "rules": "r.json"}},
        },
    )
    config = read_proxy_config(config_path)
    assert config.database == url  # not a path under the config's folder
    assert PASSWORD not in repr(config)


def test_a_config_without_a_database_says_a_url_will_do(tmp_path: Path) -> None:
    config_path = tmp_path / "proxy.json"
    write_owner_only(config_path, {"format": "agentrt.mcp.proxy/1", "servers": {}})
    with pytest.raises(ConfigError, match="postgresql:// URL"):
        read_proxy_config(config_path)


def test_the_proxy_pauses_on_postgres_and_the_operator_approves_from_another_process(
    tmp_path: Path, url: str
) -> None:
    shop = Shop(tmp_path, database=url)

    async def call() -> Any:
        async with shop.host() as host:
            return await host.call("shop_charge", CHARGE)

    assert asyncio.run(call()).word == "PENDING_APPROVAL"
    assert shop.effects() == []
    assert not (tmp_path / "runs.db").exists()  # the record is the server's

    listed = agentrt("approvals", "--db", url, "--json")
    assert listed.returncode == 0, listed.stderr
    (waiting,) = json.loads(listed.stdout)["approvals"]
    assert waiting["tool"] == "shop_charge"
    approved = agentrt("approve", waiting["run_id"], "--db", url, "--yes", "--by", "operator")
    assert approved.returncode == 0, approved.stderr

    said = asyncio.run(call())
    assert (said.is_error, said.structured) == (False, {"charged": "acme", "cents": 1200})
    assert shop.effects() == [{"tool": "charge", "account": "acme", "cents": 1200}]
    verified = agentrt("verify", "--db", url)
    assert verified.returncode == 0, verified.stderr
    printed = "".join(
        [listed.stdout, listed.stderr, approved.stdout, approved.stderr, verified.stdout]
    )
    printed += (tmp_path / "proxy.stderr").read_text()
    assert PASSWORD not in printed
