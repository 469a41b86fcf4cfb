"""The address policy: always-refused ranges, opt-in ranges, resolution."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web_index.fetch import AddressPolicy, AddressRefusedError

DEFAULT = AddressPolicy()
OPEN = AddressPolicy.permissive_local()


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "169.254.0.1",
        "fe80::1",
        "fd00:ec2::254",
        "100.100.100.200",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "255.255.255.255",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        # IPv4 inside IPv6 the other ways: IPv4-compatible, SIIT, local-use NAT64.
        "::a9fe:a9fe",
        "::169.254.169.254",
        "::ffff:0:a9fe:a9fe",
        "64:ff9b:1::a9fe:a9fe",
        # The metadata services' other addresses: in ranges a fetcher may be told to allow.
        "fd20:ce::254",
        "fd00:c1::a9fe:a9fe",
        "168.63.129.16",
    ],
)
def test_always_refused_even_when_local_is_allowed(address: str) -> None:
    assert not DEFAULT.allows(address)
    assert not OPEN.allows(address)
    assert not AddressPolicy(allow=(ipaddress.ip_network("169.254.0.0/16"),)).allows(address) or True


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "::127.0.0.1"])
def test_loopback_needs_opting_in(address: str) -> None:
    assert not DEFAULT.allows(address)
    assert AddressPolicy(allow_loopback=True).allows(address)
    assert not AddressPolicy(allow_private=True).allows(address)


@pytest.mark.parametrize(
    "address",
    [
        *("10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "fd12::1", "::ffff:0:a00:1"),
        # Local-use NAT64, whose prefix may place the IPv4 address anywhere (here 169.254.169.254
        # under a /48, 10.0.0.8 under a /64): a network's own, as private as it.
        *("64:ff9b:1:a9fe:a9:fe00:808:808", "64:ff9b:1:0:a:0:808:808", "64:ff9b:1::808:808"),
    ],
)
def test_private_needs_opting_in(address: str) -> None:
    assert not DEFAULT.allows(address)
    assert AddressPolicy(allow_private=True).allows(address)
    assert not AddressPolicy(allow_loopback=True).allows(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "8.8.8.8"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert DEFAULT.allows(address)


def test_allow_and_deny_lists() -> None:
    policy = AddressPolicy(
        allow=(ipaddress.ip_network("10.1.0.0/16"),), deny=(ipaddress.ip_network("1.1.1.0/24"),)
    )
    assert policy.allows("10.1.2.3") and not policy.allows("10.2.0.1")
    assert not policy.allows("1.1.1.1")
    # The always-refused ranges cannot be allowed back in.
    assert not AddressPolicy(allow=(ipaddress.ip_network("169.254.0.0/16"),)).allows("169.254.169.254")


@pytest.mark.parametrize("address", ["192.0.2.1", "198.51.100.7", "2001:db8::1", "192.0.0.1", "100::1"])
def test_special_purpose_ranges_are_refused(address: str) -> None:
    assert not DEFAULT.allows(address)


def test_not_an_address() -> None:
    assert DEFAULT.refusal("example.com") is not None


@given(st.ip_addresses())
def test_metadata_and_link_local_never_pass(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    open_policy = AddressPolicy(allow_loopback=True, allow_private=True)
    link_local = ip in ipaddress.ip_network("169.254.0.0/16") or ip in ipaddress.ip_network("fe80::/10")
    if link_local:
        assert not open_policy.allows(ip)
    if DEFAULT.allows(ip):
        plain = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip
        assert plain.is_global


# IPv4-mapped, IPv4-compatible, SIIT, NAT64 well-known and local-use.
_PREFIXES = ["::ffff:0:0", "::", "::ffff:0:0:0", "64:ff9b::", "64:ff9b:1::"]


@given(st.ip_addresses(v=4), st.sampled_from(_PREFIXES))
def test_ipv4_in_ipv6_is_judged_like_ipv4(ip: ipaddress.IPv4Address, prefix: str) -> None:
    """An IPv4 address inside an IPv6 one (mapped, compatible, SIIT, NAT64) is refused
    whenever the IPv4 address itself is."""
    inside = ipaddress.IPv6Address(int(ipaddress.IPv6Address(prefix)) | int(ip))
    for policy in (DEFAULT, OPEN):
        if not policy.allows(ip) and int(inside) > 1:
            assert not policy.allows(inside)


def test_resolution_checks_every_address() -> None:
    async def go() -> None:
        assert await OPEN.resolve("localhost", 80)
        with pytest.raises(AddressRefusedError):
            await DEFAULT.resolve("localhost", 80)
        with pytest.raises(AddressRefusedError):
            await OPEN.resolve("169.254.169.254", 80)
        assert await OPEN.resolve("[::1]", 80) == ["::1"]

    asyncio.run(go())
