"""What an open egress tells a command: the proxy, and what it reaches without it (loopback,
and the session's own services: its compose sidecars on its private network)."""

from __future__ import annotations

from typing import Any

from activities.runtimes.network.egress import EgressDoor, with_local_hosts
from polar.contracts import RuntimeHandle
from polar.tasks.runtime_spec import RuntimeSpec


def handle() -> RuntimeHandle:
    return RuntimeHandle(kind="docker", session_id="s", workdir="/app", host="h")


def spec(**fields: Any) -> RuntimeSpec:
    return RuntimeSpec.model_validate({"kind": "docker", "image": "img:1", **fields})


def test_a_sessions_sidecars_are_reached_without_the_proxy() -> None:
    sidecars = [{"name": "vault", "image": "img:1"}, {"name": "db", "image": "img:1"}]
    named = with_local_hosts(handle(), spec(sidecars=sidecars))
    assert named.local_hosts == ["vault", "db"]
    door = EgressDoor(
        proxy=None, channel_in_sandbox="/run/ch", local_hosts=tuple(named.local_hosts)
    )  # type: ignore[arg-type]
    env = door.env
    assert env["HTTP_PROXY"] == env["https_proxy"] == door.url
    assert env["NO_PROXY"] == env["no_proxy"] == "127.0.0.1,localhost,::1,vault,db"


def test_without_sidecars_only_loopback_skips_the_proxy_and_the_handle_is_unchanged() -> None:
    bare = handle()
    assert with_local_hosts(bare, spec()) is bare
    assert "local_hosts" not in bare.model_dump(mode="json")  # older workers read it as before
    door = EgressDoor(proxy=None, channel_in_sandbox="/run/ch")  # type: ignore[arg-type]
    assert door.env["NO_PROXY"] == "127.0.0.1,localhost,::1"
