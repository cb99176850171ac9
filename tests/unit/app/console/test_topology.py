"""The topology page's data: a gateway from its /health and /metrics, URLs without
credentials, each replica's routing share, the admin URLs read."""

from __future__ import annotations

from prometheus_client import generate_latest

from app.console.topology import gateway_admin_urls, gateway_from, host_of, without_credentials
from polar.settings import ConsoleSettings, Settings
from proxy.metrics import GatewayMetrics

HEALTH = {
    "status": "ok",
    "gateway_id": "gw-1",
    "upstream_kind": "vllm",
    "upstreams": ["http://a:8000/v1", "http://user:hunter2@b:8000/v1"],
    "upstream_routing": "sticky",
    "replicas": [
        {"url": "http://a:8000/v1", "up": True, "inflight": 2, "sessions": 3, "served": 30},
        {"url": "http://user:hunter2@b:8000/v1", "up": False, "inflight": 0, "served": 10},
    ],
    "context_window": 32768,
    "pools": {
        "judge": {
            "models": ["judge-model"],
            "record": False,
            "policy": False,
            "harness": True,
            "replicas": [{"url": "http://j:8000/v1", "up": True, "inflight": 1, "served": 0}],
        }
    },
}


def metrics_text() -> str:
    metrics = GatewayMetrics()
    metrics.in_flight.set(2)
    metrics.held.set(1)
    metrics.calls.labels("openai_chat", "200").inc(39)
    metrics.calls.labels("openai_chat", "502").inc(1)
    return generate_latest(metrics.registry).decode()


def test_a_gateway_from_its_health_and_metrics() -> None:
    gateway = gateway_from("http://gw:8401", HEALTH, metrics_text())
    assert (gateway.gateway_id, gateway.routing, gateway.context_window) == (
        "gw-1",
        "sticky",
        32768,
    )
    a, b = gateway.replicas
    assert (a.up, a.in_flight, a.served, a.share) == (True, 2, 30, 0.75)
    assert (b.up, b.share) == (False, 0.25)
    assert b.url == "http://b:8000/v1"  # the password never reaches the page
    (pool,) = gateway.pools
    assert (pool.name, pool.models, pool.role) == (
        "judge",
        ["judge-model"],
        "side, harness may call",
    )
    assert pool.replicas[0].share is None  # nothing served yet: no share
    assert gateway.gauges == {"in_flight": 2.0, "held": 1.0, "paused": 0.0}
    assert gateway.calls_answered == 40.0


def test_urls_lose_their_credentials_only() -> None:
    assert without_credentials("http://u:p@h:1/v1?x=1") == "http://h:1/v1?x=1"
    assert without_credentials("https://token@h/v1") == "https://h/v1"
    assert without_credentials("http://h:1/v1") == "http://h:1/v1"


def test_the_admin_urls_are_the_console_s_list_else_the_gateway_settings() -> None:
    named = ConsoleSettings(console_gateways="http://a:8401, http://b:8401,")
    assert gateway_admin_urls(named) == ["http://a:8401", "http://b:8401"]
    assert gateway_admin_urls(Settings(admin_port=9401)) == ["http://127.0.0.1:9401"]


def test_a_worker_identity_names_its_host() -> None:
    assert host_of("1234@node-7") == "node-7"
    assert host_of("custom") == "custom"
