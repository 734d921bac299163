"""Which client a webhook request's rate-limit bucket belongs to.

The bucket is the transport peer's: the address the connection came from
(`scope["client"]`). A header naming some other address is the caller's word,
and a caller must never choose whose bucket it spends. Two things make that
harder than reading `scope["client"]`:

- A server may already have replaced the peer with an address from a header:
  uvicorn does so by default for loopback peers (`proxy_headers=True`,
  `forwarded_allow_ips="127.0.0.1"`), so any local process could name the
  address it is counted as. The app cannot see the original peer then. So a
  request that carries a forwarding header (`X-Forwarded-For`, `Forwarded`,
  `X-Real-IP`) from a peer the operator did not name as a proxy is charged to
  one bucket that all such requests share: whatever it names, it never reaches
  that address's bucket, and it never gets a fresh bucket of its own.
- Behind a proxy, every request's peer is the proxy. The operator names it
  (`trusted_proxies=["10.0.0.5", "10.1.0.0/16"]`); for a request whose peer is
  one of them, the client is the right-most `X-Forwarded-For` entry that is not
  itself a trusted proxy (what the nearest trusted proxy saw connect to it).
  Entries further left were written by the client and are never read. When
  every entry is in a trusted network, the request came from inside it, and a
  client there writes what it likes to the left of its own address (which the
  proxy appends): the right-most entry, what the peer saw, is the client, never
  an entry further left. A trusted network is believed about the hop before it,
  so a client inside one can still name an address outside every trusted
  network; name the proxies, not a network that clients share with them.

An IPv4-mapped IPv6 address (`::ffff:10.0.0.5`, what a dual-stack socket on
`::` reports for an IPv4 peer) is that IPv4 address, in a peer, an entry and
`trusted_proxies` alike, so a proxy is recognised however the socket is bound.

Nothing here reads anything but the ASGI scope; the webhook calls `key(scope)`
before it reads the body.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, MutableMapping
from typing import Any

from .._errors import ConfigError

log = logging.getLogger("agentrt.approver.webhook")

SHARED_FORWARDED = "forwarded-by-an-untrusted-peer"
"""The one bucket of every request that names a forwarded address from a peer not trusted."""

_FORWARDING_HEADERS = (b"x-forwarded-for", b"forwarded", b"x-real-ip")

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> _Address | None:
    """An address from a peer or an `X-Forwarded-For` entry (a port, brackets allowed)."""
    text = text.strip()
    if text.startswith("["):  # [v6]:port
        end = text.find("]")
        text = text[1:end] if end > 0 else text
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _network(text: str) -> _Network:
    """A trusted network; an IPv4-mapped one as the IPv4 network it maps."""
    network = ipaddress.ip_network(text, strict=False)
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None
        return ipaddress.IPv4Network((mapped, network.prefixlen - 96))
    return network


class ClientKey:
    """`key(scope)`: the rate-limit bucket of one request (see the module docstring)."""

    def __init__(self, trusted_proxies: Iterable[str] | None = None) -> None:
        if isinstance(trusted_proxies, str | bytes):
            raise ConfigError("trusted_proxies is a list of addresses or networks, not one string")
        networks: list[_Network] = []
        for entry in trusted_proxies or ():
            try:
                networks.append(_network(str(entry).strip()))
            except ValueError:
                raise ConfigError(
                    f"trusted_proxies: {entry!r} is not an IP address or network"
                ) from None
        self.trusted: tuple[_Network, ...] = tuple(networks)
        self._warned = False

    def __repr__(self) -> str:
        return f"ClientKey(trusted_proxies={[str(n) for n in self.trusted]!r})"

    def _is_trusted(self, address: _Address | None) -> bool:
        return address is not None and any(address in network for network in self.trusted)

    def __call__(self, scope: MutableMapping[str, Any]) -> str:
        client = scope.get("client")
        peer_text = str(client[0]) if client else "-"
        peer = _address(peer_text)
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or ())
        forwarded = [v for k, v in headers if k.lower() in _FORWARDING_HEADERS]
        if not forwarded:
            return peer_text if peer is None else str(peer)
        if not self._is_trusted(peer):
            if not self._warned:
                self._warned = True
                log.warning(
                    "a request from %s carried a forwarding header; it is counted in the one "
                    "rate-limit bucket shared by such requests. Behind a proxy, name it with "
                    "trusted_proxies= and serve with uvicorn's proxy_headers=False",
                    peer_text,
                )
            return SHARED_FORWARDED
        entries = [
            entry
            for k, v in headers
            if k.lower() == b"x-forwarded-for"
            for entry in v.decode("latin-1").split(",")
        ]
        for entry in reversed(entries):
            address = _address(entry)
            if address is None:
                break  # a trusted proxy wrote no usable address: count the proxy itself
            if not self._is_trusted(address):
                return str(address)
        else:
            if entries:
                # Every entry is in a trusted network: the request came from inside it, and
                # a client there may have written any entry left of the one the peer appended.
                # Count what the peer saw connect to it, never an entry further left.
                return str(_address(entries[-1]))
        return str(peer)
