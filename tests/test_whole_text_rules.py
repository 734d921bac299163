"""A name, a duration or a version is checked as a whole text: nothing may follow it.

Python's `$` also matches before a final newline, so a rule written `^...$` and
applied with `match` let `"notes\\n"` through as a server name, `"5s\\n"` as a
duration and `"0.2.0\\n"` as a version. Each rule is applied to the whole text
(`fullmatch`): each such input is refused with the rule's own sentence, and the
same text without the newline is still accepted.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

import agentrt
from agentrt import ConfigError, StoreError
from agentrt._store.sqlite._migrations import parse_version
from agentrt.bench import BenchError, Taxonomy
from agentrt.mcp import Server, read_rules
from agentrt.mcp._proxy_config import read_proxy_config


@pytest.mark.parametrize("tail", ["\n", "\r\n", " "])
def test_a_server_name_or_env_name_with_anything_after_it_is_refused(tail: str) -> None:
    assert Server(name="notes", command=["notes-server"]).name == "notes"
    with pytest.raises(
        ConfigError, match=re.escape(f"server name {'notes' + tail!r} must be 1 to 32")
    ):
        Server(name="notes" + tail, command=["notes-server"])
    with pytest.raises(
        ConfigError, match=re.escape(f"env entry {'HOME' + tail!r} is not NAME=text")
    ):
        Server(name="notes", command=["notes-server"], env={"HOME" + tail: "/tmp"})
    with pytest.raises(ConfigError, match="inherit_env must be a list of variable names"):
        Server(name="notes", command=["notes-server"], inherit_env=["HOME" + tail])


def _rules(tmp_path: Path, rule: dict[str, object]) -> Path:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"format": "agentrt.mcp.rules/1", "tools": {"write_note": rule}}))
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


def test_a_rules_timeout_or_rename_with_a_newline_after_it_is_refused(tmp_path: Path) -> None:
    good = read_rules(_rules(tmp_path, {"side_effect": "read_only", "timeout": "5s"}))
    assert good["write_note"].timeout.total_seconds() == 5
    with pytest.raises(ConfigError, match=r"timeout '5s\\n' must be a positive duration"):
        read_rules(_rules(tmp_path, {"side_effect": "read_only", "timeout": "5s\n"}))
    with pytest.raises(ConfigError, match=r"rename 'note\\n' must match"):
        read_rules(_rules(tmp_path, {"side_effect": "read_only", "rename": "note\n"}))


def _proxy_config(tmp_path: Path, **fields: object) -> Path:
    path = tmp_path / "proxy.json"
    body = {
        "format": "agentrt.mcp.proxy/1",
        "database": str(tmp_path / "agentrt.db"),
        "servers": {
            "notes": {
                "command": ["notes-server"],
                "manifest": "notes.manifest.json",
                "rules": "notes.rules.json",
            }
        },
        **fields,
    }
    path.write_text(json.dumps(body))
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


def test_a_proxy_name_or_zero_duration_with_a_newline_after_it_is_refused(
    tmp_path: Path,
) -> None:
    assert read_proxy_config(_proxy_config(tmp_path, name="tools")).name == "tools"
    with pytest.raises(ConfigError, match=r"proxy config: name 'tools\\n' must match"):
        read_proxy_config(_proxy_config(tmp_path, name="tools\n"))
    off = read_proxy_config(_proxy_config(tmp_path, approval_hold="0s"))
    assert off.approval_hold.total_seconds() == 0
    with pytest.raises(ConfigError, match=r"approval_hold must be a duration like \"10m\""):
        read_proxy_config(_proxy_config(tmp_path, approval_hold="0s\n"))
    with pytest.raises(ConfigError, match=r"approval_ttl: timeout '2m\\n' must be a positive"):
        read_proxy_config(_proxy_config(tmp_path, approval_ttl="2m\n"))


def test_a_taxonomy_or_outcome_name_with_a_newline_after_it_is_refused() -> None:
    assert Taxonomy.of("refunds", ok="success", bad="unsafe").name == "refunds"
    with pytest.raises(BenchError, match="its name must be 1-64 characters"):
        Taxonomy.of("refunds\n", ok="success", bad="unsafe")
    with pytest.raises(BenchError, match="outcome 'ok\\\\n' is not a valid name"):
        Taxonomy.of("refunds", **{"ok\n": "success", "bad": "unsafe"})


def test_a_version_with_a_newline_after_it_or_other_scripts_digits_is_not_a_version() -> None:
    assert parse_version("0.2.0") == (0, 2)
    for bad in ("0.2.0\n", "0.2.0 ", "\u0661.\u0660"):  # the last: Arabic-Indic digits
        with pytest.raises(ValueError, match="is not a dotted version number"):
            parse_version(bad)


def test_a_postgresql_schema_name_with_a_newline_after_it_is_refused_before_connecting() -> None:
    # Port 1 on loopback: were a connection attempted, it would fail differently.
    with pytest.raises(StoreError, match=r"schema 'agentrt\\n' is not a plain lower-case name"):
        agentrt.open_store("postgresql://root@127.0.0.1:1/test?schema=agentrt%0A")
