"""What a session's egress may reach: allowlist entries, their matching, blocked networks.

Pure functions (the task spec validates its `runtime.network.allowed_hosts` with them; the
worker's egress proxy, activities/runtimes/network/egress.py, decides each connection with them).

An allowlist entry is Harbor's (harbor 0.25 `allowed_hosts`): an exact host name
(`pypi.org`), a leading wildcard (`*.pythonhosted.org`: any name below it, not the name
itself), an IP address or an IP network in CIDR form; Polar also takes any of the names
with a port (`pypi.org:443`, `[2001:db8::1]:443`), which then matches that port only.
Entries are normalised as Harbor does: lower case, no trailing dot.

What no egress reaches, whatever the task's mode (`not_global`): an address that is not on
the public internet. IPv4: `is_global` and not multicast. IPv6: `is_global` within IANA's
global unicast space (2000::/3), and never an IPv6 spelling of an IPv4 address
(`embedded_ipv4`: IPv4-mapped, IPv4-compatible, SIIT, NAT64, 6to4, Teredo) unless both the
spelling's range and the IPv4 address it carries are global (only the well-known NAT64
prefix 64:ff9b::/96 is). The deployment's blocked networks are extra blocks on top.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")

DEFAULT_BLOCKED_NETWORKS: tuple[str, ...] = (
    "0.0.0.0/8",  # "this" network
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # carrier-grade NAT
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, the cloud metadata address 169.254.169.254
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments
    "192.168.0.0/16",  # private
    "198.18.0.0/15",  # benchmarking
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, broadcast
    "::/128",  # unspecified
    "::1/128",  # loopback
    "::ffff:0:0/96",  # IPv4-mapped (checked again as IPv4)
    "64:ff9b::/96",  # NAT64 (reaches IPv4 through a gateway)
    "fc00::/7",  # unique local
    "fe80::/10",  # link-local
    "ff00::/8",  # multicast
    "fd00:ec2::254/128",  # the IPv6 metadata address
)
"""Networks a `public` session never reaches (POLAR_EGRESS_BLOCKED_NETWORKS' default), named
in the refusal; `not_global` refuses every other non-global address too."""

GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
"""IANA's global unicast space: an IPv6 address outside it is never on the internet, whatever
an older `is_global` says (Python 3.11 calls ::7f00:1, ::ffff:0:7f00:1 and fec0::1 global)."""
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): global, the IPv4 address in its last 32 bits."""
IPV4_EMBEDDINGS: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (ipaddress.IPv6Network("::ffff:0:0/96"), "IPv4-mapped"),
    (ipaddress.IPv6Network("::ffff:0:0:0/96"), "SIIT IPv4-translated"),
    (ipaddress.IPv6Network("::/96"), "IPv4-compatible"),
    (NAT64, "NAT64"),
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "local-use NAT64"),
    (ipaddress.IPv6Network("2002::/16"), "6to4"),
    (ipaddress.IPv6Network("2001::/32"), "Teredo"),
)
"""IPv6 ranges that carry an IPv4 address, and their names."""


@dataclass(frozen=True)
class AllowedHost:
    """One parsed allowlist entry: a name (`*.`-prefixed for a wildcard) or a network."""

    name: str | None
    network: IPNetwork | None
    port: int | None

    def matches(self, host: str, port: int, ip: IPAddress | None) -> bool:
        """Whether a connection to `host:port`, resolved to `ip`, is this entry's: a name by
        the name asked for, a network by the address connected to."""
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:  # as a firewall would: the address connected to
            return ip is not None and ip.version == self.network.version and ip in self.network
        assert self.name is not None
        name = normal_host(host)
        if self.name.startswith("*."):
            return name.endswith(self.name[1:]) and len(name) > len(self.name) - 1
        return name == self.name


def normal_host(host: str) -> str:
    """`host` as entries are compared: lower case, no trailing dot, no IPv6 brackets."""
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def _ip_or_none(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(normal_host(text))
    except ValueError:
        return None


def _split_port(entry: str) -> tuple[str, int | None]:
    """(`host`, port) of `host:port`, `[v6]:port`, or (entry, None) without a port."""
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"allowed host {entry!r}: an IPv6 address in [] then :port")
        return host, _port(entry, rest[1:]) if rest else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _port(entry, port)
    return entry, None


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"allowed host {entry!r}: the port must be 1-65535")
    return int(text)


