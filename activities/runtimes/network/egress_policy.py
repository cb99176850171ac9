"""What a session's egress may reach: the task's hosts, the deployment's blocks, never the host.

`EgressPolicy` decides each attempt by the task's network mode and hosts and the
deployment's blocked and exempt networks; `host_networks` reads the worker host's own
addresses from its kernel (netlink) at each attempt.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from polar.network_policy import (
    AllowedHost,
    IPAddress,
    IPNetwork,
    blocked_networks,
    blocking_network,
    embedded_ipv4,
    not_global,
    parse_allowed_host,
)
from polar.settings import WorkerSettings
from polar.tasks.spec import NetworkSpec


@dataclass(frozen=True)
class Exempt:
    """An address (or network) and port that pass the blocked networks."""

    network: IPNetwork
    port: int | None

    @classmethod
    def parse(cls, entry: str) -> Exempt:
        parsed = parse_allowed_host(entry)
        if parsed.network is None:
            raise ValueError(f"egress exempt {entry!r}: an IP address or network, not a name")
        return cls(parsed.network, parsed.port)

    def holds(self, ip: IPAddress, port: int) -> bool:
        return (self.port is None or self.port == port) and (
            ip.version == self.network.version and ip in self.network
        )

    def names(self, ip: IPAddress) -> bool:
        """Whether this entry is `ip` itself (not a network that holds it)."""
        return self.network.num_addresses == 1 and ip == self.network.network_address


@dataclass(frozen=True)
class EgressPolicy:
    """What one session's connections may reach: the task's mode and hosts, the
    deployment's blocked networks and exemptions."""

    mode: str
    allowed: tuple[AllowedHost, ...]
    blocked: tuple[IPNetwork, ...]
    exempt: tuple[Exempt, ...] = ()
    local_names: frozenset[str] = frozenset()
    """The session's own services (its sidecars): reached directly, never through the proxy,
    so their names are never looked up on the worker's network."""

    @classmethod
    def of(
        cls, network: NetworkSpec, settings: WorkerSettings, local_names: tuple[str, ...] = ()
    ) -> EgressPolicy:
        return cls(
            network.mode,
            tuple(parse_allowed_host(h) for h in network.allowed_hosts),
            blocked_networks(settings.egress_blocked_networks),
            tuple(Exempt.parse(e) for e in settings.egress_exempt),
            frozenset(name.lower() for name in local_names),
        )

    def name_refusal(self, host: str, port: int) -> str | None:
        """Why `host:port` is refused before any lookup (one of the session's own services;
        allowlist: no entry names it and no network entry could hold it), or None."""
        if host.lower().rstrip(".") in self.local_names:
            return (
                f"{host} is one of the session's own services: reached directly (it is in "
                "NO_PROXY), never through the egress proxy"
            )
        if self.mode == "public":
            return None
        if self.mode != "allowlist":
            return f"the session's network is {self.mode!r}"
        for entry in self.allowed:
            if entry.network is None and entry.matches(host, port, None):
                return None
            if entry.network is not None and entry.port in (None, port):
                return None  # its address decides (address_refusal)
        return f"{host}:{port} is not in the task's allowed_hosts"

    def address_refusal(
        self, host: str, port: int, ip: IPAddress, own: frozenset[IPNetwork] = frozenset()
    ) -> str | None:
        """Why a connection to `host:port` at `ip` is refused, or None. `own`: what the
        worker's host answers as itself (`host_networks`), never reached but through an
        exemption naming the address itself (an exempt network never opens it)."""
        if self.mode == "allowlist" and not any(e.matches(host, port, ip) for e in self.allowed):
            return f"{host}:{port} ({ip}) is not in the task's allowed_hosts"
        mine = own_network(ip, own)
        exempt = [e for e in self.exempt if e.holds(ip, port)]
        if exempt and (mine is None or any(e.names(ip) for e in exempt)):
            return None
        network = blocking_network(ip, self.blocked)
        if network is not None:
            return f"{host} resolves to {ip}, in the blocked network {network}"
        if mine is not None:
            return f"{host} resolves to {ip}, the worker host's own ({mine})"
        why = not_global(ip)
        if why is not None:
            return f"{host} resolves to {why}"
        return None


