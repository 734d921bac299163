"""Signing webhook requests, and the checks the webhook makes before it trusts one.

The signature is `v1=` and the lowercase hex of HMAC-SHA256 with the shared
secret over

    f"{timestamp}\\n{nonce}\\n{METHOD}\\n{path}\\n".encode() + body

where `timestamp` is Unix seconds in decimal, `nonce` is 1 to 64 visible ASCII
characters chosen fresh for every request, `METHOD` is upper case and `path` is
the request target exactly as sent (percent-encoding kept, `?query` included
when there is one). This module keeps no state of its own except in the two
bounded structures the webhook holds:

- `NonceCache`: every nonce of a verified request until its timestamp leaves
  the window of the webhook that checked it (after that the timestamp check
  refuses it anyway), or the cache's own `skew` when that is longer, at most
  `max_entries` of them; when it is full of live nonces it refuses rather than
  forget one.
- `RateLimiter`: a token bucket per client key, at most `max_keys` buckets;
  idle (full) buckets are dropped first, and past that every new client shares
  one overflow bucket.

Nothing here reads a clock by itself: callers pass the time, so tests can.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import re
from dataclasses import dataclass

from .._errors import ConfigError

SCHEME = "v1"
SKEW = 300
"""Seconds a request's timestamp may differ from the webhook's clock, either way."""
MAX_NONCE = 64
"""Characters of a nonce, at most."""
MIN_SECRET = 32
"""Bytes of a shared secret, at least."""
MAX_BODY = 64 * 1024
"""Bytes of a request body, at most: room for the longest decision a `Decision` accepts
(`by` 200 and `note` 4,000 characters) even when every character is outside the BMP and the
JSON escapes it as a surrogate pair (12 bytes), so what the interface accepts is deliverable."""

TIMESTAMP_HEADER = "X-Approval-Timestamp"
NONCE_HEADER = "X-Approval-Nonce"
SIGNATURE_HEADER = "X-Approval-Signature"

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_NONCE = re.compile(r"[\x21-\x7e]+")
_SIGNATURE = re.compile(r"v1=([0-9a-f]{64})")


def secret_bytes(secret: str | bytes) -> bytes:
    """The secret as bytes (text as UTF-8); `ConfigError` if it is shorter than 32 bytes."""
    if isinstance(secret, str):
        raw = secret.encode("utf-8")
    elif isinstance(secret, bytes | bytearray):
        raw = bytes(secret)
    else:
        raise ConfigError(f"the webhook secret must be str or bytes, not {type(secret).__name__}")
    if len(raw) < MIN_SECRET:
        raise ConfigError(
            f"the webhook secret must be at least {MIN_SECRET} bytes, got {len(raw)}; "
            "generate one with secrets.token_urlsafe(32)"
        )
    return raw


def signing_input(timestamp: str, nonce: str, method: str, path: str, body: bytes) -> bytes:
    """The bytes the signature covers."""
    head = f"{timestamp}\n{nonce}\n{method.upper()}\n{path}\n"
    return head.encode("utf-8") + body


def sign(
    secret: str | bytes, timestamp: int | str, nonce: str, method: str, path: str, body: bytes
) -> str:
    """The `X-Approval-Signature` value for one request: `v1=<hex>`."""
    digest = hmac.new(
        secret_bytes(secret),
        signing_input(str(timestamp), nonce, method, path, body),
        hashlib.sha256,
    ).hexdigest()
    return f"{SCHEME}={digest}"


def signed_headers(
    secret: str | bytes, method: str, path: str, body: bytes, *, timestamp: int, nonce: str
) -> dict[str, str]:
    """The three signing headers for one request."""
    check_nonce(nonce)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: sign(secret, timestamp, nonce, method, path, body),
    }


def check_nonce(nonce: str) -> None:
    if not _NONCE.fullmatch(nonce) or len(nonce) > MAX_NONCE:
        raise ValueError(f"a nonce is 1 to {MAX_NONCE} visible ASCII characters")


class Unauthorized(Exception):
    """A request is not signed as the webhook requires; the message says why (for the log)."""


@dataclass(frozen=True)
class Claim:
    """The signing headers of one request, checked for form and freshness but not yet verified."""

    timestamp: int
    nonce: str
    signature: str
    raw_timestamp: str


def read_claim(
    timestamp: str | None, nonce: str | None, signature: str | None, *, now: float, skew: int
) -> Claim:
    """Check the three headers' form and the timestamp's window; `Unauthorized` if not."""
    if timestamp is None or nonce is None or signature is None:
        raise Unauthorized("the request is not signed")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Unauthorized("the timestamp is not Unix seconds")
    if len(nonce) > MAX_NONCE or not _NONCE.fullmatch(nonce):
        raise Unauthorized(f"the nonce is not 1 to {MAX_NONCE} visible ASCII characters")
    match = _SIGNATURE.fullmatch(signature)
    if match is None:
        raise Unauthorized("the signature is not v1=<64 lowercase hex digits>")
    seconds = int(timestamp)
    check_window(seconds, now=now, skew=skew)
    return Claim(seconds, nonce, match[1], timestamp)


def check_window(timestamp: int, *, now: float, skew: int) -> None:
    """`Unauthorized` unless `timestamp` is within `skew` seconds of `now`, either way."""
    if abs(now - timestamp) > skew:
        raise Unauthorized("the timestamp is outside the allowed window")


def verify(secret: bytes, claim: Claim, method: str, path: str, body: bytes) -> None:
    """Compare the claimed signature with the expected one in constant time."""
    expected = hmac.new(
        secret, signing_input(claim.raw_timestamp, claim.nonce, method, path, body), hashlib.sha256
    ).hexdigest()
    if not hmac.compare_digest(expected, claim.signature):
        raise Unauthorized("the signature does not match")


class NonceCache:
    """Nonces seen in the skew window: a nonce is accepted once.

    `skew` is the least time a nonce is kept past its timestamp; the webhook passes
    its own window to `add`, so a cache made with the default still keeps every
    nonce for as long as that webhook would accept its timestamp.
    """

    def __init__(self, *, skew: int = SKEW, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ConfigError("the nonce cache must hold at least one entry")
        self.skew = skew
        self.max_entries = max_entries
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def _prune(self, now: float) -> None:
        while self._heap and self._heap[0][0] < now:
            expires, nonce = heapq.heappop(self._heap)
            if self._expiry.get(nonce) == expires:
                del self._expiry[nonce]

    def add(self, nonce: str, timestamp: int, now: float, *, window: int = 0) -> bool:
        """Record the nonce; False if it was already seen, or the cache is full of live ones.

        `window` is the skew of the webhook checking it: the nonce is kept for the longer
        of that and the cache's own `skew`.
        """
        self._prune(now)
        if nonce in self._expiry:
            return False
        if len(self._expiry) >= self.max_entries:
            raise CacheFull
        # A timestamp is refused once it is older than the window, so keep it until then.
        expires = float(timestamp + max(self.skew, window))
        self._expiry[nonce] = expires
        heapq.heappush(self._heap, (expires, nonce))
        return True


class CacheFull(Exception):
    """The nonce cache holds `max_entries` live nonces: no new one can be remembered."""


class RateLimiter:
    """A token bucket per client key: `burst` requests at once, refilled at `per_second`."""

    def __init__(self, *, burst: int = 30, per_second: float = 1.0, max_keys: int = 10_000):
        if burst < 1 or not per_second > 0 or max_keys < 1:
            raise ConfigError("the rate limit needs burst >= 1, per_second > 0, max_keys >= 1")
        self.burst = burst
        self.per_second = per_second
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def _level(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + max(now - at, 0.0) * self.per_second)

    def take(self, key: str, now: float) -> float:
        """Take one token; 0.0 if taken, else the seconds until one is there."""
        if key not in self._buckets and len(self._buckets) >= self.max_keys:
            for idle in [k for k in self._buckets if self._level(k, now) >= self.burst]:
                del self._buckets[idle]
            if len(self._buckets) >= self.max_keys:
                key = "*overflow*"
        tokens = self._level(key, now)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.per_second
        self._buckets[key] = (tokens - 1.0, now)
        return 0.0
