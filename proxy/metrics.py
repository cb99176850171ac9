"""Prometheus metrics of one gateway process, served at `GET /metrics`.

Each app gets its own registry (several gateways can live in one test process).
Labels stay bounded: provider API (four values), HTTP status, error code.
Per-session token counts would add a series per session forever, so they are
kept for the `metrics_max_sessions` most recently active sessions only (an
LRU, exported by a custom collector): a dashboard sees the live sessions, and
a scrape never grows without bound. Totals per provider are exact counters.
The same LRU counts each session's unserved calls (answered 5xx: an upstream
error or timeout, no replica reachable, a completion it could not record):
what makes a session's failed harness an infra error (polar/outcomes.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class SessionTokens(Collector):
    """Prompt/completion tokens and unserved calls of the N most recently active sessions."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sessions: OrderedDict[str, tuple[str, int, int, int]] = OrderedDict()

    def add(
        self, session_id: str, task_id: str, prompt: int, completion: int, unserved: int = 0
    ) -> None:
        if self.limit <= 0:
            return
        _, p, c, u = self._sessions.pop(session_id, (task_id, 0, 0, 0))
        self._sessions[session_id] = (task_id, p + prompt, c + completion, u + unserved)
        while len(self._sessions) > self.limit:
            self._sessions.popitem(last=False)

    def unserved(self, session_id: str) -> int:
        """The session's calls this gateway could not serve (0 once it left the LRU)."""
        entry = self._sessions.get(session_id)
        return entry[3] if entry else 0

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "polar_gateway_session_tokens",
            "Tokens of recently active sessions (bounded LRU; see metrics_max_sessions)",
            labels=["session_id", "task_id", "kind"],
        )
        unserved = CounterMetricFamily(
            "polar_gateway_session_unserved_calls",
            "Calls of recently active sessions answered 5xx (upstream error or timeout, no "
            "replica reachable, not recordable); bounded LRU",
            labels=["session_id", "task_id"],
        )
        for session_id, (task_id, prompt, completion, failed) in list(self._sessions.items()):
            family.add_metric([session_id, task_id, "prompt"], prompt)
            family.add_metric([session_id, task_id, "completion"], completion)
            unserved.add_metric([session_id, task_id], failed)
        yield family
        yield unserved


class GatewayMetrics:
    """The gateway's counters, histograms and gauges, in their own registry."""

    def __init__(self, max_sessions: int = 1000) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.calls = Counter(
            "polar_gateway_calls", "Model calls answered", ["provider", "status"], registry=r
        )
        self.latency = Histogram(
            "polar_gateway_call_seconds",
            "Model call latency, arrival to answer (includes upstream and recording)",
            ["provider"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "polar_gateway_upstream_errors",
            "Upstream calls that gave no usable answer",
            ["provider", "code"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "polar_gateway_prompt_tokens", "Prompt tokens sent upstream", ["provider"], registry=r
        )
        self.completion_tokens = Counter(
            "polar_gateway_completion_tokens",
            "Completion tokens sampled upstream",
            ["provider"],
            registry=r,
        )
        self.recording_failures = Counter(
            "polar_gateway_recording_failures",
            "Completions that could not be written to S3 (answered 503)",
            registry=r,
        )
        self.client_disconnects = Counter(
            "polar_gateway_client_disconnects",
            "Calls whose caller hung up before the answer (recorded as unseen, never trained)",
            registry=r,
        )
        self.in_flight = Gauge("polar_gateway_in_flight", "Model calls in progress", registry=r)
        self.held = Gauge("polar_gateway_held", "Calls held while paused", registry=r)
        self.paused = Gauge("polar_gateway_paused", "1 while the gateway is paused", registry=r)
        self.sessions = SessionTokens(max_sessions)
        r.register(self.sessions)

    def tokens(
        self, provider: str, session_id: str, task_id: str, prompt: int, completion: int
    ) -> None:
        self.prompt_tokens.labels(provider).inc(prompt)
        self.completion_tokens.labels(provider).inc(completion)
        self.sessions.add(session_id, task_id, prompt, completion)
