"""The proxy's configuration file: servers, their manifests and rules, the database, the policy.

`read_proxy_config(path)` reads one JSON file an operator writes by hand
(format `agentrt.mcp.proxy/1`). It is read like a rules file: owned by this
user and writable by no one else, every unknown field refused at every level,
relative paths resolved against the file's own folder (so a host may start the
proxy from any working directory). The `database` is a SQLite file's path, or a
`postgresql://` URL kept as written (docs/postgres.md; its password is never
printed: prefer `~/.pgpass` or `PGPASSWORD`). The manifests and rules it names are read
with `read_manifest` and `read_rules` when the proxy starts.

The policy is a side-effect class -> `allow` | `approve` | `deny` table; a class
the table leaves out is denied. Without a `policy` field the table is
`default_policy()`'s: read_only and local_mutation allowed, remote_mutation
approved by a person, destructive denied.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from .._db_url import is_db_url, other_scheme_refusal
from .._errors import ConfigError
from .._records import SideEffect
from ._config import (
    DEFAULT_MAX_CONTENT_BYTES,
    DEFAULT_TIMEOUT,
    Server,
    _fields,
    _read_owner_only,
    parse_duration,
)
from ._path_guard import check_server_paths, protected_files

PROXY_FORMAT = "agentrt.mcp.proxy/1"
POLICY_MODES = ("allow", "approve", "deny")
DEFAULT_POLICY_TABLE: Mapping[str, str] = {
    SideEffect.READ_ONLY.value: "allow",
    SideEffect.LOCAL_MUTATION.value: "allow",
    SideEffect.REMOTE_MUTATION.value: "approve",
    SideEffect.DESTRUCTIVE.value: "deny",
}
DEFAULT_REPEAT_WINDOW = timedelta(minutes=10)
DEFAULT_MAX_PENDING = 20
DEFAULT_LEASE_TTL = timedelta(seconds=30)
STATUS_TOOL = "gate_status"
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ZERO = re.compile(r"^0+(?:\.0+)?(?:ms|s|m|h)?$")

_TOP_FIELDS = {
    "format",
    "name",
    "database",
    "servers",
    "policy",
    "repeat_window",
    "approval_hold",
    "max_pending_approvals",
    "approval_ttl",
    "grant_ttl",
    "lease_ttl",
}
_SERVER_FIELDS = {
    "command",
    "url",
    "env",
    "inherit_env",
    "timeout",
    "max_content_bytes",
    "manifest",
    "rules",
    "skip_path_check",
}


@dataclasses.dataclass(frozen=True)
class ProxiedServer:
    """One upstream server and the two files the operator keeps for it."""

    server: Server
    manifest: Path
    rules: Path
    skip_path_check: bool = False


@dataclasses.dataclass(frozen=True)
class ProxyConfig:
    """What `agentrt-proxy --config FILE` runs with.

    `name` is the name the proxy gives itself in the MCP handshake (the host may
    show it to the model, so it is the operator's word, `tools` by default).
    `repeat_window`: how long an executed mutating call, a rejection or an
    expiry is remembered for an identical re-call; zero turns the window off (an
    identical call is always a new one). `approval_hold`: how long a call that
    waits for a person's approval keeps the host waiting before it is answered
    `PENDING_APPROVAL` (zero, the default: answered at once); approved within it,
    the call runs and answers in the same call (decision 0071).
    `max_pending_approvals`: how many of the proxy's calls may wait for a person
    at once. `database`: a SQLite file's path (resolved against the config's
    folder), or a `postgresql://` URL as written.
    """

    path: Path
    # A SQLite file's path, or a PostgreSQL URL as written (out of the repr: it may
    # hold a password).
    database: Path | str = dataclasses.field(repr=False)
    servers: tuple[ProxiedServer, ...]
    policy: Mapping[str, str]
    name: str = "tools"
    repeat_window: timedelta = DEFAULT_REPEAT_WINDOW
    approval_hold: timedelta = timedelta(0)
    max_pending_approvals: int = DEFAULT_MAX_PENDING
    approval_ttl: timedelta | None = None
    grant_ttl: timedelta | None = None
    lease_ttl: timedelta = DEFAULT_LEASE_TTL


def _path(base: Path, value: Any, where: str) -> Path:
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(f"{where} must be a non-empty path")
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} must be a list of strings")
    return list(value)


def _server(name: str, raw: Any, base: Path) -> ProxiedServer:
    where = f"proxy config, server {name!r}"
    data = _fields(raw, _SERVER_FIELDS, where)
    for required in ("manifest", "rules"):
        if required not in data:
            raise ConfigError(f"{where}: {required} is required")
    command = _strings(data["command"], f"{where}: command") if "command" in data else None
    env = data.get("env", {})
    if not isinstance(env, dict):
        raise ConfigError(f"{where}: env must be an object of NAME: value")
    timeout = parse_duration(data["timeout"], where) if "timeout" in data else DEFAULT_TIMEOUT
    try:
        server = Server(
            name,
            command=command,
            url=data.get("url"),
            env=env,
            inherit_env=_strings(data.get("inherit_env", []), f"{where}: inherit_env"),
            default_timeout=timeout,
            max_content_bytes=data.get("max_content_bytes", DEFAULT_MAX_CONTENT_BYTES),
        )
    except ConfigError as exc:
        raise ConfigError(f"proxy config: {exc}") from exc
    skip = data.get("skip_path_check", False)
    if not isinstance(skip, bool):
        raise ConfigError(f"{where}: skip_path_check must be true or false")
    return ProxiedServer(
        server=server,
        manifest=_path(base, data["manifest"], f"{where}: manifest"),
        rules=_path(base, data["rules"], f"{where}: rules"),
        skip_path_check=skip,
    )


def _policy(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ConfigError("proxy config: policy must be an object of side effect -> mode")
    out: dict[str, str] = {}
    for key, mode in raw.items():
        if key not in DEFAULT_POLICY_TABLE:
            raise ConfigError(
                f"proxy config: policy names {key!r}, which is not one of "
                f"{', '.join(DEFAULT_POLICY_TABLE)}"
            )
        if mode not in POLICY_MODES:
            raise ConfigError(
                f"proxy config: policy for {key} must be one of {', '.join(POLICY_MODES)}, "
                f"got {mode!r}"
            )
        out[key] = mode
    return out


def _off_or_duration(value: Any, field: str, off: str) -> timedelta:
    """A duration, or zero (`0`, `"0"`, `"0s"`, ...) meaning `off`; negative refused."""
    if value == 0 and not isinstance(value, bool):
        return timedelta(0)
    if isinstance(value, str) and _ZERO.fullmatch(value):
        return timedelta(0)
    try:
        return parse_duration(value, f"proxy config: {field}")
    except ConfigError:
        raise ConfigError(
            f'proxy config: {field} must be a duration like "10m", or 0 to {off}; got {value!r}'
        ) from None


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"proxy config: {where} must be a positive integer")
    return value


def _database(base: Path, value: Any) -> Path | str:
    """The database: a `postgresql://` URL as written, else a path like the others."""
    if isinstance(value, str) and is_db_url(value):
        return value
    # A URL of another scheme is no path: under the config's folder its `//` would fold to
    # `/`, and no store could refuse it as a URL (decision 0191).
    refusal = other_scheme_refusal(value) if isinstance(value, str) else None
    if refusal is not None:
        raise ConfigError(f"proxy config: database: {refusal}")
    return _path(base, value, "proxy config: database")


def _guard_paths(config: Path, database: Path | None, servers: tuple[ProxiedServer, ...]) -> None:
    """Refuse a stdio server whose arguments reach the proxy's own files (`_path_guard`)."""
    protected = protected_files(
        config,
        database,
        [proxied.manifest for proxied in servers],
        [proxied.rules for proxied in servers],
    )
    bases = [Path(os.getcwd()), config.parent]
    for proxied in servers:
        command = proxied.server.command
        if command is not None and not proxied.skip_path_check:
            check_server_paths(proxied.server.name, command, protected, bases)


