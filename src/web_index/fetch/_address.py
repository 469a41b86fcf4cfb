"""Which network addresses a fetcher may connect to.

A URL names a host, but the host resolves to addresses, and a hostile page
can point a redirect or a DNS record at the machine's own cloud-metadata
service. So the check runs on every resolved address of every hop, and the
connection then goes to an address that passed, never to a fresh lookup.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field

from web_index.errors import WebIndexError

__all__ = [
    "AddressPolicy",
    "AddressRefusedError",
    "IPAddress",
    "IPNetwork",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Always refused: link-local (where cloud metadata lives), the metadata
# services' other addresses, and addresses that are not a single host.
_ALWAYS_DENIED = _nets(
    "169.254.0.0/16",  # IPv4 link-local; AWS/GCP/Azure/OCI metadata at .169.254
    "fe80::/10",  # IPv6 link-local
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "fd20:ce::254/128",  # Google Cloud metadata over IPv6
    "fd00:c1::a9fe:a9fe/128",  # Oracle Cloud metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "192.0.0.192/32",  # Oracle Cloud classic metadata
    "168.63.129.16/32",  # Azure's platform address (WireServer): public, never a web site
    "0.0.0.0/8",  # "this network": connects to the local host on Linux
    "::/128",
    "224.0.0.0/4",  # multicast
    "ff00::/8",
    "240.0.0.0/4",  # reserved, and broadcast
)
_LOOPBACK = _nets("127.0.0.0/8", "::1/128")
_PRIVATE = _nets(
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",  # carrier-grade NAT, as internal as RFC 1918 in practice
    "fc00::/7",  # unique local
    # NAT64's local-use block (RFC 8215): a network's own translator, whose prefix there may
    # be a /48, /56 or /64 that places the IPv4 address elsewhere than the last 32 bits.
    "64:ff9b:1::/48",
    "198.18.0.0/15",  # benchmarking
)


# IPv6 addresses whose last 32 bits are an IPv4 address a host may reach through them:
# IPv4-compatible (deprecated, but still routed where a sit tunnel is up), SIIT's
# IPv4-translated, and NAT64's well-known prefix and local-use block in its /96 form (RFC 6052,
# 8215). (IPv4-mapped and 6to4 have ipaddress properties of their own, below.)
_EMBEDS_IPV4 = _nets("::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/96")


def _within(ip: IPAddress, networks: tuple[IPNetwork, ...]) -> bool:
    return any(ip.version == net.version and ip in net for net in networks)


# How a refusal starts, in the error and so in the attempt's logs.
REFUSED = "address policy refuses"


class AddressRefusedError(WebIndexError, OSError):
    """A host resolved only to addresses the policy refuses (an ``OSError`` too,
    so that HTTP clients treat it as a connection that could not be made)."""

    def __init__(self, host: str, reasons: list[str]) -> None:
        self.host = host
        self.reasons = reasons
        super().__init__(f"{REFUSED} {host}: " + "; ".join(reasons))


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Refuse link-local and metadata addresses always; loopback and private
    ranges unless allowed. ``deny`` adds networks to refuse, ``allow`` carves
    exceptions out of the private and loopback ranges (never out of the
    always-denied ones)."""

    allow_loopback: bool = False
    allow_private: bool = False
    allow: tuple[IPNetwork, ...] = field(default_factory=tuple)
    deny: tuple[IPNetwork, ...] = field(default_factory=tuple)

    @classmethod
    def permissive_local(cls) -> AddressPolicy:
        """Loopback and private ranges allowed: for tests and local demos."""
        return cls(allow_loopback=True, allow_private=True)

    def refusal(self, address: str | IPAddress) -> str | None:
        """Why ``address`` is refused, or ``None`` when it may be used."""
        try:
            ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        except ValueError:
            return f"{address!r} is not an IP address"
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                # An IPv4 address in IPv6 clothing is an IPv4 address.
                return self.refusal(ip.ipv4_mapped)
            embedded = ip.sixtofour
            # (:: and ::1 are the unspecified and loopback addresses, not 0.0.0.0 and 0.0.0.1.)
            if embedded is None and int(ip) > 1 and _within(ip, _EMBEDS_IPV4):
                embedded = ipaddress.IPv4Address(ip.packed[-4:])
            if embedded is not None:
                inner = self.refusal(embedded)
                if inner is not None:
                    return f"{ip} embeds {inner}"
            if ip.scope_id:
                ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        if _within(ip, _ALWAYS_DENIED):
            return f"{ip} is link-local, cloud-metadata or not a unicast host"
        if _within(ip, self.deny):
            return f"{ip} is in a denied network"
        if _within(ip, self.allow):
            return None
        if _within(ip, _LOOPBACK):
            return None if self.allow_loopback else f"{ip} is loopback (allow_loopback, --allow-loopback)"
        if _within(ip, _PRIVATE):
            return (
                None if self.allow_private else f"{ip} is in a private range (allow_private, --allow-private)"
            )
        if not ip.is_global:
            # Documentation, benchmarking, protocol-assignment and other
            # special-purpose ranges (IANA's registry): nothing to fetch there.
            return f"{ip} is a special-purpose address"
        return None

    def allows(self, address: str | IPAddress) -> bool:
        return self.refusal(address) is None

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses of ``host`` the policy allows, in resolver order.

        Raises :class:`socket.gaierror` when the name does not resolve and
        :class:`AddressRefusedError` when it resolves only to refused
        addresses. Any refused address among several refuses the host: a name
        that also points at a metadata service is not one to trust.
        """
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
        addresses: list[str] = []
        for _family, _type, _proto, _canon, sockaddr in infos:
            addr = str(sockaddr[0])
            if addr not in addresses:
                addresses.append(addr)
        reasons = [r for r in (self.refusal(a) for a in addresses) if r is not None]
        if reasons or not addresses:
            raise AddressRefusedError(host, reasons or ["no addresses"])
        return addresses
