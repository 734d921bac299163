"""What an operator writes and reviews: `Server`, `Rule`, the `Manifest` of a pin, the `Report`.

This module owns the two files an operator keeps per MCP server (the manifest,
written by a pin, and the rules, written by hand), how they are read (owner-only
files, unknown fields refused, every hash re-checked against what it hashes),
and the pure decision of which server tools become agentrt tools
(`decide`). It never imports the MCP SDK and does no I/O but file reads.

Invariants:
- A manifest's schemas keep the number literals the server sent (`parse_json`
  with literals preserved, written back through `policy_json`), so a pin of a
  schema with `1e400` or a 30-digit integer compares equal on the next load.
- `schema_hash` is `content_hash(input_schema)` (hex SHA-256 of its canonical
  JSON) and `description_hash` is `content_hash(description)`; a manifest whose
  stored hash does not match its stored value is refused as edited.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import os
import re
import stat
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from .._canonical import content_hash, copy_json, parse_json, policy_json
from .._durable import fsync_directory
from .._errors import ConfigError, InsecureModeError, JSONValueError
from .._records import SideEffect, ToolSpec
from .._tools import CompiledTool, compile_tool

MANIFEST_FORMAT = "agentrt.mcp.manifest/1"
RULES_FORMAT = "agentrt.mcp.rules/1"
DEFAULT_MAX_CONTENT_BYTES = 64 * 1024
DEFAULT_TIMEOUT = timedelta(seconds=30)
MAX_FILE_BYTES = 16 * 1024 * 1024
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SERVER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,32}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIDE_EFFECTS = tuple(member.value for member in SideEffect)

REASON_SCHEMA_CHANGED = "the input schema changed since the pin"
REASON_DESCRIPTION_CHANGED = (
    "the description changed since the pin, and a description is model input"
)
REASON_GONE = "the server no longer offers it"


@dataclasses.dataclass(frozen=True)
class Server:
    """One MCP server: a command to run over stdio, or the URL of a streamable HTTP endpoint.

    A stdio server's environment holds only `PATH`, `HOME` and `TMPDIR` (from
    this process, when set), the names in `inherit_env` (from this process),
    and `env` (given values). `default_timeout` is a tool's timeout when its
    rule names none; `max_content_bytes` caps what one call returns to the model.
    """

    name: str
    command: Sequence[str] | None = None
    url: str | None = None
    env: Mapping[str, str] | None = None
    inherit_env: Sequence[str] = ()
    default_timeout: timedelta = DEFAULT_TIMEOUT
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SERVER_NAME.fullmatch(self.name):
            raise ConfigError(
                f"server name {self.name!r} must be 1 to 32 letters, digits, '_' or '-' "
                "(it prefixes every tool name)"
            )
        if (self.command is None) == (self.url is None):
            raise ConfigError(f"server {self.name!r}: give exactly one of command=[...] or url=...")
        if self.command is not None:
            if isinstance(self.command, str) or not self.command:
                raise ConfigError(
                    f"server {self.name!r}: command must be a non-empty list of strings"
                )
            if not all(_process_text(part) for part in self.command):
                raise ConfigError(
                    f"server {self.name!r}: every part of the command must be text a process "
                    "can be given (no NUL, no lone surrogate)"
                )
            object.__setattr__(self, "command", tuple(self.command))
        if self.url is not None:
            why = _url_problem(self.url)
            if why is not None:
                # The URL is not quoted: a token in its query must not reach a log.
                raise ConfigError(f"server {self.name!r}: url {why}")
        env = dict(self.env or {})
        for key, value in env.items():
            if (
                not isinstance(key, str)
                or not _ENV_NAME.fullmatch(key)
                or not isinstance(value, str)
            ):
                raise ConfigError(f"server {self.name!r}: env entry {key!r} is not NAME=text")
            if not _process_text(value):
                raise ConfigError(
                    f"server {self.name!r}: env entry {key!r} holds a NUL or a lone surrogate, "
                    "which no process environment can"
                )
        object.__setattr__(self, "env", env)
        if isinstance(self.inherit_env, str) or not all(
            isinstance(key, str) and _ENV_NAME.fullmatch(key) for key in self.inherit_env
        ):
            raise ConfigError(f"server {self.name!r}: inherit_env must be a list of variable names")
        object.__setattr__(self, "inherit_env", tuple(self.inherit_env))
        if not isinstance(self.default_timeout, timedelta) or self.default_timeout <= timedelta(0):
            raise ConfigError(f"server {self.name!r}: default_timeout must be a positive timedelta")
        if (
            isinstance(self.max_content_bytes, bool)
            or not isinstance(self.max_content_bytes, int)
            or self.max_content_bytes < 64
        ):
            raise ConfigError(
                f"server {self.name!r}: max_content_bytes must be an int of 64 or more"
            )

    def child_environment(self, source: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment a stdio server starts with."""
        source = os.environ if source is None else source
        out = {
            key: source[key]
            for key in ("PATH", "HOME", "TMPDIR", *self.inherit_env)
            if key in source
        }
        out.update(self.env or {})
        return out


