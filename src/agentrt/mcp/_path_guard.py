"""The proxy's start-up guard: a stdio server must not be pointed at the proxy's own files.

`agentrt-proxy` keeps its record (the database), its configuration, and the
operator's manifests and rules on disk. A file-system server started with one
of them, or a folder holding one, as an argument could let the model rewrite
the record or the rules through a tool call the proxy itself allows. This
guard refuses such a server at start-up (`ConfigError`), unless its entry sets
`skip_path_check`.

It is a best-effort guard against a mistake, not a sandbox: it reads the
arguments of the command, in the usual spellings (a link, a trailing slash, a
relative path, `--root=PATH`, `-rPATH`, `file://`, `~`, a comma-separated
list, `key=PATH` inside it as Docker's `--mount type=bind,src=PATH`, and
`PATH:/dir` as Docker's `-v`), resolved against both the proxy's working
directory (the server's) and the config's folder. It cannot see a path a
server reads from its environment, its own configuration, or builds at run
time, nor the working directory a server serves by default.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .._errors import ConfigError

_DATABASE_SIBLINGS = ("-wal", "-shm", "-journal", "-lock")


def protected_files(
    config: Path, database: Path | None, manifests: Iterable[Path], rules: Iterable[Path]
) -> dict[Path, str]:
    """The proxy's own files, resolved (links followed), each with what it is."""
    named: dict[Path, str] = {}

    def add(path: Path, what: str) -> None:
        named.setdefault(Path(os.path.realpath(path)), what)

    add(config, "the proxy's config")
    if database is not None:  # None: the database is a server's (a PostgreSQL URL)
        add(database, "the database")
        for suffix in _DATABASE_SIBLINGS:
            add(Path(f"{database}{suffix}"), "the database")
    for path in manifests:
        add(path, "a manifest")
    for path in rules:
        add(path, "a rules file")
    return named


def _spellings(argument: str) -> Iterator[str]:
    """The paths one argument may name: itself, an option's value, a list's items, each
    item's `key=PATH` value, and each side of a `PATH:/dir` pair (a Docker volume)."""
    candidates = [argument]
    _, equals, value = argument.partition("=")
    if equals:
        candidates.append(value)  # --root=/srv, root=/srv
    elif argument.startswith("-") and not argument.startswith("--") and len(argument) > 2:
        candidates.append(argument[2:])  # -r/srv
    seen: set[str] = set()
    for candidate in candidates:
        for item in candidate.split(","):
            item = item.strip()
            if item.lower().startswith("file:"):
                parsed = urllib.parse.urlsplit(item)
                items = [urllib.parse.unquote(parsed.path)]
            else:
                # type=bind,src=/srv,dst=/data (Docker's --mount); /srv:/data:ro (-v)
                _, equals, value = item.partition("=")
                items = [item, *([value] if equals else [])]
                items += [part for one in list(items) for part in one.split(":")]
            for spelling in items:
                if spelling and spelling not in seen:
                    seen.add(spelling)
                    yield spelling


def _resolved(spelling: str, bases: Sequence[Path]) -> Iterator[Path]:
    path = Path(os.path.expanduser(spelling))
    if path.is_absolute():
        yield Path(os.path.realpath(path))
        return
    for base in bases:
        yield Path(os.path.realpath(base / path))


def reaching(
    command: Sequence[str], protected: dict[Path, str], bases: Sequence[Path]
) -> tuple[str, Path, str] | None:
    """The first argument of `command` (after the program) that names a protected file
    or a folder holding one: (argument, the file, what it is), or None."""
    for argument in command[1:]:
        for spelling in _spellings(argument):
            for path in _resolved(spelling, bases):
                for kept, what in protected.items():
                    if kept == path or kept.is_relative_to(path):
                        return argument, kept, what
    return None


def check_server_paths(
    server: str,
    command: Sequence[str],
    protected: dict[Path, str],
    bases: Sequence[Path],
) -> None:
    """Refuse (`ConfigError`) a stdio server whose arguments reach the proxy's own files."""
    found = reaching(command, protected, bases)
    if found is None:
        return
    argument, kept, what = found
    raise ConfigError(
        f"proxy config, server {server!r}: its argument {argument!r} reaches {what} "
        f"({kept}), which a tool call could then change; point the server elsewhere, or set "
        "skip_path_check in its entry if this is intended"
    )
