"""Who may use the console, and what every response says to the browser.

Rules (decision 0024):

- **Loopback** is judged by the literal address the console binds: exactly
  `127.0.0.1`, `::1` or `localhost`. Anything else, including the rest of
  127.0.0.0/8 and `0.0.0.0`, counts as "elsewhere". The exemption from the token
  is kept that narrow so that it is easy to check and cannot be widened by a
  name that happens to resolve to a local address.
- **Elsewhere needs a token.** A token given (or generated) is always
  required, on loopback too. It travels once, in the link the console prints
  (`/login?token=...`); the console answers with a cookie (HttpOnly,
  SameSite=Strict, Path=/, its name derived from the token so that two consoles
  on one host keep their logins apart) and a redirect to a clean URL. The cookie holds
  HMAC-SHA256(token, a fixed label), never the token itself, compared in
  constant time; it stays valid across restarts with the same token.
- **On loopback the Host header must name the console** (`127.0.0.1:PORT`,
  `localhost:PORT`, `[::1]:PORT`): a page on another site whose name was
  re-pointed at 127.0.0.1 (DNS rebinding) is refused before anything is read.
- **Every state-changing request** (any method but GET and HEAD) must carry an
  `Origin` equal to the console's own (`http://` + the Host it was reached by)
  and the CSRF token of this start of the console, compared in constant time.
- **Every response** carries a strict Content-Security-Policy (no inline script
  or style, nothing from elsewhere, no framing, forms only to the console),
  `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin` (not
  `no-referrer`: with it a browser sends `Origin: null` on a form post),
  `X-Frame-Options: DENY` and `Cache-Control: no-store`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

from .._db_url import shown_db
from .._errors import ConfigError
from ..trace import sanitize

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
COOKIE = "agentrt_console"
"""The start of the session cookie's name; the rest depends on the token (`cookie_name`)."""
_NAME_LABEL = b"agentrt console cookie name v1"
NAME_DIGITS = 12
"""Hex digits of HMAC-SHA256(token, a label of its own) that end the cookie's name."""
MIN_TOKEN = 20
"""Characters a given token needs at least (a generated one has 43)."""
_TOKEN = re.compile(r"[A-Za-z0-9_\-.~]+")
_COOKIE_LABEL = b"agentrt console session v1"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the console on this machine, by the rule above."""
    return host in LOOPBACK_HOSTS


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """A given token, or ConfigError saying what is wrong with it (never echoing it)."""
    if len(token) < MIN_TOKEN:
        raise ConfigError(f"the console token must be at least {MIN_TOKEN} characters long")
    if not _TOKEN.fullmatch(token):
        raise ConfigError(
            "the console token may hold only letters, digits and - _ . ~ (it travels in a link)"
        )
    return token


@dataclass(frozen=True)
class ConsoleConfig:
    """How one console serves one database."""

    db_path: str
    by: str
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    poll_ms: int = 1000
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    def __post_init__(self) -> None:
        if not self.by.strip() or sanitize(self.by) != self.by:
            raise ConfigError("--by must be one line of visible characters")
        if self.token is not None:
            check_token(self.token)
        elif not self.loopback:
            raise ConfigError(
                f"binding {self.host} (not 127.0.0.1, ::1 or localhost) needs a token"
            )

    def __repr__(self) -> str:  # never shows the token, the CSRF secret or a URL's password
        return (
            f"ConsoleConfig(db_path={shown_db(self.db_path)!r}, by={self.by!r}, "
            f"host={self.host!r}, port={self.port}, token={'set' if self.token else 'none'})"
        )

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def needs_token(self) -> bool:
        return self.token is not None

    def session_value(self) -> str:
        """The cookie's value: derived from the token, never the token itself."""
        assert self.token is not None
        return hmac.new(self.token.encode(), _COOKIE_LABEL, hashlib.sha256).hexdigest()

    @property
    def cookie_name(self) -> str:
        """`agentrt_console_<12 hex digits>`: one name per token, whatever the port.

        A browser keeps cookies by host, not by port: with one fixed name, two
        consoles with their own tokens on one host replaced each other's cookie, so
        logging in to one logged the browser out of the other. The name is derived
        from the token (not the port), so a console restarted with the same token, on
        any port, still knows the browser; it says nothing about the token.
        """
        if self.token is None:
            return COOKIE
        digest = hmac.new(self.token.encode(), _NAME_LABEL, hashlib.sha256).hexdigest()
        return f"{COOKIE}_{digest[:NAME_DIGITS]}"

    def token_matches(self, given: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def cookie_matches(self, given: str | None) -> bool:
        if self.token is None:
            return True
        if not given:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.session_value().encode())

    def csrf_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.csrf.encode())

    def allowed_hosts(self) -> frozenset[str]:
        """Host header values a browser sends when it really means this console."""
        names = ["127.0.0.1", "localhost", "[::1]"]
        hosts = {f"{n}:{self.port}" for n in names}
        if self.port == 80:
            hosts |= set(names)
        return frozenset(hosts)

    def host_ok(self, host: str | None) -> bool:
        """Off loopback any Host is accepted (the token guards); on loopback only its own."""
        if not self.loopback:
            return True
        return host is not None and host.lower() in self.allowed_hosts()

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        """The request comes from one of the console's own pages."""
        if not origin or not host or origin == "null":
            return False
        return hmac.compare_digest(origin.lower().encode(), f"http://{host.lower()}".encode())

    def link(self, *, with_token: bool) -> str:
        """The address to open; with the token for the one-time login link."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        base = f"http://{host}:{self.port}/"
        if self.token is not None:
            return f"{base}login?token={self.token if with_token else '<your token>'}"
        return base


__all__ = [
    "COOKIE",
    "CSP",
    "HEADERS",
    "LOOPBACK_HOSTS",
    "MIN_TOKEN",
    "ConsoleConfig",
    "check_token",
    "is_loopback",
    "new_token",
]