def _process_text(value: Any) -> bool:
    """Can `value` be an argument or an environment value of a process (POSIX)?"""
    if not isinstance(value, str) or "\0" in value:
        return False
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        return False
    return True


def _url_problem(url: Any) -> str | None:
    """What makes `url` no streamable HTTP endpoint agentrt can reach, or None.

    Said without quoting the URL (it may carry a token)."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return "must start with http:// or https://"
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        return "holds a space or a control character"
    try:
        url.encode("ascii")
    except UnicodeEncodeError:
        return "holds characters that are not ASCII (percent-encode them)"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        if "Port" in str(exc):
            return "cannot be read: its port is not a number from 1 to 65535"
        return "cannot be read: its host is not a host name or an address"
    if not parts.hostname:
        return "names no host"
    if port is not None and not 0 < port <= 65535:
        return "its port is not a number from 1 to 65535"
    return None


@dataclasses.dataclass(frozen=True)
class Rule:
    """The operator's classification of one server tool; without one the tool is not registered.

    `deny` hides top-level parameters from the model; `fixed` sets parameters
    to the operator's values (hidden from the model, injected after
    validation). `rename` replaces the offered name `<server>_<tool>`;
    `description` replaces the server's (the pinned one is still checked).
    `allow_hint_mismatch` keeps a tool whose annotations contradict `side_effect`.
    """

    side_effect: str
    timeout: timedelta | None = None
    terminal: bool = False
    description: str | None = None
    deny: Sequence[str] = ()
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rename: str | None = None
    allow_hint_mismatch: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.side_effect, str) or self.side_effect not in _SIDE_EFFECTS:
            raise ConfigError(
                f"side_effect must be one of {', '.join(_SIDE_EFFECTS)}, got {self.side_effect!r}"
            )
        if self.timeout is not None and (
            not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0)
        ):
            raise ConfigError(f"timeout must be a positive timedelta, got {self.timeout!r}")
        for flag in ("terminal", "allow_hint_mismatch"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag} must be true or false")
        if self.description is not None and not isinstance(self.description, str):
            raise ConfigError("description must be text")
        if isinstance(self.deny, str) or not all(isinstance(name, str) for name in self.deny):
            raise ConfigError("deny must be a list of parameter names")
        object.__setattr__(self, "deny", tuple(self.deny))
        if not isinstance(self.fixed, Mapping) or not all(isinstance(k, str) for k in self.fixed):
            raise ConfigError("fixed must be an object of parameter names to values")
        try:
            object.__setattr__(self, "fixed", copy_json(dict(self.fixed)))
        except JSONValueError as exc:
            raise ConfigError(f"fixed values must be usable JSON: {exc}") from exc
        both = set(self.deny) & set(self.fixed)
        if both:
            raise ConfigError(f"parameter {sorted(both)[0]!r} is both denied and fixed")
        if self.rename is not None and (
            not isinstance(self.rename, str) or not TOOL_NAME.fullmatch(self.rename)
        ):
            raise ConfigError(f"rename {self.rename!r} must match {TOOL_NAME.pattern}")


@dataclasses.dataclass(frozen=True)
class PinnedTool:
    """One tool as a pin saw it: what the model would read, and what the operator reviewed."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] | None
    schema_hash: str
    description_hash: str

    @classmethod
    def of(
        cls, name: str, description: str, schema: Mapping[str, Any], annotations: Any
    ) -> PinnedTool:
        return cls(
            name=name,
            description=description,
            input_schema=schema,
            annotations=annotations if isinstance(annotations, Mapping) else None,
            schema_hash=content_hash(schema),
            description_hash=content_hash(description),
        )


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a pin recorded of one server: its tools by name."""

    server: str
    tools: Mapping[str, PinnedTool]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "server": self.server,
            "tools": {
                name: {
                    "description": tool.description,
                    "description_hash": tool.description_hash,
                    "input_schema": tool.input_schema,
                    "schema_hash": tool.schema_hash,
                    "annotations": tool.annotations,
                }
                for name, tool in sorted(self.tools.items())
            },
        }


@dataclasses.dataclass(frozen=True)
class Report:
    """What a load or a check decided, tool by tool, in the server's own tool names.

    `registered`: offered to the model (server name -> offered name);
    `refused`: (tool, reason) pairs; `unpinned`: offered by the server but not
    in the manifest (ignored); `unclassified`: pinned but no rule names its side
    effect (not registered).
    """

    registered: Mapping[str, str]
    refused: Sequence[tuple[str, str]]
    unpinned: Sequence[str]
    unclassified: Sequence[str]

    @property
    def clean(self) -> bool:
        """Nothing refused, nothing new, nothing left unclassified."""
        return not (self.refused or self.unpinned or self.unclassified)

    def to_json(self) -> dict[str, Any]:
        return {
            "registered": dict(self.registered),
            "refused": [{"tool": tool, "reason": reason} for tool, reason in self.refused],
            "unpinned": list(self.unpinned),
            "unclassified": list(self.unclassified),
        }

    def lines(self) -> list[str]:
        """The report for a person: one line per tool."""
        out = [f"registered {name} as {offered}" for name, offered in self.registered.items()]
        out += [f"refused {name}: {reason}" for name, reason in self.refused]
        out += [
            f"unpinned {name}: offered by the server, not in the manifest" for name in self.unpinned
        ]
        out += [f"unclassified {name}: no rule names its side effect" for name in self.unclassified]
        return out


# ---------------------------------------------------------------------------
# Files


def _read_owner_only(path: str | os.PathLike[str], what: str) -> Any:
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(f"cannot open the {what} {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"the {what} {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise InsecureModeError(
                f"the {what} {path} is owned by uid {st.st_uid}, not by this user; "
                "its owner could change which tools an agent gets"
            )
        if stat.S_IMODE(st.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
            raise InsecureModeError(
                f"the {what} {path} is writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); make it 0600"
            )
        if st.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"the {what} {path} is larger than {MAX_FILE_BYTES} bytes")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        return parse_json(b"".join(chunks))
    except JSONValueError as exc:
        raise ConfigError(f"the {what} {path} is not usable JSON: {exc}") from exc


def _fields(data: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    return data


def parse_duration(value: Any, where: str) -> timedelta:
    """`"250ms"`, `"5s"`, `"2m"`, `"1h"` as a positive timedelta."""
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)] if match else 0.0
    if not match or not math.isfinite(seconds) or seconds <= 0 or seconds > 86_400 * 365:
        raise ConfigError(
            f'{where}: timeout {value!r} must be a positive duration like "5s", "250ms" or "2m"'
        )
    return timedelta(seconds=seconds)


_RULE_FIELDS = {field.name for field in dataclasses.fields(Rule)}


def read_rules(path: str | os.PathLike[str]) -> dict[str, Rule]:
    """The operator's rules file: `{"format": ..., "tools": {"<tool>": {<Rule fields>}}}`.

    Refused (ConfigError, InsecureModeError): a file not owned by this user or
    writable by others, a field this version does not know, a bad value.
    """
    data = _fields(_read_owner_only(path, "rules file"), {"format", "tools"}, "rules file")
    if data.get("format") != RULES_FORMAT:
        raise ConfigError(f"rules file: format must be {RULES_FORMAT!r}")
    tools = data.get("tools")
    if not isinstance(tools, dict):
        raise ConfigError("rules file: tools must be an object of tool names to rules")
    rules: dict[str, Rule] = {}
    for name, raw in tools.items():
        where = f"rules file, tool {name!r}"
        fields = dict(_fields(raw, _RULE_FIELDS, where))
        if "side_effect" not in fields:
            raise ConfigError(f"{where}: side_effect is required")
        if "timeout" in fields:
            fields["timeout"] = parse_duration(fields["timeout"], where)
        try:
            rules[name] = Rule(**fields)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return rules


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """A manifest written by `write_manifest`; refused if edited so a hash no longer matches."""
    return manifest_from_json(_read_owner_only(path, "manifest"))


_PINNED_FIELDS = {"description", "description_hash", "input_schema", "schema_hash", "annotations"}


def manifest_from_json(data: Any) -> Manifest:
    data = _fields(data, {"format", "server", "tools"}, "manifest")
    if data.get("format") != MANIFEST_FORMAT:
        raise ConfigError(f"manifest: format must be {MANIFEST_FORMAT!r}")
    server = data.get("server")
    tools = data.get("tools")
    if not isinstance(server, str) or not isinstance(tools, dict):
        raise ConfigError("manifest: server must be text and tools an object")
    pinned: dict[str, PinnedTool] = {}
    for name, raw in tools.items():
        where = f"manifest, tool {name!r}"
        fields = _fields(raw, _PINNED_FIELDS, where)
        if set(fields) != _PINNED_FIELDS:
            raise ConfigError(f"{where}: missing {sorted(_PINNED_FIELDS - set(fields))[0]!r}")
        description, schema = fields["description"], fields["input_schema"]
        annotations = fields["annotations"]
        if not isinstance(description, str) or not isinstance(schema, dict):
            raise ConfigError(f"{where}: description must be text and input_schema an object")
        if annotations is not None and not isinstance(annotations, dict):
            raise ConfigError(f"{where}: annotations must be an object or null")
        tool = PinnedTool.of(name, description, schema, annotations)
        if (tool.schema_hash, tool.description_hash) != (
            fields["schema_hash"],
            fields["description_hash"],
        ):
            raise ConfigError(f"{where}: a hash does not match what it hashes; re-pin the server")
        pinned[name] = tool
    return Manifest(server=server, tools=pinned)


def manifest_text(manifest: Manifest) -> str:
    """The manifest as the file holds it: indented for review, literals as the server sent them."""
    out: list[str] = []
    _pretty(manifest.to_json(), 0, out)
    return "".join(out) + "\n"


def _pretty(value: Any, indent: int, out: list[str]) -> None:
    pad = "  " * (indent + 1)
    if isinstance(value, dict) and value:
        out.append("{\n")
        for index, (key, item) in enumerate(sorted(value.items())):
            out.append(pad + policy_json(key).decode() + ": ")
            _pretty(item, indent + 1, out)
            out.append(",\n" if index < len(value) - 1 else "\n")
        out.append("  " * indent + "}")
    elif isinstance(value, list) and value:
        out.append("[\n")
        for index, item in enumerate(value):
            out.append(pad)
            _pretty(item, indent + 1, out)
            out.append(",\n" if index < len(value) - 1 else "\n")
        out.append("  " * indent + "]")
    else:
        out.append(policy_json(value).decode())


def write_manifest(
    manifest: Manifest, path: str | os.PathLike[str], *, replace: bool = True
) -> None:
    """Write the manifest with mode 0600, fsynced, put in place in one step.

    `replace=False` never replaces a file already at `path`, even one that appeared
    after the caller looked (`FileExistsError`): the manifest there is what was
    reviewed. Nothing of a failed attempt is left beside `path`.
    """
    path = os.fspath(path)
    data = manifest_text(manifest).encode("utf-8")
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            _put_new(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    # The folder's entry for `path` made durable (best effort: some systems refuse).
    fsync_directory(os.path.dirname(os.path.abspath(path)), best_effort=True)


def _put_new(tmp: str, path: str) -> None:
    """`tmp` at `path`, unless something is there (`FileExistsError`), in one step."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # No hard links on this file system: look, then rename (a narrow window).
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from exc
        os.replace(tmp, path)


