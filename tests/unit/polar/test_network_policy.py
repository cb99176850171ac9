"""Allowlist entries and blocked networks (polar/network_policy.py), and the task field
that holds them (RuntimeSpec.network)."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from polar.network_policy import (
    DEFAULT_BLOCKED_NETWORKS,
    blocked_networks,
    blocking_network,
    embedded_ipv4,
    normalize_allowed_host,
    not_global,
    parse_allowed_host,
)
from polar.tasks.spec import RuntimeSpec

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("entry", "normal"),
    [
        ("PyPI.org.", "pypi.org"),
        ("*.Example.com", "*.example.com"),
        ("pypi.org:443", "pypi.org:443"),
        ("192.0.2.1", "192.0.2.1"),
        ("192.0.2.0/24", "192.0.2.0/24"),
        ("2001:DB8::1", "2001:db8::1"),
        ("[2001:db8::1]:443", "[2001:db8::1]:443"),
    ],
)
def test_entries_normalise_as_harbor_writes_them(entry: str, normal: str) -> None:
    assert normalize_allowed_host(entry) == normal


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "http://pypi.org",
        "pypi.org/simple",
        "a*.b.com",
        "*.",
        "*.10.0.0.1",
        "x:0",
        "x:99999",
        "user@host",
        "-bad.com",
        "192.0.2.1/8",
    ],
)
def test_bad_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed host"):
        parse_allowed_host(entry)


def test_matching_by_name_wildcard_port_and_network() -> None:
    exact, wild = parse_allowed_host("pypi.org"), parse_allowed_host("*.example.com")
    assert exact.matches("PYPI.ORG.", 443, None) and not exact.matches("x.pypi.org", 443, None)
    assert wild.matches("a.b.example.com", 80, None)
    assert not wild.matches("example.com", 80, None) and not wild.matches(
        "badexample.com", 80, None
    )
    port = parse_allowed_host("pypi.org:443")
    assert port.matches("pypi.org", 443, None) and not port.matches("pypi.org", 80, None)
    net = parse_allowed_host("192.0.2.0/24")
    assert net.matches("192.0.2.9", 80, ip("192.0.2.9"))
    assert net.matches("svc.test", 80, ip("192.0.2.9"))  # a name resolved into it
    assert not net.matches("192.0.3.1", 80, ip("192.0.3.1"))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",
    ],
)
def test_the_default_blocks_loopback_private_link_local_cgnat_multicast_metadata(
    address: str,
) -> None:
    assert blocking_network(ip(address), blocked_networks(DEFAULT_BLOCKED_NETWORKS)) is not None


def test_public_addresses_pass_the_default() -> None:
    blocked = blocked_networks(DEFAULT_BLOCKED_NETWORKS)
    for address in ("93.184.216.34", "2606:4700::1111", "8.8.8.8"):
        assert blocking_network(ip(address), blocked) is None


def test_the_task_field_is_checked_and_left_out_while_sealed() -> None:
    assert "network" not in RuntimeSpec().model_dump()

    def runtime(network: dict[str, object]) -> RuntimeSpec:
        return RuntimeSpec.model_validate({"network": network})

    spec = runtime({"mode": "allowlist", "allowed_hosts": ["A.test", "a.test"]})
    assert spec.network.allowed_hosts == ["a.test"]
    assert RuntimeSpec.model_validate(spec.model_dump()) == spec
    with pytest.raises(ValidationError, match="allowed_hosts is for mode 'allowlist'"):
        runtime({"mode": "public", "allowed_hosts": ["a.test"]})
    with pytest.raises(ValidationError, match="allowed host"):
        runtime({"mode": "allowlist", "allowed_hosts": ["http://a.test/"]})
    with pytest.raises(ValidationError):
        runtime({"mode": "everything"})


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("127.0.0.1", "not a global unicast address"),
        ("10.1.2.3", "not a global"),
        ("100.64.0.1", "not a global"),  # CGNAT
        ("169.254.169.254", "not a global"),  # metadata
        ("192.0.2.2", "not a global"),  # documentation (this test machine's own range)
        ("224.0.0.1", "not a global"),  # multicast: is_global says True
        ("255.255.255.255", "not a global"),
        ("::1", "not a global"),
        ("::", "not a global"),
        ("fe80::1", "not a global"),
        ("fd00:ec2::254", "not a global"),  # the IPv6 metadata address
        ("fec0::1", "not a global"),  # site-local: Python 3.11's is_global says True
        ("ff0e::1", "not a global"),  # global-scope multicast
        ("100::1", "not a global"),  # discard
        ("2001:db8::1", "not a global"),
        ("::ffff:127.0.0.1", "IPv4-mapped for 127.0.0.1"),
        ("::ffff:169.254.169.254", "IPv4-mapped for 169.254.169.254"),
        ("::7f00:1", "IPv4-compatible for 127.0.0.1"),  # is_global says True
        ("::a9fe:a9fe", "IPv4-compatible for 169.254.169.254"),
        ("::ffff:0:7f00:1", "SIIT IPv4-translated for 127.0.0.1"),
        ("64:ff9b::7f00:1", "NAT64 for 127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "NAT64 for 169.254.169.254"),
        ("64:ff9b::a00:1", "NAT64 for 10.0.0.1"),
        ("64:ff9b:1::7f00:1", "local-use NAT64 for 127.0.0.1"),
        ("64:ff9b:1::808:808", "local-use NAT64 (for 8.8.8.8), never reached"),
        ("2002:7f00:1::", "6to4 for 127.0.0.1"),  # is_global says True
        ("2002:a9fe:a9fe::1", "6to4 for 169.254.169.254"),
        ("2002:808:808::1", "6to4 (for 8.8.8.8), never reached"),
        # Teredo: server 65.54.227.120, client ~(0x80ff, 0xfffe) = 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo for 127.0.0.1"),
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "Teredo (for 65.54.227.120, 8.8.8.8)"),
    ],
)
def test_no_spelling_of_a_non_global_address_is_global(address: str, says: str) -> None:
    why = not_global(ip(address))
    assert why is not None and says in why, why
    assert why.startswith(str(ip(address)))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "2001:4860:4860::8888"]
)
def test_a_real_global_address_is_admitted(address: str) -> None:
    assert not_global(ip(address)) is None


def test_the_well_known_nat64_prefix_is_its_ipv4_address() -> None:
    """64:ff9b::/96 (global, RFC 6052) reaches the IPv4 address in its last 32 bits: admitted
    by the rule when that address is global (the default blocked networks still name it)."""
    assert not_global(ip("64:ff9b::808:808")) is None
    assert embedded_ipv4(ipaddress.IPv6Address("64:ff9b::808:808")) == ("NAT64", (ip("8.8.8.8"),))
    blocked = blocked_networks(DEFAULT_BLOCKED_NETWORKS)
    assert str(blocking_network(ip("64:ff9b::808:808"), blocked)) == "64:ff9b::/96"
    assert embedded_ipv4(ipaddress.IPv6Address("2606:4700::1111")) == ("", ())
