"""Transport rules every provider adapter shares.

This module owns what is common to talking to a model over HTTP, whoever the
provider is (models.md, "Provider adapters", *All adapters*):

- **Where a key may go.** `check_endpoint` refuses, at construction, a base URL
  that is not http(s), that carries credentials of its own, or that would send
  a key over plain http to anything but a loopback address. `Secret` holds a
  key so that `repr`, `str`, logs and JSON never show it.
- **How much is read.** A reply body is read under `MAX_BODY_BYTES` (16 MiB),
  raw bytes on the wire (no content coding is accepted, so the bound is exact);
  a larger one is refused as soon as it is known to be larger, by its declared
  length or by the bytes read so far, never by reading it all. An error body is
  read only as far as a short excerpt.
- **How a failed exchange is classified** for the accounting caller:
  408, 409, 425, 429, 529 and 5xx are `TransientModelError` with `Retry-After`
  parsed; a redirect is never followed (`RedirectRefusedError`); other non-2xx
  are `ProviderError` with a bounded, redacted excerpt; nothing sent (refused or
  timed-out connect, or the deadline passed before the request started out:
  `SendWatch` tells) is transient; a timeout after sending is `ModelTimeoutError`
  and a lost connection or cut-off body is `AmbiguousModelError`, which the
  caller charges at the full output cap and retries. Once an error status is in
  hand, the exchange's deadline no longer applies: the excerpt gets what was
  left of it (at most 5 s), so a stalled error body cannot turn the status
  into a timeout.
- **What a message may quote.** An error body, or a served reply's own error,
  is quoted with every key redacted; a refused URL is quoted with any user and
  password left out (`shown_url`).

`post_json` is the exchange itself for the adapters that speak HTTP through
`httpx` (OpenAI-compatible, Ollama); the Anthropic adapter goes through the
official SDK and reuses the rules, not the exchange.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx

from .._canonical import parse_json
from .._errors import (
    AgentrtError,
    ConfigError,
    JSONValueError,
    ServedModelError,
    TransientModelError,
)
from .._model import Usage

__all__ = [
    "EXCERPT_BYTES",
    "MAX_BODY_BYTES",
    "TRANSIENT_STATUSES",
    "AmbiguousModelError",
    "BodyTooLargeError",
    "ModelTimeoutError",
    "ProviderError",
    "RedirectRefusedError",
    "Secret",
    "SendWatch",
    "check_endpoint",
    "excerpt",
    "is_loopback",
    "is_transient_status",
    "parse_retry_after",
    "post_json",
    "read_bounded",
    "read_framed",
    "shown_url",
    "status_error",
]

log = logging.getLogger("agentrt.providers")

MAX_BODY_BYTES = 16 * 1024 * 1024
"""The most bytes of a reply body an adapter reads."""

EXCERPT_BYTES = 4096
"""The most bytes of an error body an adapter reads, for the excerpt in its error."""

EXCERPT_CHARS = 500
"""The most characters of an error body quoted in an error message."""

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 529})
"""Statuses worth retrying besides every 5xx (529 is Anthropic's "overloaded")."""

# A server that sends an error status and then stalls its body must not turn a
# clean refusal into a timeout: the excerpt gets at most this long.
_EXCERPT_WAIT_SECONDS = 5.0

# Headers that carry credentials; an adapter sends only the one it was given.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie", "x-api-key")


# --------------------------------------------------------------------------- errors


class AmbiguousModelError(AgentrtError, ConnectionError):
    """The request may have been served and charged, but no usable reply came back.

    A connection lost after the request was sent, or a body cut off mid-read. It
    is a `ConnectionError`, so the accounting caller charges the full output cap
    and retries.
    """


class ModelTimeoutError(AmbiguousModelError, TimeoutError):
    """The reply did not arrive within the adapter's timeout; it may still be served."""


class ProviderError(AgentrtError):
    """A permanent refusal: a non-2xx status that retrying would not change.

    `status` is the HTTP status; `excerpt` a bounded, redacted quote of the body.
    """

    def __init__(self, message: str, *, status: int | None = None, excerpt: str = "") -> None:
        self.status = status
        self.excerpt = excerpt
        super().__init__(message)


class RedirectRefusedError(ProviderError):
    """The provider answered with a redirect, which is not followed: it would carry
    the key to another address."""


class BodyTooLargeError(ServedModelError):
    """A 2xx reply body larger than `MAX_BODY_BYTES`: served, unreadable, charged."""


# --------------------------------------------------------------------------- keys


class Secret:
    """An API key. Its `repr` and `str` are redacted and JSON encoders refuse it;
    `reveal()` is the one way to the value, used only to build a request header."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ConfigError("an API key must be a non-empty string")
        if value != value.strip() or any(c in value for c in "\r\n\0"):
            # A newline would let the key inject headers; surrounding spaces are a paste error.
            raise ConfigError("an API key must not contain whitespace at its ends or line breaks")
        if not value.isascii() or not value.isprintable():
            # A header value is sent as bytes: a key that is not printable ASCII is a paste
            # error (a smart quote, a non-breaking space) that would fail at the first request.
            raise ConfigError("an API key must be printable ASCII characters")
        self._value = value

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        """`text` with every occurrence of the key, and a key cut off at its end, replaced."""
        text = text.replace(self._value, "[redacted]")
        # An excerpt cut at a byte bound may end inside the key: drop that prefix too.
        for size in range(min(len(self._value) - 1, len(text)), 3, -1):
            if text.endswith(self._value[:size]):
                return text[:-size] + "[redacted]"
        return text

    def __repr__(self) -> str:
        return "Secret('[redacted]')"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret is not pickled: it would write the key out")


# --------------------------------------------------------------------------- endpoints


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1, IPv4-mapped 127.x)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_endpoint(url: str, *, key: Secret | None, what: str) -> str:
    """The base URL without a trailing slash, or `ConfigError` if a request to it is refused.

    Refused: a scheme other than http or https, no host, a user or password in
    the URL (credentials go in `api_key`, which is redacted), a query or a
    fragment, and a key over plain http to a host that is not loopback. A
    refusal never quotes a user or password (`shown_url`).
    """
    if not isinstance(url, str):
        raise ConfigError(f"{what}: the base URL must be a string")
    try:
        parts = urlsplit(url.strip())
        credentials = parts.username is not None or parts.password is not None
    except ValueError as exc:
        raise _unusable_url(what, url, exc) from None
    if credentials:
        # Before the port is read: a password with a colon in it reads as a bad port.
        raise ConfigError(f"{what}: the base URL must not carry credentials; pass api_key instead")
    try:
        _port = parts.port  # read so that a bad port is refused here, not at the first request
    except ValueError as exc:
        raise _unusable_url(what, url, exc) from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{what}: the base URL must be http or https, not {parts.scheme!r}")
    if not parts.hostname:
        raise ConfigError(f"{what}: the base URL {shown_url(url)!r} names no host")
    if parts.query or parts.fragment:
        raise ConfigError(f"{what}: the base URL must not have a query or a fragment")
    if key is not None and parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigError(
            f"{what}: refusing to send an API key over plain http to {parts.hostname!r}; "
            "use https, or a loopback address for a local server"
        )
    return url.strip().rstrip("/")


def _unusable_url(what: str, url: str, exc: ValueError) -> ConfigError:
    shown = shown_url(url)
    # The parser's reason may quote a piece of the netloc (a "port"), which may be a password's.
    why = f" ({exc})" if shown == url else ""
    return ConfigError(f"{what}: {shown!r} is not a usable URL{why}")


def shown_url(url: str) -> str:
    """`url` as an error message may quote it: whatever may be a user or password left out.

    Everything up to the last `@` goes, whatever a parser would call it: a
    password may hold `/`, `#` or `:` and so read as a path or a port.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" not in rest:
        return url
    return f"{scheme}{sep}[credentials]@{rest.rpartition('@')[2]}"


# --------------------------------------------------------------------------- statuses


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or 500 <= status <= 599


_SECONDS = re.compile(r"[0-9]{1,10}(?:\.[0-9]{1,6})?")
_MANY_SECONDS = re.compile(r"[0-9]{11,}(?:\.[0-9]*)?")


def bearer_headers(key: Secret | None) -> dict[str, str]:
    """The `authorization` header for a key, or none: built at send time, never kept."""
    return {} if key is None else {"authorization": f"Bearer {key.reveal()}"}


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> timedelta | None:
    """The wait a provider asked for: `Retry-After` in seconds or as an HTTP-date.

    `retry-after-ms` (OpenAI's millisecond form) wins when it is present and
    valid. A date in the past is a wait of zero; anything unreadable is `None`.
    """
    millis = _header(headers, "retry-after-ms")
    if millis is not None and _SECONDS.fullmatch(millis.strip()):
        return timedelta(milliseconds=float(millis.strip()))
    value = _header(headers, "retry-after")
    if value is None:
        return None
    value = value.strip()
    if _SECONDS.fullmatch(value):
        return timedelta(seconds=float(value))
    if _MANY_SECONDS.fullmatch(value):
        # More seconds than a timedelta holds: far beyond any max_retry_after,
        # which is what the caller must hear (give up), not "no advice".
        return timedelta.max
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # HTTP-dates are GMT (RFC 9110 §5.6.7)
    wait = when - (now if now is not None else datetime.now(UTC))
    return max(wait, timedelta(0))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # Works alike for plain dicts and for httpx's and httpx2's case-insensitive headers.
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def excerpt(body: bytes, secrets: Iterable[Secret | None] = ()) -> str:
    """A bounded one-line quote of an error body with every key redacted."""
    text = body[:EXCERPT_BYTES].decode("utf-8", "replace")
    for secret in secrets:
        if secret is not None:
            text = secret.redact(text)
    text = " ".join(text.split())
    if len(text) > EXCERPT_CHARS:
        text = text[:EXCERPT_CHARS] + "…"
    return text


def status_error(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    secrets: Iterable[Secret | None] = (),
) -> Exception:
    """The classified error for a non-2xx reply (see the module docstring)."""
    quoted = excerpt(body, secrets)
    suffix = f": {quoted}" if quoted else ""
    if 300 <= status <= 399:
        location = excerpt((_header(headers, "location") or "").encode(), secrets)
        return RedirectRefusedError(
            f"{provider} answered {status} redirecting to {location or 'nowhere'!r}; "
            "redirects are not followed, since they would carry the key elsewhere",
            status=status,
            excerpt=quoted,
        )
    if is_transient_status(status):
        return TransientModelError(
            f"{provider} answered {status}{suffix}", retry_after=parse_retry_after(headers)
        )
    return ProviderError(f"{provider} answered {status}{suffix}", status=status, excerpt=quoted)


# --------------------------------------------------------------------------- bodies


async def read_bounded(chunks: AsyncIterator[bytes], limit: int = MAX_BODY_BYTES) -> bytes:
    """All of `chunks`, or `BodyTooLargeError` once more than `limit` bytes arrived."""
    body = bytearray()
    async for chunk in chunks:
        if len(body) + len(chunk) > limit:
            raise BodyTooLargeError(
                f"the reply body is larger than {limit} bytes; refused without reading the rest"
            )
        body += chunk
    return bytes(body)


async def read_excerpt(
    chunks: AsyncIterator[bytes], deadline: asyncio.Timeout | None = None
) -> bytes:
    """At most `EXCERPT_BYTES` of an error body; whatever arrived if it fails or stalls.

    `deadline` is the exchange's: the status is in hand, so it is lifted, and the
    excerpt gets what was left of it (at most 5 s). Left in place, it would fire
    while the body stalls and turn a clean refusal into an ambiguous timeout.
    """
    wait = _EXCERPT_WAIT_SECONDS
    if deadline is not None:
        when = deadline.when()
        if when is not None:
            wait = max(0.0, min(wait, when - asyncio.get_running_loop().time()))
        deadline.reschedule(None)
    body = bytearray()
    try:
        async with asyncio.timeout(wait):
            async for chunk in chunks:
                body += chunk
                if len(body) >= EXCERPT_BYTES:
                    break
    except Exception:
        # The status already classifies the reply; a stalled, cut or broken error body
        # (whichever HTTP library read it) only shortens the quote.
        pass
    return bytes(body[:EXCERPT_BYTES])


def declared_too_large(headers: Mapping[str, str], limit: int = MAX_BODY_BYTES) -> bool:
    length = _header(headers, "content-length")
    if length is None:
        return False
    digits = length.strip()  # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    return digits.isascii() and digits.isdigit() and int(digits) > limit


def encoded(headers: Mapping[str, str]) -> bool:
    """True when the body has a content coding: its size on the wire would not bound it."""
    coding = _header(headers, "content-encoding")
    return coding is not None and coding.strip().lower() not in ("", "identity")


def read_framed(provider: str, headers: Mapping[str, str]) -> Callable[[bytes], bytes]:
    """A check for a body read in full: a close-delimited one that is not JSON was cut off.

    With a Content-Length or chunked framing, the HTTP client itself reports a
    body that ended early (as a lost connection: ambiguous), so an unusable
    framed body was served that way. A body delimited only by the connection
    closing has no such check: if it is not usable JSON, the close may have cut
    it, so it is ambiguous too.
    """
    framed = (
        _header(headers, "content-length") is not None
        or "chunked" in (_header(headers, "transfer-encoding") or "").lower()
    )

    def check(raw: bytes) -> bytes:
        if not framed:
            try:
                parse_json(raw)
            except JSONValueError:
                raise AmbiguousModelError(
                    f"{provider} closed the connection after {len(raw)} bytes of a body that is "
                    "not JSON; it may have been cut off"
                ) from None
        return raw

    return check


def parse_reply(raw: bytes, provider: str) -> dict[str, Any]:
    """The reply's top-level JSON object, or `ServedModelError` (charged, not retried)."""
    try:
        value = parse_json(raw)
    except JSONValueError as exc:
        raise ServedModelError(
            f"{provider} replied with a body that is not usable JSON: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ServedModelError(f"{provider} replied with JSON that is not an object")
    return value


def unusable(provider: str, what: str, usage: Usage | None = None) -> ServedModelError:
    """The error for a served reply whose shape cannot be used."""
    return ServedModelError(f"{provider} replied with {what}", usage=usage)


def tool_arguments(value: Any, provider: str, usage: Usage) -> Any:
    """Tool-call arguments as usable JSON: a JSON text is parsed (number literals
    kept), an already-decoded object is taken as it is, anything else refused."""
    if isinstance(value, str):
        if not value.strip():
            # Several servers send "" for a call without arguments; OpenAI sends "{}".
            return {}
        try:
            return parse_json(value)
        except JSONValueError as exc:
            raise unusable(
                provider, f"tool-call arguments that are not usable JSON: {exc}", usage
            ) from None
    if isinstance(value, dict):
        return value
    raise unusable(provider, f"tool-call arguments of type {type(value).__name__}", usage)


# --------------------------------------------------------------------------- exchange


class SendWatch:
    """Whether any of a request may have left: set once its headers start out.

    Given to the HTTP library as the request's `trace` extension (httpcore's
    and httpcore2's alike). Until it is set, the exchange was still connecting
    (or waiting for a connection), so a deadline that fires then means nothing
    was sent: transient, charged nothing.
    """

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent = False

    async def __call__(self, event: str, info: Mapping[str, Any]) -> None:
        if event.endswith(".send_request_headers.started"):
            self.sent = True


async def post_json(
    *,
    provider: str,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout: timedelta,
    secrets: Iterable[Secret | None] = (),
) -> bytes:
    """POST a JSON body and return a 2xx reply's raw bytes, classifying every failure.

    A fresh client per call: an `httpx.AsyncClient` pools connections on the event
    loop that opened them, and a model outlives any one loop (each `asyncio.run`).
    `trust_env=False` keeps proxies and `.netrc` out of the path of the key.
    """
    seconds = timeout.total_seconds()
    secrets = tuple(secrets)
    sent = {
        "content-type": "application/json",
        "accept": "application/json",
        # No content coding: the body bound is then a bound on the bytes held.
        "accept-encoding": "identity",
        **headers,
    }
    watch = SendWatch()
    deadline = asyncio.timeout(seconds)
    try:
        async with (
            deadline,
            httpx.AsyncClient(
                follow_redirects=False, trust_env=False, timeout=httpx.Timeout(seconds)
            ) as client,
        ):
            request = client.build_request(
                "POST", url, content=body, headers=sent, extensions={"trace": watch}
            )
            response = await client.send(request, stream=True)
            try:
                log.debug("%s: POST %s answered %d", provider, url, response.status_code)
                if not 200 <= response.status_code <= 299:
                    raise status_error(
                        provider,
                        response.status_code,
                        response.headers,
                        await read_excerpt(response.aiter_raw(), deadline),
                        secrets,
                    )
                if encoded(response.headers):
                    raise ServedModelError(
                        f"{provider} sent a {response.headers['content-encoding']}-coded body "
                        "although none was accepted"
                    )
                if declared_too_large(response.headers):
                    raise BodyTooLargeError(
                        f"{provider} declared a reply body of "
                        f"{response.headers['content-length']} bytes, over the {MAX_BODY_BYTES} "
                        "byte bound; refused without reading it"
                    )
                check = read_framed(provider, response.headers)
                return check(await read_bounded(response.aiter_raw()))
            finally:
                await response.aclose()
    except AgentrtError:
        raise
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # No connection was made, so nothing was sent and nothing can be charged.
        raise TransientModelError(f"{provider} could not be reached at {url}: {_why(exc)}") from exc
    except httpx.TimeoutException as exc:
        raise ModelTimeoutError(f"{provider} timed out after sending: {_why(exc)}") from exc
    except TimeoutError as exc:
        if not watch.sent:
            raise unreached(provider, url, seconds) from exc
        raise ModelTimeoutError(
            f"{provider} gave no complete reply within {seconds:g} s; it may still be served"
        ) from exc
    except httpx.TransportError as exc:
        raise AmbiguousModelError(
            f"{provider} connection lost or reply cut off after sending: {_why(exc)}"
        ) from exc


def unreached(provider: str, url: str, seconds: float) -> TransientModelError:
    """The error for a deadline that fired before any of the request was sent."""
    return TransientModelError(
        f"{provider} could not be reached at {url} within {seconds:g} s; nothing was sent"
    )


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- adapters


def check_model_name(what: str, model: object) -> None:
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{what}: the model name must be a non-empty string")


def check_timeout(what: str, timeout: object) -> None:
    if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
        raise ConfigError(f"{what}: timeout must be a positive timedelta")


class JsonOverHttpModel:
    """What the adapters speaking JSON over `httpx` share once constructed.

    The model and its recorded name, the key (a `Secret`, shown redacted), the
    checked base URL, the timeout of a whole exchange, and the exchange itself
    (`post`). A subclass's constructor checks its arguments, then calls `_set`;
    `_repr_extra` adds its own fields to the repr, before the key.
    """

    name: str
    model: str
    timeout: timedelta
    _key: Secret | None
    _base_url: str

    def _set(
        self, model: str, name: str, timeout: timedelta, key: Secret | None, base_url: str
    ) -> None:
        self._key = key
        self._base_url = base_url
        self.model = model
        self.name = name
        self.timeout = timeout

    @property
    def base_url(self) -> str:
        return self._base_url

    def _repr_extra(self) -> str:
        return ""

    def _headers(self) -> dict[str, str]:
        return bearer_headers(self._key)

    def __repr__(self) -> str:
        key = "[redacted]" if self._key is not None else None
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, "
            f"base_url={self._base_url!r}, {self._repr_extra()}api_key={key!r})"
        )

    async def post(self, path: str, body: bytes) -> bytes:
        """POST `body` to `path` under the base URL, with the key; `post_json`'s rules."""
        return await post_json(
            provider=self.name,
            url=f"{self._base_url}{path}",
            body=body,
            headers=self._headers(),
            timeout=self.timeout,
            secrets=(self._key,),
        )


def joined_text(blocks: Iterable[Any]) -> str:
    """The text of a turn's text blocks, paragraphs apart (empty ones left out)."""
    return "\n\n".join(block.text for block in blocks if block.text)


def function_tools(tools: Iterable[Any]) -> list[dict[str, Any]]:
    """Tool specs as the `{"type": "function", ...}` entries both chat formats take."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
        for tool in tools
    ]
