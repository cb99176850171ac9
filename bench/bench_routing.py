"""Routing policies over a grid of fleets and traffic: warm, balanced, and what it costs.

    .venv/bin/python bench/bench_routing.py                      # the full grid, ~5 min
    .venv/bin/python bench/bench_routing.py --replicas 8 --sessions-per-replica 4 --concurrency 8
    .venv/bin/python bench/bench_routing.py --gateways 2         # two gateways, shared placements

A discrete-event simulation in modelled time that drives the gateway's own `Router`
(`proxy.routing`, its clock the simulation's) for every call, so what is measured is
the real placement code. Per cell of the grid (replicas R, sessions per replica S,
client concurrency C), R x S append-only chat sessions of mixed lengths (5 to 200
turns: 40 % 5-20, 40 % 20-80, 20 % 80-200) wait in a queue; C client threads each
take the next session and run its turns one after another (a think time of 0.5-5 s
between turns, for the tools). A session starts with a 2,000-token system prompt and
a 100-2,000-token task; each turn adds a tool result or user message (lognormal, median
300 tokens) and the model's answer (50-400 tokens). Each replica serves `--slots` calls
at once (the others wait, FIFO: "wait for a slot"), prefills the prompt tokens its
prefix cache lacks at 20k tokens/s and decodes at 50 tokens/s; its cache keeps each
session's last prompt and answer, least recently used sessions evicted past
`--cache-tokens`. The gateway knows the replica's limit (`max_inflight` = slots).

Per policy (round_robin, hash: consistent hashing with bounded loads, affine: placed by
load then sticky) and cell:

* recomputed / ideal: prompt tokens prefilled over those prefilled if every turn ran
  on the replica that served the previous one (infinite cache);
* busiest / mean: calls, and prefill tokens, of the busiest replica over the run;
  `sticky bound`: the best calls ratio any placement that never moves a session can
  reach (its sessions' turns packed longest first), the floor when sessions are few;
  `blind bound`: what such a placement gets on average when it cannot see how long a
  session will run and all start together (the mean over random equal splits);
* stickiness: turns served where the previous turn was; spills, moves;
* p99 wait for a slot, modelled seconds.

With `--gateways G`, each call reaches one of G gateways at random (each its own
`Router`); with affine routing they share placements as `proxy.routing_store` does.
`--cost` instead times one routing decision at 32 replicas and 10,000 live sessions (a
call of a placed session, and a new session's placement) and measures the table's memory
after a million finished sessions (bench/results/routing-cost.json).

Writes bench/results/routing.json (`--json`) and prints a markdown table per setting.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
import tracemalloc
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from proxy.routing import Router  # noqa: E402

POLICIES = ("round_robin", "hash", "affine")
BLOCK = 16
PREFILL_S_PER_TOKEN = 1 / 20_000
DECODE_S_PER_TOKEN = 1 / 50


def blocks(tokens: int) -> int:
    return tokens // BLOCK * BLOCK


@dataclass
class Session:
    """One session's script, fixed by the seed (the same under every policy)."""

    sid: str
    first: int
    """system prompt and task, tokens"""
    turns: list[tuple[int, int, float]]
    """per turn: new message tokens, answer tokens, think seconds before it"""


def session_lengths(n: int, rng: random.Random) -> list[int]:
    out = []
    for _ in range(n):
        u = rng.random()
        lo, hi = (5, 20) if u < 0.4 else (20, 80) if u < 0.8 else (80, 200)
        out.append(rng.randint(lo, hi))
    return out


def sessions(n: int, seed: int) -> list[Session]:
    rng = random.Random(seed)
    out = []
    for i, length in enumerate(session_lengths(n, rng)):
        turns = [
            (
                max(16, min(8000, int(rng.lognormvariate(math.log(300), 0.9)))),
                rng.randint(50, 400),
                rng.uniform(0.5, 5.0),
            )
            for _ in range(length)
        ]
        out.append(Session(f"s{seed}-{i:05d}", 2000 + rng.randint(100, 2000), turns))
    return out


