"""Webhook destinations a user may register, and the SSRF guard every request to one
goes through (issue 17, "A webhook channel"; docs/design.md, "Webhook channel").

A destination URL is refused when it is not `https` (plain `http` only when the operator
allows it), carries credentials, or names, or resolves to, an address that is not
globally reachable: loopback, private (RFC 1918, RFC 4193), link-local (RFC 3927: the
cloud metadata service 169.254.169.254), CGNAT, multicast, reserved, unspecified
(`ipaddress`'s `is_global`, from the IANA special-purpose registries), or an IPv6
address that carries one of those as an embedded IPv4 address (IPv4-mapped and
-compatible, RFC 4291 §2.5.5; IPv4-translated, RFC 2765; NAT64, RFC 6052; 6to4, RFC
3056): the IPv4 address inside is what a translator or relay would connect to, so it is
the one checked. The operator may allow networks explicitly
(`WEBHOOK_CHANNEL_ALLOW_NETWORKS`, e.g. a test receiver on 127.0.0.1/32). The check runs
when the URL is registered and again at every send, after DNS resolution, and the
request then connects to the very address that was checked (no second resolution an
attacker's DNS could answer differently), never following a redirect.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

MAX_URL = 2000

#: IPv6 prefixes whose last 32 bits are an IPv4 address: IPv4-compatible (::/96,
#: RFC 4291 §2.5.5.1), IPv4-translated (::ffff:0:0:0/96, RFC 2765 §2.1), the NAT64
#: well-known prefix (64:ff9b::/96, RFC 6052 §2.1).
EMBEDDING_96 = tuple(ipaddress.IPv6Network(n) for n in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
#: Not global although `ipaddress` (3.11) says it is: NAT64 local-use (RFC 8215), where
#: the IPv4 address may sit anywhere after the prefix.
NOT_GLOBAL = (ipaddress.IPv6Network("64:ff9b:1::/48"),)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 `address` carries (see EMBEDDING_96, IPv4-mapped
    ::ffff:0:0/96 and 6to4 2002::/16), else None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in EMBEDDING_96):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


class DestinationRefused(ValueError):
    """The URL may not be called: the message says why (for a 422, or a failed send)."""


@dataclass(frozen=True, slots=True)
class Destination:
    """A checked destination: connect to `address` on `port`, sending `host` as the Host
    header and TLS server name, and request `target` (path and query)."""

    url: str
    scheme: str
    host: str
    port: int
    target: str
    address: str


@dataclass(frozen=True, slots=True)
class DestinationPolicy:
    """What the operator allows.

    Attributes:
        allow_http: plain http URLs are accepted (WEBHOOK_CHANNEL_ALLOW_HTTP).
        allow_networks: networks whose addresses are accepted although not global
            (WEBHOOK_CHANNEL_ALLOW_NETWORKS).
    """

    allow_http: bool = False
    allow_networks: tuple[IPNetwork, ...] = ()

    def address_allowed(self, address: IPAddress) -> bool:
        """True when `address` may be connected to: in an allowed network, or global and
        not multicast, as is the IPv4 address it embeds, if any (`embedded_ipv4`)."""
        if any(address in network for network in self.allow_networks):
            return True
        inner = embedded_ipv4(address)
        if inner is not None:
            return self.address_allowed(inner)
        if any(address in network for network in NOT_GLOBAL):
            return False
        return address.is_global and not address.is_multicast


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (getaddrinfo, TCP).

    Raises:
        DestinationRefused: the name does not resolve.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DestinationRefused(f"host {host!r} does not resolve ({exc})") from None
    return [str(info[4][0]) for info in infos]


def parse_url(url: str, policy: DestinationPolicy) -> tuple[str, str, int, str]:
    """(scheme, host, port, target) of a destination URL, its form checked.

    Raises:
        DestinationRefused: not an absolute http(s) URL of the allowed scheme, with
            credentials, a fragment, or longer than MAX_URL characters.
    """
    if not isinstance(url, str) or len(url) > MAX_URL:
        raise DestinationRefused(f"must be a URL of at most {MAX_URL} characters")
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        raise DestinationRefused("must not contain spaces or control characters")
    parts = urlsplit(url)
    schemes = ("https", "http") if policy.allow_http else ("https",)
    if parts.scheme not in schemes:
        raise DestinationRefused(f"must be an {' or '.join(schemes)} URL")
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("must not carry credentials (user:password@)")
    if parts.fragment:
        raise DestinationRefused("must not have a fragment (#...)")
    host = parts.hostname
    if not host:
        raise DestinationRefused("has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("has an invalid port") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host.rstrip(".").lower(), port, target


def check_destination(
    url: str, policy: DestinationPolicy, resolve: Resolver = system_resolver
) -> Destination:
    """Check `url` and pick the address to connect to: every address the host resolves
    to must be allowed (a name with one private address among public ones is refused:
    which one a client would use is not ours to guess).

    Raises:
        DestinationRefused: the URL's form, or an address it names or resolves to.
    """
    scheme, host, port, target = parse_url(url, policy)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    addresses = [str(literal)] if literal is not None else resolve(host, port)
    if not addresses:
        raise DestinationRefused(f"host {host!r} does not resolve")
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if not policy.address_allowed(address):
            how = "is" if literal is not None else f"resolves to {address}, which is"
            raise DestinationRefused(
                f"host {host!r} {how} not a public address (loopback, private, link-local"
                " or reserved)"
            )
    return Destination(url, scheme, host, port, target, addresses[0])


def parse_networks(values: Sequence[str]) -> tuple[IPNetwork, ...]:
    """Networks of WEBHOOK_CHANNEL_ALLOW_NETWORKS ("127.0.0.1/32", "10.0.0.0/8").

    Raises:
        ValueError: one is not a network.
    """
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values if v.strip())
