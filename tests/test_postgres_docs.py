"""docs/postgres.md's setup, followed as written, on the test server (issue 21 item 8).

The roles-and-grants block is read out of the document and run with fresh role
and schema names (roles are the whole server's: each test makes its own and
drops them). The owner then runs the document's `agentrt ... migrate` line, as
written but for the URL; the runtime role runs `examples/scripted.py`, two processes
sharing the record, the second approving what the first paused; and the runtime role may
not delete, truncate, create in the schema or alter a table. The proxy runs as the
runtime role once the document's `migrate --proxy` line, as the owner, has made its
tables.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support.mcp_proxy import PROXY_CHILD, Shop

import agentrt
from agentrt._store.sqlite import _migrations as migrations
from support.postgres import server_url

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "postgres.md"
MARK = "<!-- tested: tests/test_postgres_docs.py runs this block -->"
DUMP = "<!-- tested: tests/test_postgres_docs.py runs this dump -->"
MIGRATE = "<!-- tested: tests/test_postgres_docs.py runs this command -->"
MIGRATE_PROXY = "<!-- tested: tests/test_postgres_docs.py runs this command for the proxy -->"
DOC_OWNER_URL = "postgresql://agentrt_owner@db.internal:5432/agents?schema=agentrt"


def block(mark: str = MARK, language: str = "sql") -> str:
    text = DOC.read_text(encoding="utf-8")
    after = text.split(mark, 1)[1]
    found = re.match(rf"\s*```{language}\n(.*?)^```", after, re.M | re.S)
    assert found is not None, f"the tested block is a ```{language} block right after its mark"
    return found.group(1)


def grants_block() -> str:
    return block()


def with_user(base: str, user: str, schema: str) -> str:
    scheme, _, rest = base.partition("://")
    host = rest.rpartition("@")[2]
    return f"{scheme}://{user}@{host}{'&' if '?' in host else '?'}schema={schema}"


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    base = server_url("docs/postgres.md's setup")
    tag = uuid.uuid4().hex[:10]
    made = {
        "base": base,
        "owner": f"t_owner_{tag}",
        "runtime": f"t_runtime_{tag}",
        "schema": f"t_docs_{tag}",
    }
    yield made
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {made['schema']} CASCADE")
        for role in (made["runtime"], made["owner"]):
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if exists:
                conn.execute(f"DROP OWNED BY {role} CASCADE")
                conn.execute(f"DROP ROLE {role}")


def set_up(names: dict[str, str]) -> tuple[str, str]:
    """The document's roles-and-grants block, with these names; the owner's and runtime's URLs."""
    sql = grants_block()
    sql = re.sub(r"\bagentrt_owner\b", names["owner"], sql)
    sql = re.sub(r"\bagentrt_runtime\b", names["runtime"], sql)
    sql = re.sub(r"\bagentrt\b", names["schema"], sql)
    with psycopg.connect(names["base"], autocommit=True) as conn:
        conn.execute(sql)
    owner = with_user(names["base"], names["owner"], names["schema"])
    return owner, with_user(names["base"], names["runtime"], names["schema"])


def run_documented(mark: str, owner: str) -> subprocess.CompletedProcess[str]:
    """The document's one `agentrt` line after `mark`, as written but for the owner's URL,
    run as `python -m agentrt` (the interpreter of this test)."""
    [line] = block(mark, "bash").splitlines()
    words = shlex.split(line)
    assert words[:3] == ["agentrt", "--db", DOC_OWNER_URL], line
    words[:3] = [sys.executable, "-m", "agentrt", "--db", owner]
    return subprocess.run(words, capture_output=True, text=True, timeout=120)


