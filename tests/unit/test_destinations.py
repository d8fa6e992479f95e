"""The SSRF guard (reminder_core.destinations), with a fake resolver. Expected verdicts
from the IANA special-purpose registries (RFC 6890) as `ipaddress.is_global` encodes them:
100.64.0.0/10 is shared address space (RFC 6598), 192.0.2.0/24 documentation (RFC 5737),
fc00::/7 unique local (RFC 4193), fe80::/10 link-local; 93.184.215.14 and 2606:4700::1
are ordinary public addresses."""

from __future__ import annotations

import pytest

from reminder_core.destinations import (
    DestinationPolicy,
    DestinationRefused,
    check_destination,
    parse_networks,
)

STRICT = DestinationPolicy()


def resolver(*addresses: str):  # type: ignore[no-untyped-def]
    return lambda _host, _port: list(addresses)


@pytest.mark.parametrize(
    "address",
    ["100.64.1.1", "192.0.2.10", "fc00::1", "fe80::1", "0.0.0.0", "224.0.0.1", "127.0.0.2"],
)
def test_names_resolving_to_special_addresses_are_refused(address: str) -> None:
    with pytest.raises(DestinationRefused, match=f"resolves to {address}"):
        check_destination("https://hooks.example.com/x", STRICT, resolver(address))


def test_one_private_address_among_public_ones_is_refused() -> None:
    with pytest.raises(DestinationRefused, match=r"10\.0\.0\.1"):
        check_destination("https://h.example.com/", STRICT, resolver("93.184.215.14", "10.0.0.1"))


def test_the_checked_address_is_the_one_connected_to() -> None:
    d = check_destination(
        "https://h.example.com:8443/a/b?c=1", STRICT, resolver("2606:4700::1", "93.184.215.14")
    )
    assert (d.scheme, d.host, d.port, d.target, d.address) == (
        "https", "h.example.com", 8443, "/a/b?c=1", "2606:4700::1"
    )  # fmt: skip


def test_allowed_networks_and_http_are_the_operators_choice() -> None:
    local = DestinationPolicy(allow_http=True, allow_networks=parse_networks(["10.1.0.0/16"]))
    assert check_destination("http://10.1.2.3/x", local).address == "10.1.2.3"
    with pytest.raises(DestinationRefused):
        check_destination("http://10.2.0.1/x", local)
    with pytest.raises(DestinationRefused, match="https"):
        check_destination("http://93.184.215.14/x", STRICT)


def test_ipv4_mapped_ipv6_is_read_as_its_ipv4_address() -> None:
    with pytest.raises(DestinationRefused):
        check_destination("https://[::ffff:169.254.169.254]/", STRICT)
    allowed = DestinationPolicy(allow_networks=parse_networks(["127.0.0.1/32"]))
    # str() of ::ffff:127.0.0.1 is its hexadecimal form (RFC 5952 §5 allows either).
    assert check_destination("https://[::ffff:127.0.0.1]/", allowed).address == "::ffff:7f00:1"


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 well-known prefix + 127.0.0.1 (RFC 6052 §2.1)
        "64:ff9b::a9fe:a9fe",  # NAT64 + 169.254.169.254, the metadata service
        "::ffff:0:7f00:1",  # IPv4-translated 127.0.0.1 (RFC 2765 §2.1)
        "::7f00:1",  # IPv4-compatible 127.0.0.1 (RFC 4291 §2.5.5.1)
        "2002:7f00:1::",  # 6to4 of 127.0.0.1 (RFC 3056 §2)
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "64:ff9b:1::7f00:1",  # NAT64 local-use prefix (RFC 8215: not globally reachable)
    ],
)
def test_ipv6_carrying_a_special_ipv4_address_is_refused(address: str) -> None:
    # Found by a trial: a NAT64 gateway or 6to4 relay would connect to the IPv4 inside.
    with pytest.raises(DestinationRefused, match="not a public address"):
        check_destination(f"https://[{address}]/", STRICT)
    with pytest.raises(DestinationRefused, match="not a public address"):
        check_destination("https://h.example.com/", STRICT, resolver(address))


def test_ipv6_carrying_a_public_ipv4_address_is_accepted() -> None:
    # 8.8.8.8 through NAT64 (RFC 6052 §2.4's own example form) and 6to4.
    for address in ("64:ff9b::808:808", "2002:808:808::1"):
        assert check_destination(f"https://[{address}]/", STRICT).address == address
