"""Prefix-cache benchmark: affine and hash routing against round-robin, same sessions.

    .venv/bin/python bench/bench_affinity.py                 # simulation, 8 and 32 replicas
    .venv/bin/python bench/bench_affinity.py --vllm          # + two real vLLM CPU replicas
    .venv/bin/python bench/bench_affinity.py --replicas 8 --sessions-per-replica 8

(a) Simulation. Replicas are fake vLLM servers in this process (aiohttp, one
port each), every one with a model of vLLM's prefix cache: 16-token blocks,
the prompt's full blocks and the sampled ones kept, least-recently-used blocks
evicted past `--cache-tokens` per replica. The gateway's own upstream client
(`proxy.upstream.UpstreamClient`, its `Router` and `route_key`) sends every
call, so what is measured is the gateway's real placement. Sessions are
append-only agent sessions of `--turns` turns: a task's system prompt and
statement shared by the `--group` sessions of a GRPO group, then per turn a
tool result or user message (lognormal, median 600 tokens) and an answer
(50-400 tokens). A message's tokens are a name and a count (`"m123:640"`), so
requests stay small while the caches see every block. Replicas answer after a
modelled service time (prefill of the missed tokens at 20k tokens/s, decode
at 50 tokens/s, times `--time-scale`); sessions think 0.5-5 s (scaled)
between turns. For each routing mode, at each replica count, the same seeded
sessions run concurrently:

* hit rate: prompt tokens found in the serving replica's cache over the
  cacheable ones (those already computed on some replica: what one infinite
  shared cache would have hit);
* prefill tokens computed per session (prompt tokens that missed);
* load: calls per replica, max over mean; and the peak in-flight calls on
  one replica over the mean at that moment, against ceil(1.25 x mean);
* modelled session time (the sum of its calls' modelled service times, not
  scaled) and the wall time of the run;
* with `--kill-at F`, one more run per mode where a replica is stopped once a
  fraction F of the calls are done: calls that failed (the caller retries them
  once, as an SDK does) and the hit rate after the stop.

(b) `--vllm`: two real vLLM CPU servers of the tiny model
(`.polar/models/tiny-qwen3`, `.venv-vllm`), prefix caching on, 32-token
blocks (the CPU backend's), `--num-gpu-blocks-override` to give each a cache
of `--vllm-cache-tokens` (16k), less than all sessions' histories together,
the same client, short sessions that fit 4,096 tokens;
hit rate from each server's own `/metrics` (`vllm:prefix_cache_hits` over
`vllm:prefix_cache_queries`, deltas over the run), prefill tokens per session
(`usage.prompt_tokens` minus `usage.prompt_tokens_details.cached_tokens`, and
queries minus hits of `/metrics` over the sessions) and session wall time.

Writes bench/results/affinity.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from polar.settings import Settings  # noqa: E402
from proxy.routing import route_key  # noqa: E402
from proxy.upstream import UpstreamClient  # noqa: E402
from proxy.upstream_answers import UpstreamError  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

BLOCK = 16
VLLM_BLOCK = 32  # the CPU attention backend's block sizes are multiples of 32
MODES = ("round_robin", "hash", "affine")
PREFILL_S_PER_TOKEN = 1 / 20_000
DECODE_S_PER_TOKEN = 1 / 50
MESSAGE = re.compile(r"^(\S+):(\d+)$")


# --------------------------------------------------------------------------- cache model


class PrefixCache:
    """vLLM's prefix cache, modelled: full blocks named by their content and position,
    least recently used evicted past `capacity` blocks."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[tuple[str, int], None] = OrderedDict()

    def lookup(self, blocks: list[tuple[str, int]]) -> int:
        """Leading blocks found (touched as used)."""
        hit = 0
        for b in blocks:
            if b not in self.blocks:
                break
            self.blocks.move_to_end(b)
            hit += 1
        return hit

    def insert(self, blocks: list[tuple[str, int]]) -> None:
        for b in blocks:
            self.blocks[b] = None
            self.blocks.move_to_end(b)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


def message_tokens(message: dict[str, Any]) -> int:
    match = MESSAGE.match(str(message.get("content")))
    if match is None:
        raise ValueError(f"not a modelled message: {message.get('content')!r}")
    return int(match[2])


