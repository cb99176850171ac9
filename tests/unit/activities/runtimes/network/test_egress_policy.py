"""The egress policy's address rule (activities/runtimes/network/egress_policy.py): the worker
host's own addresses, read from its kernel, are never reached; only an exemption naming the
address itself opens one; every non-global spelling is refused whatever the blocked networks
say."""

from __future__ import annotations

import ipaddress
import socket

from activities.runtimes.network.egress_policy import EgressPolicy, host_networks
from polar.settings import Settings
from polar.tasks.spec import NetworkSpec

ip = ipaddress.ip_address
net = ipaddress.ip_network
OWN = frozenset({net("127.0.0.0/8"), net("127.0.0.1/32")})  # as lo's address and route are


def policy(**settings: object) -> EgressPolicy:
    return EgressPolicy.of(NetworkSpec(mode="public"), Settings(egress="proxy", **settings))


def test_a_global_address_of_the_host_is_refused_in_every_spelling() -> None:
    """The host's own global addresses (as on a bare-metal worker; 8.8.8.8 stands in for
    one): refused as themselves and as a NAT64 spelling, with the blocked networks emptied;
    a global address the host does not hold passes."""
    public = policy(egress_blocked_networks=[])
    own = frozenset({net("8.8.8.8/32"), net("2001:4860:4860::8888/128")})
    for other in ("8.8.4.4", "2001:4860:4860::8844", "64:ff9b::808:404"):
        assert public.address_refusal("h", 443, ip(other), own) is None
    for address, holder in (
        ("8.8.8.8", "8.8.8.8/32"),
        ("64:ff9b::808:808", "8.8.8.8/32"),
        ("2001:4860:4860::8888", "2001:4860:4860::8888/128"),
    ):
        why = public.address_refusal("h", 443, ip(address), own)
        assert why == f"h resolves to {address}, the worker host's own ({holder})", why
    mapped = public.address_refusal("h", 443, ip("::ffff:8.8.8.8"), own)
    assert mapped is not None and "the worker host's own (8.8.8.8/32)" in mapped


def test_an_exempt_network_never_opens_the_hosts_own_address() -> None:
    """POLAR_EGRESS_EXEMPT is the explicit exception: an entry naming the address opens it
    (the tests' loopback 'internet'), a network holding it (a mirror's subnet) does not."""
    named = policy(egress_exempt=["127.0.0.1:8080"])
    assert named.address_refusal("localhost", 8080, ip("127.0.0.1"), OWN) is None
    assert named.address_refusal("localhost", 8081, ip("127.0.0.1"), OWN) is not None
    subnet = policy(egress_exempt=["127.0.0.0/8:8080"])
    why = subnet.address_refusal("x", 8080, ip("127.0.0.2"), OWN)
    assert why is not None and "127.0.0.0/8" in why
    assert subnet.address_refusal("x", 8080, ip("127.0.0.2"), frozenset()) is None


def test_non_global_spellings_pass_no_emptied_blocked_list() -> None:
    """With POLAR_EGRESS_BLOCKED_NETWORKS emptied, the rule still refuses every IPv6 spelling
    of loopback and metadata, and private addresses."""
    public = policy(egress_blocked_networks=[])
    for spelling in (
        "10.0.0.1",
        "::ffff:127.0.0.1",
        "::7f00:1",
        "::ffff:0:7f00:1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::7f00:1",
        "2002:7f00:1::",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
    ):
        why = public.address_refusal("h", 80, ip(spelling), frozenset())
        assert why is not None and why.startswith(f"h resolves to {ip(spelling)}"), why


def _primary_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        return str(probe.getsockname()[0])


def test_host_networks_reads_the_kernels_interfaces_and_local_routes() -> None:
    own = host_networks()
    assert net("127.0.0.1/32") in own and net("127.0.0.0/8") in own  # lo, its local route
    assert any(n.version == 6 and ip("::1") in n for n in own) or not socket.has_ipv6
    primary = _primary_address()
    if primary is not None:
        assert any(ip(primary) in n for n in own), (primary, own)


def test_the_sessions_own_services_are_never_asked_of_the_proxy() -> None:
    """A sidecar's name sent to the proxy (a harness ignoring NO_PROXY) is refused by name,
    before any lookup on the worker's network, under `public` and an allowlist naming it;
    another session's service name is only a name like any other."""
    settings = Settings(egress="proxy")
    public = EgressPolicy.of(NetworkSpec(mode="public"), settings, ("lookup",))
    listed = NetworkSpec(mode="allowlist", allowed_hosts=["lookup", "pypi.org"])
    allowlist = EgressPolicy.of(listed, settings, ("lookup",))
    for policy_ in (public, allowlist):
        for name in ("lookup", "LOOKUP", "lookup."):
            why = policy_.name_refusal(name, 8000)
            assert why is not None and "the session's own services" in why, why
    assert public.name_refusal("vault", 8000) is None  # not this session's
    assert allowlist.name_refusal("pypi.org", 443) is None