def sticky_bound(lengths: list[int], replicas: int) -> float:
    """Busiest / mean calls of the best placement that never moves a session (LPT)."""
    loads = [0] * replicas
    for length in sorted(lengths, reverse=True):
        loads[loads.index(min(loads))] += length
    return max(loads) / statistics.mean(loads)


def blind_bound(lengths: list[int], replicas: int, rounds: int = 400) -> float:
    """The expected busiest / mean calls of a placement that never moves a session and
    cannot see how long one will run, when all start together: whatever it does, the
    sessions it puts together are a random draw of the lengths, so this is the mean over
    random equal splits (seeded)."""
    rng = random.Random(len(lengths) * 1_000 + replicas)
    per = len(lengths) // replicas
    order = list(lengths)
    ratios = []
    for _ in range(rounds):
        rng.shuffle(order)
        loads = [sum(order[i * per : (i + 1) * per]) for i in range(replicas)]
        ratios.append(max(loads) / statistics.mean(loads))
    return statistics.mean(ratios)


@dataclass
class SimReplica:
    slots: int
    cache_tokens: int
    busy: int = 0
    queue: deque[Callable[[], None]] = field(default_factory=deque)
    cache: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """session → tokens of its history held"""
    held: int = 0
    calls: int = 0
    prefill: int = 0

    def lookup(self, sid: str) -> int:
        return self.cache.get(sid, 0)

    def store(self, sid: str, tokens: int) -> None:
        self.held += tokens - self.cache.pop(sid, 0)
        self.cache[sid] = tokens
        while self.held > self.cache_tokens and len(self.cache) > 1:
            _, dropped = self.cache.popitem(last=False)
            self.held -= dropped


class Sim:
    """One run: a fleet, its gateways' routers, the clients; modelled time."""

    def __init__(self, args: argparse.Namespace, replicas: int, policy: str, gateways: int):
        self.now = 0.0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.urls = [f"http://r{i}:8000/v1" for i in range(replicas)]
        self.fleet = {u: SimReplica(args.slots, args.cache_tokens) for u in self.urls}
        self.routers = [
            Router(
                self.urls,
                mode=policy,
                max_inflight=args.gateway_limit if args.gateway_limit >= 0 else 2 * args.slots,
                live_s=args.live_s,
                clock=lambda: self.now,
            )
            for _ in range(gateways)
        ]
        self.shared: dict[str, str] = {}
        self.rng = random.Random(args.seed)
        self.waits: list[float] = []
        self.recomputed = self.ideal = self.turns = self.stuck = 0

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (self.now + delay, self.seq, fn))

    def run(self) -> None:
        while self.events:
            self.now, _, fn = heapq.heappop(self.events)
            fn()

    def route(self, key: str, first_call: bool, tokens: int) -> tuple[Router, str]:
        router = self.routers[self.rng.randrange(len(self.routers))]
        if router.mode == "affine" and len(self.routers) > 1:
            home = router.home_of(key)
            usable = home is not None and router.replicas[home].up(self.now)
            if not usable and not first_call and key in self.shared:
                router.adopt(key, self.shared[key])
            placement = router.place(key)
            if placement.event == "new":
                stored = self.shared.setdefault(key, placement.url)
                if stored != placement.url:  # lost the conditional create: adopt
                    router.adopt(key, stored)
            elif placement.event == "move":
                self.shared[key] = placement.url
            url = placement.url
        else:
            url = next(router.order(key))
        router.acquire(url, tokens)
        return router, url

    def call(self, s: Session, t: int, prompt: int, prev: str | None, done: Callable) -> None:
        router, url = self.route(s.sid, t == 0, prompt)
        replica = self.fleet[url]
        queued = self.now

        def start() -> None:
            self.waits.append(self.now - queued)
            replica.busy += 1
            hit = min(blocks(replica.lookup(s.sid)), blocks(prompt))
            missed = prompt - hit
            answer = s.turns[t][1]
            replica.calls += 1
            replica.prefill += missed
            self.recomputed += missed
            self.turns += 1
            self.stuck += url == prev
            service = missed * PREFILL_S_PER_TOKEN + answer * DECODE_S_PER_TOKEN

            def finish() -> None:
                replica.store(s.sid, prompt + answer)
                replica.busy -= 1
                router.release(url, prompt)
                if replica.queue:
                    replica.queue.popleft()()
                done(url, answer)

            self.at(service, finish)

        if replica.busy < replica.slots:
            start()
        else:
            replica.queue.append(start)

    def session(self, s: Session, finished: Callable[[], None]) -> None:
        state = {"t": 0, "prompt": s.first + s.turns[0][0], "prev": None}
        self.ideal += state["prompt"]

        def turn() -> None:
            self.call(s, state["t"], state["prompt"], state["prev"], answered)

        def answered(url: str, answer: int) -> None:
            state["prev"] = url
            state["t"] += 1
            if state["t"] == len(s.turns):
                finished()
                return
            new, _, think = s.turns[state["t"]]
            before = state["prompt"] + answer
            state["prompt"] = before + new
            self.ideal += state["prompt"] - blocks(before)
            self.at(think, turn)

        turn()


