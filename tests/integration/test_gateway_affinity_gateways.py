"""Two real gateway processes in front of the same replicas agree where each session goes.

Each session's turns arrive at the two gateways in turn (`polar gateway` processes on
loopback, scripted vLLM-shaped replicas, the suite's SeaweedFS): every turn is served
by one replica, as with one gateway; a gateway that restarts sends each session where it
was; when a replica stops, its sessions move once, to the same replica at both gateways.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from app.devstack import DevStack
from app.devstack.services import gateway_service
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from proxy.routing import HashRing, route_key
from proxy.routing_store import route_object_key
from tests.support import ScriptedBackend, scripted_backend, text
from tests.support.ports import free_port

REPLICAS = 3
SESSIONS = 6
TURNS = 4


@dataclasses.dataclass
class Gateways:
    stack: DevStack
    urls: list[str]
    names: list[str]
    services: list[Any]

    def restart(self, i: int) -> None:
        """Stop gateway `i` (its placements in memory are gone) and start it afresh."""
        self.stack.stop(self.names[i], quiet=True)
        self.stack.start(self.services[i], log=lambda _: None)


@contextlib.contextmanager
def two_gateways(
    base_settings: Settings, tmp_path: Path, backends: list[ScriptedBackend]
) -> Iterator[Gateways]:
    settings = base_settings.model_copy(
        update={
            "upstream_urls": ",".join(b.url for b in backends),
            "upstream_cache_salt": "session",  # the session rides in cache_salt: `served_by`
            "upstream_health_interval_s": 0,  # passive health only: a call finds a stop
            "data_dir": tmp_path,  # its own run dir: the suite's gateway keeps its pid file
            "log_format": "text",
        }
    )
    stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
    gateways = Gateways(stack, [], [], [])
    try:
        for name in ("gateway-a", "gateway-b"):
            mine = settings.model_copy(
                update={"gateway_port": free_port(), "admin_port": free_port()}
            )
            service = dataclasses.replace(gateway_service(mine, mine.as_env()), name=name)
            stack.start(service, log=lambda _: None)
            gateways.urls.append(f"{mine.gateway_base_url}/v1")
            gateways.names.append(name)
            gateways.services.append(service)
        yield gateways
    finally:
        for name in gateways.names:
            stack.stop(name, quiet=True)


SYSTEM = {"role": "system", "content": "You are a coding agent."}


def colliding_ids(backends: list[ScriptedBackend], n: int) -> list[str]:
    """`n` session ids whose keys hash to one replica: consistent hashing puts them all
    there (a few sessions hash unevenly over a few replicas); placement by load spreads
    them."""
    ring = HashRing([b.url for b in backends])
    out: list[str] = []
    while len(out) < n:
        session_id = f"s-{uuid.uuid4().hex[:12]}"
        if ring.home(route_key(session_id, [SYSTEM])) == backends[0].url:
            out.append(session_id)
    return out


class Session:
    """One append-only chat session through the official SDK, its turns spread over the
    gateways as a load balancer in front of them would spread them."""

    def __init__(self, settings: Settings, gateways: Gateways, session_id: str) -> None:
        self.session_id = session_id
        identity = SessionIdentity(self.session_id, "task-gws", 1, None, None)
        key = mint_session_key(identity, settings.session_secret or "")
        self.clients = [OpenAI(base_url=u, api_key=key, max_retries=0) for u in gateways.urls]
        self.messages: list[dict[str, Any]] = [dict(SYSTEM)]
        self.turn = 0

    def call(self, gateway: int) -> None:
        self.messages.append({"role": "user", "content": f"turn {self.turn}"})
        answer = self.clients[gateway].chat.completions.create(
            model="policy", messages=self.messages
        )
        self.messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        self.turn += 1


def served_by(session: Session, turn: int, backends: list[ScriptedBackend]) -> int:
    got = [
        i
        for i, b in enumerate(backends)
        for body in b.requests
        if body.get("cache_salt") == session.session_id
        and body["messages"][-1]["content"] == f"turn {turn}"
    ]
    assert len(got) == 1, (session.session_id, turn, got)
    return got[0]


@pytest.mark.timeout(300)
def test_two_gateways_send_each_session_to_one_replica(
    base_settings: Settings, storage: Storage, tmp_path: Path
) -> None:
    stoppable = [contextlib.ExitStack() for _ in range(REPLICAS)]
    with contextlib.ExitStack() as stack:
        for s in stoppable:
            stack.enter_context(s)
        backends = [
            s.enter_context(scripted_backend([text(f"r{i}")] * 200))
            for i, s in enumerate(stoppable)
        ]
        gateways = stack.enter_context(two_gateways(base_settings, tmp_path, backends))
        ids = colliding_ids(backends, SESSIONS)
        sessions = [Session(base_settings, gateways, i) for i in ids]
        for turn in range(TURNS):  # session i's turn t goes to gateway (i + t) % 2
            for i, session in enumerate(sessions):
                session.call((i + turn) % 2)
        home = {}
        for session in sessions:
            used = {served_by(session, t, backends) for t in range(TURNS)}
            assert len(used) == 1, used  # both gateways sent every turn to one replica
            home[session.session_id] = used.pop()
        # placed by load: each gateway spreads the 3 sessions it sees first, not all on
        # their hash's replica
        assert sorted(Counter(home.values()).values()) == [2, 2, 2], home
        for session in sessions:  # the placement both gateways read
            assert storage.exists(route_object_key(route_key(session.session_id, [SYSTEM])))

        gateways.restart(0)  # a restarted gateway reads the placements back from S3
        for session in sessions:
            session.call(0)
        for session in sessions:
            assert served_by(session, TURNS, backends) == home[session.session_id]

        victim = home[sessions[0].session_id]
        stoppable[victim].close()  # a replica stops: its port refuses connections
        for turn in range(TURNS + 1, TURNS + 5):
            for i, session in enumerate(sessions):
                session.call((i + turn) % 2)
    for session in sessions:
        later = {served_by(session, t, backends) for t in range(TURNS + 1, TURNS + 5)}
        assert len(later) == 1, later  # moved once, to the same replica at both gateways
        if home[session.session_id] == victim:
            assert later != {victim}
        else:
            assert later == {home[session.session_id]}  # the others stay put