# ---------------------------------------------------------------------------
# The decision: which server tools become agentrt tools


@dataclasses.dataclass(frozen=True)
class Offer:
    """A tool as the server offers it now (schema parsed from the raw bytes it sent)."""

    name: str
    description: str
    input_schema: Any
    annotations: Any
    output_schema: Any = None


_OUTPUT_NAME = "output_schema"


def compile_output_schema(schema: Any) -> CompiledTool:
    """A tool's declared output schema, checked and compiled as agentrt compiles an input
    schema (no I/O, every `pattern` matched in linear time by RE2), or ConfigError.

    The MCP SDK would check a result against it with `jsonschema` and Python's
    backtracking `re`, on the event loop: a pattern such as `^(a+)+$` would freeze the
    loop, its timeouts and the lease's heartbeat (decision 0160).
    """
    if not isinstance(schema, dict):
        raise ConfigError("it is not a JSON object")
    spec = ToolSpec(
        name=_OUTPUT_NAME,
        description="",
        input_schema=schema,
        side_effect=SideEffect.READ_ONLY,
        timeout=DEFAULT_TIMEOUT,
    )
    try:
        return compile_tool(spec)
    except ConfigError as exc:
        said = str(exc).removeprefix(f"tool {_OUTPUT_NAME!r}: ")
        raise ConfigError(said.replace("input schema", "output schema")) from exc