def message_blocks(messages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The blocks of a prompt: each message's name and block index. Names are unique to
    a message and a message's position in an append-only session never changes, so a
    block's name stands for its chained hash (everything before it)."""
    out: list[tuple[str, int]] = []
    for m in messages:
        match = MESSAGE.match(str(m.get("content")))
        if match is None:
            raise ValueError(f"not a modelled message: {m.get('content')!r}")
        name, tokens = match[1], int(match[2])
        out.extend((name, j) for j in range(tokens // BLOCK))
    return out


@dataclass
class ReplicaStats:
    calls: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    cacheable_tokens: int = 0


@dataclass
class Fleet:
    """N modelled vLLM replicas, one aiohttp server each, sharing this event loop."""

    capacity_blocks: int
    time_scale: float
    seed: int
    urls: list[str] = field(default_factory=list)
    caches: list[PrefixCache] = field(default_factory=list)
    stats: list[ReplicaStats] = field(default_factory=list)
    inflight: list[int] = field(default_factory=list)
    seen: set[tuple[str, int]] = field(default_factory=set)
    """every block computed anywhere: the infinite shared cache"""
    runners: list[web.AppRunner] = field(default_factory=list)
    by_session: dict[str, list[float]] = field(default_factory=dict)
    """session → [prompt tokens, missed tokens, modelled seconds]"""

    async def start(self, n: int) -> None:
        for i in range(n):
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._handler(i))
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0)  # stop = crash
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self.runners.append(runner)
            self.urls.append(f"http://127.0.0.1:{port}/v1")
            self.caches.append(PrefixCache(self.capacity_blocks))
            self.stats.append(ReplicaStats())
            self.inflight.append(0)

    async def stop(self, i: int) -> None:
        """Kill replica `i`: its listener and every open connection close."""
        await self.runners[i].cleanup()

    async def close(self) -> None:
        for runner in self.runners:
            await runner.cleanup()

    def _handler(self, i: int) -> Any:
        async def chat(request: web.Request) -> web.Response:
            body = await request.json()
            key = request.headers.get("x-session-id", "")
            session = key.split("/", 1)[0]
            self.inflight[i] += 1
            try:
                return await self._serve(i, body, session)
            finally:
                self.inflight[i] -= 1

        return chat

    async def _serve(self, i: int, body: dict[str, Any], session: str) -> web.Response:
        stats, cache = self.stats[i], self.caches[i]
        blocks = message_blocks(body["messages"])
        hit = cache.lookup(blocks)
        cacheable = 0
        for b in blocks:
            if b not in self.seen:
                break
            cacheable += 1
        prompt = sum(message_tokens(m) for m in body["messages"])
        # the answer: its length from the request's own seed (the same in every mode)
        name = f"{session}-{body['messages'][-1]['content'].split(':')[0]}-a"
        rng = random.Random(f"{self.seed}/{name}")
        out = BLOCK * rng.randint(50 // BLOCK, 400 // BLOCK)
        missed = prompt - hit * BLOCK
        modelled = missed * PREFILL_S_PER_TOKEN + out * DECODE_S_PER_TOKEN
        stats.calls += 1
        stats.prompt_tokens += prompt
        stats.hit_tokens += hit * BLOCK
        stats.cacheable_tokens += cacheable * BLOCK
        mine = self.by_session.setdefault(session, [0.0, 0.0, 0.0])
        mine[0] += prompt
        mine[1] += missed
        mine[2] += modelled
        answer_blocks = [(name, j) for j in range(out // BLOCK)]
        cache.insert(blocks + answer_blocks)
        self.seen.update(blocks)
        self.seen.update(answer_blocks)
        await asyncio.sleep(modelled * self.time_scale)
        return web.json_response(answer(body, f"{name}:{out}", prompt, out, hit * BLOCK))


def answer(body: dict[str, Any], content: str, prompt: int, out: int, cached: int) -> Any:
    """A vLLM-shaped chat.completion (no token ids: the model has none)."""
    return {
        "id": "chatcmpl-sim",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": out,
            "total_tokens": prompt + out,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


# --------------------------------------------------------------------------- sessions


def tokens(rng: random.Random, median: int, lo: int, hi: int) -> int:
    """A lognormal token count, whole blocks."""
    n = int(rng.lognormvariate(math.log(median), 0.8))
    return BLOCK * max(lo // BLOCK, min(hi // BLOCK, n // BLOCK))


@dataclass
class Plan:
    """One session's messages, fixed by the seed: the same in every mode."""

    session_id: str
    first: list[dict[str, str]]
    turns: list[tuple[str, float]]
    """per turn: the new user / tool message, and the think time before it"""


def plans(n_sessions: int, turns: int, group: int, seed: int) -> list[Plan]:
    out = []
    for s in range(n_sessions):
        task = s // group
        rng = random.Random(f"{seed}/{s}")
        first = [
            {"role": "system", "content": f"sys{task % 4}:{BLOCK * 128}"},
            {"role": "user", "content": f"task{task}:{tokens(rng, 500, 128, 2000)}"},
        ]
        steps = [
            (f"s{s}t{t}:{tokens(rng, 600, 32, 8000)}", rng.uniform(0.5, 5.0)) for t in range(turns)
        ]
        out.append(Plan(f"s{seed}-{s:04d}", first, steps))
    return out


async def run_session(
    client: UpstreamClient, plan: Plan, time_scale: float, failures: list[str]
) -> float:
    messages: list[dict[str, str]] = list(plan.first)
    started = time.monotonic()
    for t, (content, think_s) in enumerate(plan.turns):
        if t:
            await asyncio.sleep(think_s * time_scale)
            messages.append({"role": "user", "content": content})
        request = client.normalize({"model": "policy", "messages": list(messages)})
        key = route_key(plan.session_id, messages)
        for attempt in range(2):  # an SDK retries a failed call once
            try:
                reply = await client.complete(request, key)
                break
            except UpstreamError as exc:
                failures.append(f"{plan.session_id} turn {t} try {attempt}: {exc.message}")
        else:
            raise RuntimeError(f"{plan.session_id} turn {t}: both tries failed")
        messages.append(
            {"role": "assistant", "content": reply.body["choices"][0]["message"]["content"]}
        )
    return time.monotonic() - started


@dataclass
class LoadWatch:
    """In-flight calls per replica as the gateway's router counts them, at each placement."""

    placements: int = 0
    over_bound: int = 0
    """placements that left a replica above ceil(1.25 x mean), the mean counting the call"""
    busy_ratio: float = 0.0
    """the highest max/mean in-flight seen while at least 2 calls per replica were in flight"""


def watch_load(client: UpstreamClient) -> LoadWatch:
    watch = LoadWatch()
    router = client.router
    acquire = router.acquire

    def counted(url: str) -> None:
        acquire(url)
        loads = [r.inflight for r in router.replicas.values() if r.up(router.clock())]
        if not loads:
            return
        mean = sum(loads) / len(loads)
        watch.placements += 1
        if router.replicas[url].inflight > math.ceil(1.25 * mean):
            watch.over_bound += 1
        if mean >= 2:
            watch.busy_ratio = max(watch.busy_ratio, max(loads) / mean)

    router.acquire = counted  # type: ignore[method-assign]
    return watch


def settings_for(urls: list[str], mode: str) -> Settings:
    return Settings(
        upstream_urls=",".join(urls),
        upstream_routing=mode,
        upstream_health_interval_s=0,
        upstream_model="policy",
    )


async def simulate(
    replicas: int,
    mode: str,
    args: argparse.Namespace,
    kill_at: float | None = None,
) -> dict[str, Any]:
    fleet = Fleet(args.cache_tokens // BLOCK, args.time_scale, args.seed)
    await fleet.start(replicas)
    client = UpstreamClient(settings_for(fleet.urls, mode))
    load = watch_load(client)
    session_plans = plans(replicas * args.sessions_per_replica, args.turns, args.group, args.seed)
    total_calls = len(session_plans) * args.turns
    failures: list[str] = []
    after_kill: dict[str, Any] = {}
    started = time.monotonic()

    async def killer() -> None:
        assert kill_at is not None
        while sum(s.calls for s in fleet.stats) < kill_at * total_calls:
            await asyncio.sleep(0.01)
        before = [asdict(s) for s in fleet.stats]
        await fleet.stop(0)
        after_kill["calls_done"] = sum(s["calls"] for s in before)
        after_kill["before"] = before

    try:
        kill = asyncio.ensure_future(killer()) if kill_at is not None else None
        walls = await asyncio.gather(
            *(run_session(client, p, args.time_scale, failures) for p in session_plans)
        )
        if kill is not None:
            await kill
    finally:
        await client.aclose()
        await fleet.close()
    wall = time.monotonic() - started
    calls = [s.calls for s in fleet.stats]
    prefill = [s.prompt_tokens - s.hit_tokens for s in fleet.stats]
    hit = sum(s.hit_tokens for s in fleet.stats)
    cacheable = sum(s.cacheable_tokens for s in fleet.stats)
    prompt = sum(s.prompt_tokens for s in fleet.stats)
    per_session = list(fleet.by_session.values())
    result: dict[str, Any] = {
        "replicas": replicas,
        "mode": mode,
        "sessions": len(session_plans),
        "calls": sum(calls),
        "hit_rate": hit / cacheable if cacheable else 0.0,
        "hit_of_prompt": hit / prompt if prompt else 0.0,
        "prefill_tokens_per_session": statistics.mean(p[1] for p in per_session),
        "prompt_tokens_per_session": statistics.mean(p[0] for p in per_session),
        "calls_max_over_mean": max(calls) / statistics.mean(calls),
        "prefill_max_over_mean": max(prefill) / statistics.mean(prefill),
        "placements_over_bound": load.over_bound,
        "placements": load.placements,
        "busy_inflight_max_over_mean": load.busy_ratio,
        "modelled_session_s": statistics.mean(p[2] for p in per_session),
        "session_wall_s": statistics.mean(walls),
        "run_wall_s": wall,
        "failed_tries": len(failures),
    }
    if kill_at is not None and after_kill:
        before = after_kill["before"]
        d_hit = hit - sum(s["hit_tokens"] for s in before)
        d_cacheable = cacheable - sum(s["cacheable_tokens"] for s in before)
        result["killed_at_call"] = after_kill["calls_done"]
        result["hit_rate_after_kill"] = d_hit / d_cacheable if d_cacheable else 0.0
        result["failures"] = failures[:10]
    return result


# --------------------------------------------------------------------------- real vLLM


VLLM_METRIC = re.compile(r"^(vllm:prefix_cache_(?:hits|queries))_total\{[^}]*\} ([0-9.e+]+)$", re.M)


async def vllm_counters(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    root = url.removesuffix("/v1")
    async with session.get(f"{root}/metrics") as response:
        text = await response.text()
    out: dict[str, float] = {}
    for name, value in VLLM_METRIC.findall(text):
        out[name] = out.get(name, 0.0) + float(value)
    return out


@contextlib.contextmanager
def vllm_servers(n: int, blocks: int) -> Any:
    """`n` vLLM CPU servers of the tiny model, each with `blocks` KV blocks; their bases."""
    model = REPO / ".polar/models/tiny-qwen3"
    python = REPO / ".venv-vllm/bin/python"
    if not model.is_dir() or not python.exists():
        raise SystemExit(f"--vllm needs {model} and {python} (infra/setup.sh makes them)")
    procs, urls = [], []
    logs = Path(tempfile.mkdtemp(prefix="bench-affinity-"))
    env = os.environ | {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
    }
    try:
        for i in range(n):
            port = free_port()
            argv = [
                str(python), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(model), "--served-model-name", "policy",
                "--host", "127.0.0.1", "--port", str(port),
                "--max-model-len", "4096", "--dtype", "float32",
                "--gpu-memory-utilization", "0.2",
                "--block-size", str(VLLM_BLOCK),
                "--num-gpu-blocks-override", str(blocks),
                "--enable-prefix-caching",
                "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
            ]  # fmt: skip
            log = open(logs / f"vllm-{i}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}/v1")
        deadline = time.monotonic() + 1800  # a loaded 2-core machine takes 10+ min
        for url, proc in zip(urls, procs, strict=True):
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"vLLM exited ({proc.returncode}); logs in {logs}")
                try:
                    import httpx

                    if httpx.get(url.removesuffix("/v1") + "/health", timeout=2).status_code == 200:
                        break
                except Exception:  # noqa: BLE001 - not up yet
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"vLLM did not start in 1800 s; logs in {logs}")
                time.sleep(1)
        print(f"vLLM servers up: {urls} (logs in {logs})", file=sys.stderr)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "file",
    "test",
    "bug",
    "fix",
]


async def vllm_session(
    client: UpstreamClient, session_id: str, turns: int, seed: int
) -> tuple[int, int, float]:
    """One append-only session against vLLM: prompt tokens, prefill tokens, wall seconds."""
    rng = random.Random(f"{seed}/{session_id}")
    system = "You are a coding agent. " + " ".join(rng.choice(WORDS) for _ in range(60))
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    prompt = computed = 0
    started = time.monotonic()
    for _ in range(turns):
        messages.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(24))})
        request = client.normalize(
            {"model": "policy", "messages": list(messages), "max_tokens": 12, "temperature": 1.0}
        )
        reply = await client.complete(request, route_key(session_id, messages))
        usage = reply.body["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        prompt += usage["prompt_tokens"]
        computed += usage["prompt_tokens"] - cached
        messages.append(
            {"role": "assistant", "content": reply.body["choices"][0]["message"]["content"] or ""}
        )
    return prompt, computed, time.monotonic() - started


async def vllm_run(urls: list[str], mode: str, args: argparse.Namespace) -> dict[str, Any]:
    client = UpstreamClient(settings_for(urls, mode))
    async with aiohttp.ClientSession() as http:
        before = [await vllm_counters(http, u) for u in urls]
        seed = f"{args.seed}-{mode}"  # fresh session contents per mode: no reuse across runs
        runs = await asyncio.gather(
            *(
                vllm_session(client, f"v{seed}-{s}", args.vllm_turns, args.seed)
                for s in range(args.vllm_sessions)
            )
        )
        after = [await vllm_counters(http, u) for u in urls]
    await client.aclose()
    hits = sum(
        a.get("vllm:prefix_cache_hits", 0) - b.get("vllm:prefix_cache_hits", 0)
        for a, b in zip(after, before, strict=True)
    )
    queries = sum(
        a.get("vllm:prefix_cache_queries", 0) - b.get("vllm:prefix_cache_queries", 0)
        for a, b in zip(after, before, strict=True)
    )
    return {
        "mode": mode,
        "replicas": len(urls),
        "sessions": args.vllm_sessions,
        "turns": args.vllm_turns,
        "metrics_hit_rate": hits / queries if queries else 0.0,
        "metrics_hits": hits,
        "metrics_queries": queries,
        "prompt_tokens_per_session": statistics.mean(r[0] for r in runs),
        "prefill_tokens_per_session": statistics.mean(r[1] for r in runs),
        "metrics_prefill_tokens_per_session": (queries - hits) / args.vllm_sessions,
        "session_wall_s": statistics.mean(r[2] for r in runs),
    }


# --------------------------------------------------------------------------- report


def sim_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| replicas | routing | hit rate (cacheable) | prefill tokens / session "
        "| calls max/mean | prefill max/mean | in-flight max/mean (busy) | over ceil(1.25·mean) "
        "| modelled session s | failed tries | hit rate after kill |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kill = r.get("hit_rate_after_kill")
        lines.append(
            f"| {r['replicas']}{' (kill)' if 'killed_at_call' in r else ''} | {r['mode']} "
            f"| {r['hit_rate']:.1%} | {r['prefill_tokens_per_session']:,.0f} "
            f"| {r['calls_max_over_mean']:.2f} | {r['prefill_max_over_mean']:.2f} "
            f"| {r['busy_inflight_max_over_mean']:.2f} "
            f"| {r['placements_over_bound']}/{r['placements']} | {r['modelled_session_s']:.1f} "
            f"| {r['failed_tries']} | {'' if kill is None else f'{kill:.1%}'} |"
        )
    return "\n".join(lines)


def vllm_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| routing | /metrics hit rate | prompt tokens / session | prefill tokens / session "
        "(usage) | prefill tokens / session (/metrics) | session wall s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['metrics_hit_rate']:.1%} ({r['metrics_hits']:,.0f}/"
            f"{r['metrics_queries']:,.0f}) | {r['prompt_tokens_per_session']:,.0f} "
            f"| {r['prefill_tokens_per_session']:,.0f} "
            f"| {r['metrics_prefill_tokens_per_session']:,.0f} | {r['session_wall_s']:.1f} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"args": vars(args), "simulation": [], "vllm": []}
    for n in [] if args.no_sim else args.replicas:
        for mode in MODES:
            row = await simulate(n, mode, args)
            print(json.dumps(row), file=sys.stderr)
            out["simulation"].append(row)
        if args.kill_at:
            for mode in MODES:
                row = await simulate(n, mode, args, kill_at=args.kill_at)
                print(json.dumps(row), file=sys.stderr)
                out["simulation"].append(row)
    if args.vllm:
        with vllm_servers(2, args.vllm_cache_tokens // VLLM_BLOCK) as urls:
            for mode in MODES:
                row = await vllm_run(urls, mode, args)
                print(json.dumps(row), file=sys.stderr)
                out["vllm"].append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--sessions-per-replica", type=int, default=4)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--group", type=int, default=8, help="sessions sharing a task prompt")
    parser.add_argument(
        "--cache-tokens", type=int, default=400_000, help="prefix cache of one replica, tokens"
    )
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--kill-at", type=float, default=0.5, help="0: no kill run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vllm", action="store_true", help="also two real vLLM CPU replicas")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulation")
    parser.add_argument("--vllm-sessions", type=int, default=8)
    parser.add_argument("--vllm-turns", type=int, default=40)
    parser.add_argument(
        "--vllm-cache-tokens",
        type=int,
        default=16384,
        help="KV cache of each vLLM replica, tokens: less than all sessions' histories",
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench/results/affinity.json")
    args = parser.parse_args()
    out = asyncio.run(main_async(args))
    out["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in out["args"].items()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(sim_table(out["simulation"]))
    if out["vllm"]:
        print()
        print(vllm_table(out["vllm"]))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