def own_network(ip: IPAddress, own: frozenset[IPNetwork]) -> IPNetwork | None:
    """The one of `own` that holds `ip`, or an IPv4 address it embeds; None if none does."""
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        candidates += embedded_ipv4(ip)[1]
    for candidate in candidates:
        for network in own:
            if candidate.version == network.version and candidate in network:
                return network
    return None


_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol,
#                                       scope, type, flags
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWADDR, RTM_GETADDR, RTM_NEWROUTE, RTM_GETROUTE = 20, 22, 24, 26
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_TABLE = 1, 15
RT_TABLE_LOCAL = 255
RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST = 2, 3, 4


def _netlink_dump(request: int, body: bytes) -> Iterator[tuple[int, bytes]]:
    """Each message (type, payload) the kernel's answer to a NETLINK_ROUTE dump holds."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(5.0)
        sock.bind((0, 0))
        flags = NLM_F_REQUEST | NLM_F_DUMP
        sock.send(_NLMSG.pack(_NLMSG.size + len(body), request, flags, 1, 0) + body)
        while True:
            data = sock.recv(1 << 16)  # a dump's datagrams are at most 32 KiB
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind = _NLMSG.unpack_from(data, offset)[:2]
                if length < _NLMSG.size:
                    raise OSError("netlink: a malformed answer")
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
                    raise OSError(-error, f"netlink: {os.strerror(-error)}")
                yield kind, data[offset + _NLMSG.size : offset + length]
                offset += (length + 3) & ~3


def _attributes(payload: bytes, offset: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    while offset + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, offset)
        if length < 4:
            break
        found.setdefault(kind, payload[offset + 4 : offset + length])
        offset += (length + 3) & ~3
    return found


def _address(family: int, raw: bytes | None) -> IPAddress | None:
    if family == socket.AF_INET and raw is not None and len(raw) == 4:
        return ipaddress.IPv4Address(raw)
    if family == socket.AF_INET6 and raw is not None and len(raw) == 16:
        return ipaddress.IPv6Address(raw)
    return None


def host_networks() -> frozenset[IPNetwork]:
    """What the worker's host answers as itself, read from its kernel now (netlink, in the
    worker's network namespace): every address of its interfaces, and every destination its
    local routing table delivers to it (the whole loopback range, subnet broadcasts, anycast
    and AnyIP routes). OSError where the kernel cannot say."""
    found: set[IPNetwork] = set()
    for kind, msg in _netlink_dump(RTM_GETADDR, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        if kind == RTM_NEWADDR and len(msg) >= _IFADDRMSG.size:
            attrs = _attributes(msg, _IFADDRMSG.size)
            for raw in (attrs.get(IFA_ADDRESS), attrs.get(IFA_LOCAL)):
                address = _address(msg[0], raw)
                if address is not None:
                    found.add(ipaddress.ip_network(address))
    for kind, msg in _netlink_dump(RTM_GETROUTE, _RTMSG.pack(socket.AF_UNSPEC, *[0] * 8)):
        if kind != RTM_NEWROUTE or len(msg) < _RTMSG.size:
            continue
        family, dst_len, _, _, table, _, _, route_type, _ = _RTMSG.unpack_from(msg)
        attrs = _attributes(msg, _RTMSG.size)
        if len(attrs.get(RTA_TABLE, b"")) == 4:
            (table,) = struct.unpack("=I", attrs[RTA_TABLE])
        if table != RT_TABLE_LOCAL or route_type not in (RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST):
            continue
        address = _address(family, attrs.get(RTA_DST))
        if address is not None:
            found.add(ipaddress.ip_network((address, dst_len), strict=False))
    return frozenset(found)