@dataclasses.dataclass(frozen=True)
class Admitted:
    """A tool `decide` lets through: the server's tool, its rule, and the schema the model sees."""

    offer: Offer
    rule: Rule
    spec: ToolSpec


def hint_mismatch(side_effect: str, annotations: Any) -> str | None:
    """Why the server's annotations contradict the operator's class, or None.

    Annotations only refuse: an absent hint never contradicts anything.
    """
    if not isinstance(annotations, Mapping):
        return None
    if side_effect == SideEffect.READ_ONLY and annotations.get("readOnlyHint") is False:
        return "classified read_only, but the server marks it readOnlyHint: false"
    if side_effect != SideEffect.DESTRUCTIVE and annotations.get("destructiveHint") is True:
        return f"classified {side_effect}, but the server marks it destructiveHint: true"
    return None


# Keywords at the top of a schema that may name a parameter without changing what
# it means to hide it: its own entry, the required list, prose, the type and dialect.
_OWN_KEYWORDS = frozenset(
    {"properties", "required", "description", "title", "$comment", "type", "$schema"}
)


def _mentions(node: Any, name: str) -> bool:
    """Whether `name` appears anywhere in `node` as a key or a string value."""
    if isinstance(node, dict):
        return any(key == name or _mentions(item, name) for key, item in node.items())
    if isinstance(node, list):
        return any(_mentions(item, name) for item in node)
    return bool(node == name)


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return True  # a pattern that cannot be read might match anything