def simulate(
    args: argparse.Namespace, replicas: int, per: int, clients: int, policy: str, gateways: int
) -> dict[str, Any]:
    plan = sessions(replicas * per, args.seed)
    sim = Sim(args, replicas, policy, gateways)
    todo = deque(plan)

    def client() -> None:
        if todo:
            sim.session(todo.popleft(), client)

    for i in range(min(clients, len(plan))):
        sim.at(i * 0.05, client)
    sim.run()
    calls = [r.calls for r in sim.fleet.values()]
    prefill = [r.prefill for r in sim.fleet.values()]
    waits = sorted(sim.waits)
    events: dict[str, int] = {}
    for router in sim.routers:
        for name, n in router.events.items():
            events[name] = events.get(name, 0) + n
    return {
        "replicas": replicas,
        "sessions_per_replica": per,
        "concurrency": clients,
        "policy": policy,
        "gateways": gateways,
        "calls": sum(calls),
        "recomputed_over_ideal": sim.recomputed / sim.ideal,
        "calls_max_over_mean": max(calls) / statistics.mean(calls),
        "prefill_max_over_mean": max(prefill) / statistics.mean(prefill),
        "sticky_bound": sticky_bound([len(s.turns) for s in plan], replicas),
        "blind_bound": blind_bound([len(s.turns) for s in plan], replicas),
        "stickiness": sim.stuck / max(1, sim.turns - len(plan)),
        "p99_wait_s": waits[int(0.99 * (len(waits) - 1))],
        "spills": events.get("spill", 0),
        "moves": events.get("move", 0),
        "modelled_s": sim.now,
    }