def parse_allowed_host(entry: str) -> AllowedHost:
    """One allowlist entry parsed (ValueError saying what is wrong with it)."""
    text = entry.strip().lower()
    if not text or len(text) > 300:
        raise ValueError(f"allowed host {entry!r:.80}: empty or over 300 characters")
    if "://" in text or any(c in text for c in "@?#") or any(ord(c) <= 32 for c in text):
        raise ValueError(f"allowed host {entry!r:.80}: a host name, not a URL")
    host, port = _split_port(text)
    if "/" in host:
        try:
            network = ipaddress.ip_network(host, strict=True)
        except ValueError as exc:
            raise ValueError(f"allowed host {entry!r}: not an IP network ({exc})") from None
        return AllowedHost(None, network, port)
    address = _ip_or_none(host)
    if address is not None:
        return AllowedHost(None, ipaddress.ip_network(address), port)
    name = host.rstrip(".")
    bare = name[2:] if name.startswith("*.") else name
    if "*" in bare or not bare or not all(_LABEL.match(label) for label in bare.split(".")):
        raise ValueError(
            f"allowed host {entry!r:.80}: a host name (letters, digits, '-', '.'), a leading "
            "'*.' wildcard, an IP address or a CIDR network, with an optional ':port'"
        )
    if name.startswith("*.") and _ip_or_none(bare) is not None:
        raise ValueError(f"allowed host {entry!r}: a wildcard names hosts, not an IP address")
    return AllowedHost(name, None, port)


def normalize_allowed_host(entry: str) -> str:
    """`entry` checked (ValueError) and written as it is compared."""
    parsed = parse_allowed_host(entry)
    if parsed.network is not None:
        net = parsed.network
        text = str(net.network_address) if net.num_addresses == 1 else str(net)
        if parsed.port is None:
            return text
        return f"[{text}]:{parsed.port}" if net.version == 6 else f"{text}:{parsed.port}"
    assert parsed.name is not None
    return parsed.name if parsed.port is None else f"{parsed.name}:{parsed.port}"


def blocked_networks(entries: list[str] | tuple[str, ...]) -> tuple[IPNetwork, ...]:
    """The deployment's blocked networks parsed (ValueError naming a bad one)."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"blocked network {entry!r}: {exc}") from None
    return tuple(out)


def blocking_network(ip: IPAddress, networks: tuple[IPNetwork, ...]) -> IPNetwork | None:
    """The first of `networks` holding `ip` (an IPv4-mapped IPv6 address checked as its IPv4
    address too), or None."""
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        candidates.append(ip.ipv4_mapped)
    for candidate in candidates:
        for network in networks:
            if candidate.version == network.version and candidate in network:
                return network
    return None


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, tuple[ipaddress.IPv4Address, ...]]:
    """The IPv4 embedding `ip` is (its name, the IPv4 addresses it carries: Teredo's server
    and client, 6to4's router, the last 32 bits of the others; a local-use NAT64 prefix may
    be longer than /96, its last 32 bits are then a guess), or ("", ())."""
    for network, kind in IPV4_EMBEDDINGS:
        if ip in network:
            if ip.teredo is not None:
                return kind, ip.teredo
            if ip.sixtofour is not None:
                return kind, (ip.sixtofour,)
            return kind, (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    return "", ()


def not_global(ip: IPAddress) -> str | None:
    """Why `ip` is not a global unicast address (one on the public internet), or None."""
    if isinstance(ip, ipaddress.IPv4Address):
        if ip.is_global and not ip.is_multicast:
            return None
        return f"{ip} is not a global unicast address"
    kind, carried = embedded_ipv4(ip)
    for v4 in carried:
        if not_global(v4) is not None:
            return f"{ip} is {kind} for {v4}, not a global unicast address"
    if ip in NAT64:
        return None  # what it reaches is its IPv4 address, a global one
    if kind:
        return f"{ip} is {kind} (for {', '.join(map(str, carried))}), never reached"
    if ip in GLOBAL_UNICAST_V6 and ip.is_global and not ip.is_multicast:
        return None
    return f"{ip} is not a global unicast address"
