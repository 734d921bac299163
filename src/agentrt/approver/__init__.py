"""Approval channels: one interface for every way a person decides, bound to the hash shown.

- `Approver`: the protocol (`pending`, `show`, `approve`, `reject`, `cancel`);
  `Local(store)` / `Local.open(path)` implement it over the SQLite file, on the
  operator functions.
- `Decision`: a person's decision, refused without the hash they were shown.
  (Not `agentrt.Decision`, which is what an agent decides in a step.)
- `webhook_app(approver, secret=...)`: the signed webhook, an ASGI app on
  Starlette (extra `agentrt[webhook]`, imported only when called).
- `WebhookClient`: the signing client for the other side, on httpx.

Nothing here imports Starlette at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from ._client import WebhookClient, WebhookError
from ._local import Approver, Decision, Local, Pending
from ._signing import (
    MAX_BODY,
    MAX_NONCE,
    MIN_SECRET,
    SKEW,
    NonceCache,
    RateLimiter,
    sign,
    signed_headers,
)

if TYPE_CHECKING:
    from ._webhook import WebhookApp


def webhook_app(
    approver: Approver,
    *,
    secret: str | bytes,
    now: Callable[[], float] | None = None,
    skew: int = SKEW,
    max_body: int = MAX_BODY,
    rate_limit: RateLimiter | None = None,
    nonces: NonceCache | None = None,
    client_key: Callable[[MutableMapping[str, Any]], str] | None = None,
    trusted_proxies: Iterable[str] | None = None,
) -> WebhookApp:
    """The signed webhook over `approver`, an ASGI app (needs the `webhook` extra).

    `secret`: at least 32 bytes (`ConfigError` otherwise). `now`: Unix seconds,
    the wall clock by default. `rate_limit`: a token bucket per client, 30 at
    once refilled at 1 a second by default, one bucket per transport peer (a
    request naming a forwarded address from any other peer shares one bucket).
    `trusted_proxies`: the addresses or networks of proxies in front, whose
    `X-Forwarded-For` names the client. `client_key(scope)` replaces that rule.
    Starlette is imported here, not when `agentrt.approver` is.
    """
    try:
        from ._webhook import WebhookApp
    except ImportError as exc:
        if exc.name is None or exc.name.split(".")[0] != "starlette":
            raise
        raise ImportError(
            "the approval webhook needs Starlette: pip install 'agentrt[webhook]'", name=exc.name
        ) from exc
    return WebhookApp(
        approver,
        secret=secret,
        now=now,
        skew=skew,
        max_body=max_body,
        rate_limit=rate_limit,
        nonces=nonces,
        client_key=client_key,
        trusted_proxies=trusted_proxies,
    )


__all__ = [
    "MAX_BODY",
    "MAX_NONCE",
    "MIN_SECRET",
    "SKEW",
    "Approver",
    "Decision",
    "Local",
    "NonceCache",
    "Pending",
    "RateLimiter",
    "WebhookClient",
    "WebhookError",
    "sign",
    "signed_headers",
    "webhook_app",
]

for _name in __all__:
    _value = globals()[_name]
    if hasattr(_value, "__module__") and _value.__module__.startswith(__name__ + "._"):
        _value.__module__ = __name__
