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
    normalize_allowed_host,
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