def read_proxy_config(path: str | os.PathLike[str]) -> ProxyConfig:
    """Read and check the proxy's configuration file (ConfigError, InsecureModeError)."""
    where = Path(os.path.abspath(os.fspath(path)))
    data = _fields(_read_owner_only(where, "proxy config"), _TOP_FIELDS, "proxy config")
    if data.get("format") != PROXY_FORMAT:
        raise ConfigError(f"proxy config: format must be {PROXY_FORMAT!r}")
    base = where.parent
    if "database" not in data:
        raise ConfigError(
            "proxy config: database is required (the agentrt database file, or a postgresql:// URL)"
        )
    servers_raw = data.get("servers")
    if not isinstance(servers_raw, dict) or not servers_raw:
        raise ConfigError("proxy config: servers must be an object naming at least one server")
    servers = tuple(_server(name, raw, base) for name, raw in servers_raw.items())
    name = data.get("name", "tools")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"proxy config: name {name!r} must match {_NAME.pattern}")
    durations: dict[str, timedelta | None] = {}
    for field in ("approval_ttl", "grant_ttl", "lease_ttl"):
        durations[field] = (
            parse_duration(data[field], f"proxy config: {field}") if field in data else None
        )
    database = _database(base, data["database"])
    # A server on the network is no file a stdio server's arguments could reach.
    _guard_paths(where, database if isinstance(database, Path) else None, servers)
    return ProxyConfig(
        path=where,
        database=database,
        servers=servers,
        policy=_policy(data["policy"]) if "policy" in data else dict(DEFAULT_POLICY_TABLE),
        name=name,
        repeat_window=(
            _off_or_duration(data["repeat_window"], "repeat_window", "turn the window off")
            if "repeat_window" in data
            else DEFAULT_REPEAT_WINDOW
        ),
        approval_hold=_off_or_duration(
            data.get("approval_hold", 0), "approval_hold", "answer at once"
        ),
        max_pending_approvals=_count(
            data.get("max_pending_approvals", DEFAULT_MAX_PENDING), "max_pending_approvals"
        ),
        approval_ttl=durations["approval_ttl"],
        grant_ttl=durations["grant_ttl"],
        lease_ttl=durations["lease_ttl"] or DEFAULT_LEASE_TTL,
    )
