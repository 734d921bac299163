"""A database given by name, as it may be printed: a SQLite file's path, or a PostgreSQL URL.

A `postgresql://` (or `postgres://`) URL may hold a password, as its user's
(`user:PASSWORD@host`) or as a `password=` parameter (or libpq's `sslpassword=`, the
client key's). Whatever prints the name
of a database it was given (the command line, the console) prints `shown_db`
of it, the password `***`, and passes text that may quote the URL through
`redact_db`. A path is printed as it is. No driver is imported here: a URL
too broken to parse still has its passwords hidden.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

_URL_SCHEMES = ("postgresql://", "postgres://")
HIDDEN = "***"
"""What a password is printed as."""

# A URL's scheme (RFC 3986) and `://`; two characters at least, so that a drive or a
# directory named with one letter and a colon stays a path.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")

# libpq's keyword=value connection string (`host=h dbname=d password=...`), by its first
# keyword, any of libpq's (PostgreSQL 17's list): agentrt reads URLs only, and a file
# whose name begins so is given as `./NAME`.
_CONNINFO_KEYWORDS = [
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
]
_CONNINFO = re.compile(
    r"\s*(?:" + "|".join(sorted(_CONNINFO_KEYWORDS, key=len, reverse=True)) + r")\s*=",
    re.IGNORECASE,
)
# A `password` (or `sslpassword`) keyword's value in such a string: quoted (`'...'`,
# `\'` inside) or a word, in which libpq reads a backslash as escaping the next character
# (`a\ b` is `a b`).
_CONNINFO_PASSWORD = re.compile(
    r"(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.|\\$)+)", re.IGNORECASE
)


def is_db_url(path: str) -> bool:
    """Whether the database given is a PostgreSQL URL (not a SQLite file's path)."""
    return path.startswith(_URL_SCHEMES)


def other_url_scheme(path: str) -> str | None:
    """The scheme of a URL agentrt does not read (`postgresql+psycopg`, `POSTGRESQL`,
    `sqlite`, ...), refused rather than opened as a SQLite file's path (decision 0191);
    None for a PostgreSQL URL or a path."""
    found = _SCHEME.match(path)
    if found is None or is_db_url(path):
        return None
    return found.group()[:-3]


def not_a_path(path: str) -> bool:
    """Whether a database name is not a SQLite file's path: a PostgreSQL URL, or a name
    `other_scheme_refusal` refuses (the command line never says "no database at" it)."""
    return is_db_url(path) or other_scheme_refusal(path) is not None


def _spaced_url(path: str) -> bool:
    """A URL with white space before or after it (`" postgresql://..."`, a newline read
    with it from a file): taken as it is, it would be a path, or a database's name."""
    return path != path.strip() and _SCHEME.match(path.strip()) is not None


def other_scheme_refusal(path: str) -> str | None:
    """Why a database name that is neither a path nor a URL agentrt reads is refused, its
    passwords hidden (`cannot open NAME: ...`): a URL of another scheme (decision 0191),
    libpq's keyword=value string, a URL with white space around it (decision 0194); None
    for a PostgreSQL URL or a path. One sentence wherever a database is named: the store's
    open, the command line, the proxy's config, the test kit."""
    if _spaced_url(path):
        return (
            f"cannot open {shown_db(path)}: the URL has white space before or after it: "
            "give it without"
        )
    if _CONNINFO.match(path):
        return (
            f"cannot open {shown_db(path)}: agentrt does not read libpq's keyword=value "
            "connection strings: write it as a postgresql:// URL (a SQLite file whose name "
            "begins so is given as ./ and its name)"
        )
    scheme = other_url_scheme(path)
    if scheme is None:
        return None
    return (
        f"cannot open {shown_db(path)}: agentrt does not read a {scheme}:// URL: a PostgreSQL "
        "URL begins postgresql:// or postgres:// (libpq's, in lower case), a SQLite database "
        "is its file's path"
    )


def _is_url(path: str) -> bool:
    """Whether `path` is written as a URL, of any scheme (white space around it or not):
    its passwords are hidden."""
    return _SCHEME.match(path.strip()) is not None


def _passwords(path: str) -> list[str]:
    """The passwords a URL holds (its user's and a `password=` parameter's), as written
    and percent-decoded, longest first; found by plain splitting, so that a URL urllib
    refuses has them too; and a libpq keyword string's `password`. None for a path."""
    if _CONNINFO.match(path):
        found = [m.group(1) for m in _CONNINFO_PASSWORD.finditer(path)]
        found += [w[1:-1] for w in found if len(w) > 1 and w[0] == w[-1] == "'"]
        return sorted({w for w in found if w}, key=len, reverse=True)
    if not _is_url(path):
        return []
    _, _, rest = path.partition("://")
    found = []
    # As libpq reads it: the user's part runs to the last `@` before the first `/`, so
    # a password may hold an unencoded `?` or `#` (decision 0141); and as urllib reads
    # it, split at `?` first: whatever either takes for a password is hidden.
    head = rest.split("/", 1)[0]
    after = rest
    for authority in (head, head.split("?", 1)[0]):
        if "@" in authority:
            user = authority.rsplit("@", 1)[0]
            after = rest[len(user) + 1 :]
            if ":" in user:
                found.append(user.split(":", 1)[1])
    for query in (path, after):
        query = query.split("?", 1)[1] if "?" in query else ""
        found.extend(part.partition("=")[2] for part in query.split("&") if _is_password(part))
    every = {
        form for word in found for form in (word, unquote(word), unquote(word.replace("+", " ")))
    }
    return sorted((w for w in every if w), key=len, reverse=True)


def ambiguous_user(url: str) -> bool:
    """Whether the user's part of a PostgreSQL URL holds a `?` or `#` before its `@`: a
    password written unencoded, which libpq and URL parsers split differently (the
    password's pieces would reach a host name or a query parameter, and be printed)."""
    if not _is_url(url):
        return False
    head = url.partition("://")[2].split("/", 1)[0]
    return "@" in head and any(mark in head.rsplit("@", 1)[0] for mark in "?#")


def _is_password(parameter: str) -> bool:
    """A `password` parameter, or libpq's `sslpassword` (the client key's)."""
    return unquote(parameter.partition("=")[0]).strip().lower() in ("password", "sslpassword")


def shown_db(path: str) -> str:
    """The database as it may be printed: a path as it is, a URL (of any scheme) with its
    password(s) `***`."""
    if _CONNINFO.match(path) or _spaced_url(path):
        return redact_db(path, path)  # hidden where they stand: nothing else is changed
    if not _is_url(path):
        return path
    if ambiguous_user(path):
        # A `?` or `#` before the user's `@` (in the password, as libpq reads it): urllib
        # would split there and print the rest; every password hidden where it stands.
        return redact_db(path, path)
    try:
        parts = urlsplit(path)
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            if ":" in user:
                user = user.split(":", 1)[0] + ":" + HIDDEN
            netloc = f"{user}@{host}"
        query = "&".join(
            f"{part.partition('=')[0]}={HIDDEN}" if _is_password(part) else part
            for part in parts.query.split("&")
        )
        return redact_db(
            # The scheme as written (urllib lower-cases it).
            urlunsplit((path.partition(":")[0], netloc, parts.path, query, parts.fragment)),
            path,
        )
    except ValueError:  # too broken to split: every password it holds, hidden where it stands
        return redact_db(path, path)


def redact_db(text: str, path: str) -> str:
    """`text` with every password the database URL `path` holds replaced by `***`."""
    for word in _passwords(path):
        text = text.replace(word, HIDDEN)
    return text


DEFAULT_SCHEMA = "agentrt"
"""The schema a PostgreSQL URL without `schema=` names (docs/postgres.md)."""


def schema_of(url: str) -> str:
    """The schema a PostgreSQL URL names (`?schema=`, `agentrt` without one)."""
    query = url.split("?", 1)[1] if "?" in url else ""
    found = DEFAULT_SCHEMA
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if unquote(key) == "schema":
            found = unquote(value)
    return found


def with_schema(url: str, schema: str) -> str:
    """The PostgreSQL URL `url` naming `schema` instead (its other parameters kept)."""
    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and unquote(p.partition("=")[0]) != "schema"]
    return base + "?" + "&".join([*kept, f"schema={schema}"])


__all__ = [
    "DEFAULT_SCHEMA",
    "HIDDEN",
    "is_db_url",
    "not_a_path",
    "other_scheme_refusal",
    "other_url_scheme",
    "redact_db",
    "schema_of",
    "shown_db",
    "with_schema",
]