def test_an_operator_following_the_setup_shares_one_record_between_two_processes(
    names: dict[str, str],
) -> None:
    owner, runtime = set_up(names)
    # Before the owner has opened it, the runtime role cannot make the tables.
    with pytest.raises(agentrt.StoreError):
        agentrt.open_store(runtime)
    made = run_documented(MIGRATE, owner)  # the document's one step as the owner
    assert (made.returncode, made.stderr) == (0, ""), made.stderr
    assert made.stdout == f"{owner}: created at schema version {migrations.SCHEMA_VERSION}\n"

    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "scripted.py"), "--db", runtime],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "stopped: WAITING_FOR_APPROVAL" in done.stdout
    assert "[process 2] resumed: COMPLETED goal_completed" in done.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "agentrt", "--db", runtime, "verify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr

    schema = names["schema"]
    with psycopg.connect(runtime.partition("?")[0], autocommit=True) as conn:
        for refused in (
            f"DELETE FROM {schema}.events",
            f"TRUNCATE {schema}.events",
            f"CREATE TABLE {schema}.mine (x int)",
            f"ALTER TABLE {schema}.events DISABLE TRIGGER ALL",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(refused)


def test_the_proxy_runs_as_the_runtime_role_once_the_owner_has_checked_it(
    names: dict[str, str], tmp_path: Path
) -> None:
    owner, runtime = set_up(names)
    assert run_documented(MIGRATE, owner).returncode == 0
    shop = Shop(tmp_path, database=runtime)

    def check() -> subprocess.CompletedProcess[str]:
        proxy = [sys.executable, str(PROXY_CHILD), str(shop.clock_file)]
        return subprocess.run(
            [*proxy, "--config", str(shop.config), "--check"],
            capture_output=True,
            text=True,
            timeout=120,
        )

    # The runtime role cannot create the proxy's tables: one line, exit 1.
    refused = check()
    assert refused.returncode == 1, refused.stderr
    [said] = refused.stderr.splitlines()
    assert said.startswith("agentrt-proxy: ") and "permission denied for schema" in said
    assert "LINE 1" not in said and "CREATE TABLE" not in said
    # As the document says: `migrate --proxy` as the owner, then the runtime's URL.
    made = run_documented(MIGRATE_PROXY, owner)
    assert (made.returncode, made.stderr) == (0, ""), made.stderr
    proxy_version = migrations.PROXY_MIGRATIONS[-1].version
    assert made.stdout.endswith(f"; the proxy's tables created at version {proxy_version}\n")
    assert check().returncode == 0

    async def call() -> Any:
        async with shop.host() as host:
            return await host.call("shop_price", {"item": "tea"})

    assert asyncio.run(call()).structured == {"item": "tea", "cents": 250}


def test_the_backup_is_dumped_as_the_owner_with_its_grants_and_refused_to_the_runtime(
    names: dict[str, str], tmp_path: Path
) -> None:
    if shutil.which("pg_dump") is None or shutil.which("pg_restore") is None:
        pytest.skip("pg_dump and pg_restore are not installed")
    owner, _ = set_up(names)
    agentrt.open_store(owner).close()
    server = psycopg.conninfo.conninfo_to_dict(names["base"])
    [line] = block(DUMP, "bash").splitlines()
    line = re.sub(r"\bagentrt_owner\b", names["owner"], line)
    line = re.sub(r"--schema=agentrt\b", f"--schema={names['schema']}", line)
    words = shlex.split(line)
    assert words[-1] == "agents"
    words[-1:] = [f"--host={server['host']}", f"--port={server['port']}", str(server["dbname"])]

    done = subprocess.run(words, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        ["pg_restore", "--list", str(tmp_path / "agentrt.dump")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"TABLE DATA {names['schema']} events {names['owner']}" in listed
    assert f"DEFAULT ACL {names['schema']} DEFAULT PRIVILEGES FOR TABLES" in listed
    # As the runtime role: refused at the first sequence, as the document says.
    as_runtime = [w.replace(names["owner"], names["runtime"]) for w in words]
    refused = subprocess.run(as_runtime, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert refused.returncode == 1
    assert "permission denied for sequence" in refused.stderr