def routing_cost(replicas: int = 32, live: int = 10_000, finished: int = 1_000_000) -> dict:
    """One decision's time at `replicas` and `live` sessions (best of 5 rounds); the
    table's size after `finished` sessions of one call each."""
    clock = [0.0]
    router = Router([f"http://r{i}:8000/v1" for i in range(replicas)], clock=lambda: clock[0])
    keys = [f"s-{i:06d}/0a1b2c3d" for i in range(live)]
    for key in keys:
        router.place(key)
    rng = random.Random(1)
    stay_us = new_us = math.inf
    for rnd in range(5):  # best of 5: the machine is shared
        picks = [rng.choice(keys) for _ in range(40_000)]
        started = time.perf_counter()
        for key in picks:
            clock[0] += 0.0001
            router.place(key)
        stay_us = min(stay_us, (time.perf_counter() - started) / len(picks) * 1e6)
        started = time.perf_counter()
        for i in range(4_000):
            router.place(f"new-{rnd}-{i:06d}/0a1b2c3d")
        new_us = min(new_us, (time.perf_counter() - started) / 4_000 * 1e6)
    tracemalloc.start()
    small = Router([f"http://r{i}:8000/v1" for i in range(replicas)], clock=lambda: clock[0])
    base = tracemalloc.get_traced_memory()[0]
    for i in range(finished):  # sessions of a few calls each, then silence
        clock[0] += 0.05
        small.place(f"done-{i:07d}/0a1b2c3d")
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {
        "replicas": replicas,
        "live_sessions": live,
        "decision_us_stay": stay_us,
        "decision_us_new": new_us,
        "finished_sessions": finished,
        "table_entries_after": len(small.table),
        "table_bytes_after": held,
        "bytes_per_entry": held / max(1, len(small.table)),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| R | S/R | C | policy | recomputed/ideal | busiest/mean calls (sticky, blind bound) "
        "| busiest/mean prefill | stickiness | p99 wait s | spills | moves |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gateways = "" if r["gateways"] == 1 else f" ×{r['gateways']} gw"
        lines.append(
            f"| {r['replicas']} | {r['sessions_per_replica']} | {r['concurrency']} "
            f"| {r['policy']}{gateways} "
            f"| {r['recomputed_over_ideal']:.2f} "
            f"| {r['calls_max_over_mean']:.2f} ({r['sticky_bound']:.2f}, "
            f"{r.get('blind_bound', float('nan')):.2f}) "
            f"| {r['prefill_max_over_mean']:.2f} | {r['stickiness']:.2f} "
            f"| {r['p99_wait_s']:.1f} | {r['spills']} | {r['moves']} |"
        )
    return "\n".join(lines)


def grid_tables(rows: list[dict[str, Any]]) -> str:
    """One markdown table per replica count: a row per (S, C), the policies side by side
    (round_robin / hash / affine)."""
    cells: dict[tuple[int, int, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        key = (r["replicas"], r["sessions_per_replica"], r["concurrency"])
        cells.setdefault(key, {})[r["policy"]] = r
    out = []
    for replicas in sorted({k[0] for k in cells}):
        out += [
            f"\n**{replicas} replicas** (each figure: round_robin / hash / affine)\n",
            "| S/R | C | recomputed/ideal | busiest/mean calls | busiest/mean prefill "
            "| p99 wait s | sticky bound | blind bound |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for (n, per, clients), by in sorted(cells.items()):
            if n != replicas:
                continue

            def three(name: str, fmt: str, by: dict[str, dict[str, Any]] = by) -> str:
                return " / ".join(format(by[p][name], fmt) if p in by else "-" for p in POLICIES)

            first = next(iter(by.values()))
            bound, blind = first["sticky_bound"], first.get("blind_bound", math.nan)
            out.append(
                f"| {per} | {clients} | {three('recomputed_over_ideal', '.2f')} "
                f"| {three('calls_max_over_mean', '.2f')} "
                f"| {three('prefill_max_over_mean', '.2f')} "
                f"| {three('p99_wait_s', '.1f')} | {bound:.2f} | {blind:.2f} |"
            )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[4, 8, 32])
    parser.add_argument("--sessions-per-replica", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument(
        "--concurrency", nargs="+", default=["1", "1x", "2x", "4x"],
        help="client threads: a number, or Nx for N times the replicas",
    )  # fmt: skip
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--gateways", type=int, default=1)
    parser.add_argument("--slots", type=int, default=4, help="calls one replica serves at once")
    parser.add_argument("--cache-tokens", type=int, default=1_000_000)
    parser.add_argument("--live-s", type=float, default=60.0)
    parser.add_argument(
        "--gateway-limit", type=int, default=-1,
        help="the gateways' max_inflight per replica (-1: twice the replica's slots; 0: none)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cost", action="store_true",
        help="only time routing decisions and the table's memory (bench/results/routing-cost.json)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=REPO / "bench/results/routing.json")
    parser.add_argument("--tables", type=Path, help="only print the grid tables of a results file")
    args = parser.parse_args()
    if args.tables:
        print(grid_tables(json.loads(args.tables.read_text())["rows"]))
        return
    if args.cost:
        cost = routing_cost()
        path = args.json.with_name("routing-cost.json")
        path.write_text(json.dumps(cost, indent=1) + "\n")
        print(json.dumps(cost, indent=1))
        return
    rows = []
    started = time.monotonic()
    for replicas in args.replicas:
        for per in args.sessions_per_replica:
            clients = sorted(
                {int(c[:-1]) * replicas if c.endswith("x") else int(c) for c in args.concurrency}
            )
            for c in clients:
                for policy in args.policies:
                    row = simulate(args, replicas, per, c, policy, args.gateways)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    out: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "rows": rows,
        "wall_s": time.monotonic() - started,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(table(rows))
    print(grid_tables(rows))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