def model_schema(schema: Any, rule: Rule) -> tuple[dict[str, Any] | None, str | None]:
    """The schema the model sees once `deny` and `fixed` are applied, or the reason for refusal."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None, 'its input schema is not an object schema with "type": "object"'
    hidden = [*rule.deny, *rule.fixed]
    if not hidden:
        return copy_json(schema), None
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return None, "its input schema's properties are not an object"
    for name in hidden:
        # Anywhere else (a combinator, if/then/else, dependencies, $defs a $ref may
        # bring in, propertyNames...) a mention could change what hiding it means.
        for keyword, value in schema.items():
            if keyword in _OWN_KEYWORDS or keyword == "patternProperties":
                continue
            if _mentions(value, name):
                return None, (
                    f"parameter {name!r} is mentioned by {keyword}, so hiding or fixing "
                    "it cannot be checked"
                )
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict) and any(_matches(pattern, name) for pattern in patterns):
            return None, (
                f"parameter {name!r} is matched by patternProperties, so hiding or fixing it "
                "cannot be checked"
            )
    required = schema.get("required", [])
    for name in rule.deny:
        if isinstance(required, list) and name in required:
            return None, (
                f"parameter {name!r} is required by the server, so it cannot be denied "
                "(fix it to a value instead)"
            )
    for name in rule.fixed:
        if name not in properties and schema.get("additionalProperties") is False:
            return None, f"fixed parameter {name!r} is not a parameter of the tool"
    out = copy_json(schema)
    out_properties = dict(out.get("properties", {}))
    for name in hidden:
        out_properties.pop(name, None)
    out["properties"] = out_properties
    if isinstance(out.get("required"), list):
        out["required"] = [name for name in out["required"] if name not in hidden]
        if not out["required"]:
            del out["required"]
    # The model may not set a hidden parameter: it is no longer a property, and any
    # extra key is refused, whatever the server's schema allowed.
    out["additionalProperties"] = False
    return out, None


def decide(
    server: Server,
    manifest: Manifest,
    rules: Mapping[str, Rule],
    offers: Sequence[Offer],
) -> tuple[list[Admitted], Report]:
    """Which offered tools pass: the manifest, the rules, the annotations and the schema checks.

    The schema check is the one `Driver(...)` makes (`compile_tool`): a schema
    that refers outside itself, names an unknown dialect or does not compile is
    refused here, for that tool only. Pure: no I/O.
    """
    if manifest.server != server.name:
        raise ConfigError(f"the manifest pins server {manifest.server!r}, not {server.name!r}")
    unknown_rules = sorted(set(rules) - set(manifest.tools))
    if unknown_rules:
        raise ConfigError(
            f"rule for {unknown_rules[0]!r}, which the manifest does not pin "
            "(pin the server again, or remove the rule)"
        )
    by_name = {offer.name: offer for offer in offers}
    admitted: list[Admitted] = []
    refused: list[tuple[str, str]] = []
    unclassified: list[str] = []
    offered_names: dict[str, str] = {}
    for name in sorted(manifest.tools):
        pinned = manifest.tools[name]
        offer = by_name.get(name)
        if offer is None:
            refused.append((name, REASON_GONE))
            continue
        if content_hash(offer.input_schema) != pinned.schema_hash:
            refused.append((name, REASON_SCHEMA_CHANGED))
            continue
        if content_hash(offer.description) != pinned.description_hash:
            refused.append((name, REASON_DESCRIPTION_CHANGED))
            continue
        rule = rules.get(name)
        if rule is None:
            unclassified.append(name)
            continue
        mismatch = hint_mismatch(rule.side_effect, offer.annotations)
        if mismatch is not None and not rule.allow_hint_mismatch:
            refused.append((name, f"its annotations contradict the rule: {mismatch}"))
            continue
        offered = rule.rename or f"{server.name}_{name}"
        if not TOOL_NAME.fullmatch(offered):
            refused.append(
                (name, f"the offered name {offered!r} does not match {TOOL_NAME.pattern}")
            )
            continue
        if offered in offered_names.values():
            refused.append((name, f"another tool is already offered as {offered!r}"))
            continue
        schema, why = model_schema(offer.input_schema, rule)
        if schema is None:
            refused.append((name, why or "its input schema cannot be used"))
            continue
        spec = ToolSpec(
            name=offered,
            description=rule.description if rule.description is not None else offer.description,
            input_schema=schema,
            side_effect=rule.side_effect,
            timeout=rule.timeout or server.default_timeout,
            terminal=rule.terminal,
        )
        try:
            compile_tool(spec)
            compile_tool(dataclasses.replace(spec, input_schema=offer.input_schema))
        except ConfigError as exc:
            refused.append((name, f"its input schema cannot be used: {exc}"))
            continue
        if offer.output_schema is not None:
            try:
                compile_output_schema(offer.output_schema)
            except ConfigError as exc:
                refused.append((name, f"its output schema cannot be used: {exc}"))
                continue
        offered_names[name] = offered
        admitted.append(Admitted(offer=offer, rule=rule, spec=spec))
    unpinned = sorted(name for name in by_name if name not in manifest.tools)
    report = Report(
        registered=offered_names, refused=refused, unpinned=unpinned, unclassified=unclassified
    )
    return admitted, report
