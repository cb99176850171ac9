"""Routing policies through the real gateway: the official `openai` SDK, client threads,
scripted replicas that log every prompt's token ids.

    .venv/bin/python bench/bench_routing_gateway.py                       # small grid
    .venv/bin/python bench/bench_routing_gateway.py --shape 4x3x10 --shape 8x2x20 \\
        --fixed-turns --concurrency 8                                     # the issue's probe
    .venv/bin/python bench/bench_routing_gateway.py --gateways 2          # two gateways

Every part is its own process on 127.0.0.1: SeaweedFS (every call is recorded), R
scripted vLLM-shaped replicas (one process, `--serve-replicas`), and one or more
`polar gateway` processes (`python -m app.cli gateway`) started afresh for each policy
(round_robin, hash, affine) with `POLAR_UPSTREAM_ROUTING`, `POLAR_UPSTREAM_MAX_INFLIGHT`
= 2 x the replica's slots. A replica tokenizes each chat message as a role token, one
token per word and an end token, the prompt ending in the assistant's role token (a
generation prompt), so a session's next prompt starts with its last prompt and answer,
as with a real chat template. It serves `--slots` calls at once (the rest wait for a
slot), keeps a block prefix cache (16-token blocks, chained), sleeps the modelled
service time (prefill of the missed tokens at 20k tokens/s, decode at 50 tokens/s,
times `--time-scale`) and logs each call's prompt and answer token ids with its wait.

The client runs the R x S sessions of a cell (`--shape RxS`, session lengths mixed
5-200 turns: 40 % 5-20, 40 % 20-80, 20 % 80-200, or `--fixed-turns T`) on C threads
(`--concurrency`: a number or Nx for N x R), each thread one session after another
with the `openai` SDK, append-only (a 20-60 word user or tool message per turn, the
replica's answer appended), with `--gateways G` each call to a random gateway. The
figures come from the replicas' logs, replayed: recomputed / ideal prefill (ideal:
each turn on the replica that served the one before), busiest / mean calls and prefill
tokens, stickiness, p99 wait for a slot.

Writes bench/results/routing-gateway.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.devstack import DevStack, Service, http_ready  # noqa: E402
from app.devstack.services import gateway_service  # noqa: E402
from bench.bench_routing import session_lengths, sticky_bound  # noqa: E402
from bench.fake_vllm import vllm_answer  # noqa: E402
from polar.session_keys import SessionIdentity, mint_session_key  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

POLICIES = ("round_robin", "hash", "affine")
BLOCK = 16
ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
END = 5
PREFILL_S_PER_TOKEN = 1 / 20_000
DECODE_S_PER_TOKEN = 1 / 50
WORDS = [f"w{i}" for i in range(5000)]


# --------------------------------------------------------------------------- tokens


def word_id(word: str) -> int:
    return 100 + zlib.crc32(word.encode()) % 30_000


def prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    """The prompt's token ids: per message its role, its words, an end token; then the
    assistant's role (the generation prompt)."""
    out: list[int] = []
    for m in messages:
        out.append(ROLES.get(m.get("role", "user"), 2))
        out.extend(word_id(w) for w in str(m.get("content") or "").split())
        out.append(END)
    out.append(ROLES["assistant"])
    return out


def answer_words(key: str, turn: int) -> list[str]:
    rng = random.Random(f"{key}/{turn}")
    return [rng.choice(WORDS) for _ in range(rng.randint(20, 60))]


class BlockCache:
    """vLLM's prefix cache: chained hashes of full blocks, least recently used evicted."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens // BLOCK
        self.blocks: OrderedDict[int, None] = OrderedDict()

    @staticmethod
    def chain(ids: list[int]) -> list[int]:
        out, h = [], 0
        for i in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
            h = hash((h, tuple(ids[i : i + BLOCK])))
            out.append(h)
        return out

    def lookup(self, ids: list[int]) -> int:
        """Tokens of the leading full blocks found (touched)."""
        hit = 0
        for h in self.chain(ids):
            if h not in self.blocks:
                break
            self.blocks.move_to_end(h)
            hit += BLOCK
        return hit

    def insert(self, ids: list[int]) -> None:
        for h in self.chain(ids):
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


# --------------------------------------------------------------------------- replicas


def serve_replicas(ports: list[int], log_dir: Path, args: argparse.Namespace) -> None:
    """R scripted replicas in this process, one aiohttp server each."""
    from aiohttp import web

    async def main() -> None:
        for i, port in enumerate(ports):
            slots = asyncio.Semaphore(args.slots)
            cache = BlockCache(args.cache_tokens)
            log = (log_dir / f"replica-{i}.jsonl").open("w", buffering=1)  # each line whole
            counter = [0]

            async def chat(request: web.Request, slots=slots, cache=cache, log=log, n=counter):
                body = await request.json()
                key = request.headers.get("x-session-id", "")
                ids = prompt_ids(body["messages"])
                turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
                words = answer_words(key.split("/")[0], turn)
                out = [word_id(w) for w in words] + [END]
                queued = time.monotonic()
                async with slots:
                    wait = time.monotonic() - queued
                    hit = cache.lookup(ids)
                    cache.insert(ids + out)
                    service = (len(ids) - hit) * PREFILL_S_PER_TOKEN + len(out) * (
                        DECODE_S_PER_TOKEN
                    )
                    await asyncio.sleep(service * args.time_scale)
                log.write(
                    json.dumps({"key": key, "at": queued, "wait": wait, "prompt": ids, "out": out})
                    + "\n"
                )
                n[0] += 1
                answer = vllm_answer(
                    body, n[0], prompt_ids=ids, response_ids=out, text=" ".join(words)
                )
                return web.json_response(answer)

            async def health(_: web.Request) -> web.Response:
                return web.json_response({"object": "list", "data": [{"id": "policy"}]})

            app = web.Application(client_max_size=256 * 1024 * 1024)
            app.router.add_post("/v1/chat/completions", chat)
            app.router.add_get("/health", health)
            app.router.add_get("/v1/models", health)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    asyncio.run(main())


# --------------------------------------------------------------------------- the run


@dataclasses.dataclass
class Cell:
    replicas: int
    per_replica: int
    clients: int
    turns: list[int]


class Stack:
    """SeaweedFS for the whole run; replicas and gateways per policy."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        s3 = free_port(8)
        self.settings = Settings(
            data_dir=tmp,
            s3_endpoint=f"http://127.0.0.1:{s3}",
            s3_bucket="polar-bench-routing",
            session_secret=secrets.token_hex(16),
            model_dir=None,
            upstream_model="policy",
        )
        self.stack = DevStack(self.settings, with_model=False, die_with_parent=True)
        self.settings = self.stack.settings
        self.started: list[str] = []

    def start(self, service: Service) -> None:
        self.started.append(service.name)
        self.stack.start(service, log=lambda line: print(f"  {line}", file=sys.stderr))

    def stop(self, name: str) -> None:
        self.stack.stop(name, quiet=True, grace_s=2)
        self.started.remove(name)

    def close(self) -> None:
        for name in reversed(list(self.started)):
            self.stop(name)

    def replicas(self, n: int, log_dir: Path, args: argparse.Namespace) -> list[str]:
        ports = [free_port() for _ in range(n)]
        argv = [
            sys.executable, str(Path(__file__).resolve()), "--serve-replicas",
            ",".join(map(str, ports)), "--log-dir", str(log_dir),
            "--slots", str(args.slots), "--time-scale", str(args.time_scale),
            "--cache-tokens", str(args.cache_tokens),
        ]  # fmt: skip
        ready = http_ready(f"http://127.0.0.1:{ports[-1]}/health")
        self.start(Service("replicas", argv, ready, start_timeout_s=60))
        return [f"http://127.0.0.1:{p}/v1" for p in ports]

    def gateways(self, n: int, urls: list[str], policy: str, args: argparse.Namespace) -> list[str]:
        out = []
        for i in range(n):
            settings = self.settings.model_copy(
                update={
                    "gateway_host": "127.0.0.1",
                    "gateway_port": free_port(),
                    "admin_port": free_port(),
                    "gateway_url": None,
                    "upstream_urls": ",".join(urls),
                    "upstream_routing": policy,
                    "upstream_max_inflight": 2 * args.slots,
                }
            )
            service = gateway_service(settings, settings.as_env())
            self.start(dataclasses.replace(service, name=f"gateway-{i}"))
            out.append(f"{settings.gateway_base_url}/v1")
        return out


def run_session(
    gateways: list[str], secret: str, sid: str, turns: int, args: argparse.Namespace
) -> None:
    from openai import OpenAI

    identity = SessionIdentity(sid, "task-routing", 1, None, None)
    key = mint_session_key(identity, secret)
    clients = [OpenAI(base_url=g, api_key=key, max_retries=2, timeout=600) for g in gateways]
    rng = random.Random(sid)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": " ".join(rng.choice(WORDS) for _ in range(200))},
    ]
    for t in range(turns):
        if t:
            time.sleep(rng.uniform(0.5, 5.0) * args.time_scale)
        words = rng.randint(20, 60)
        messages.append(
            {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(words))}
        )
        answer = rng.choice(clients).chat.completions.create(model="policy", messages=messages)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})


def analyse(log_dir: Path, replicas: int, cache_tokens: int) -> dict[str, Any]:
    """The run's figures, from the replicas' logs replayed in arrival order."""
    calls: list[tuple[float, int, dict[str, Any]]] = []
    for i in range(replicas):
        for line in (log_dir / f"replica-{i}.jsonl").read_text().splitlines():
            row = json.loads(line)
            calls.append((row["at"] + row["wait"], i, row))
    calls.sort(key=lambda c: c[0])
    caches = [BlockCache(cache_tokens) for _ in range(replicas)]
    per_calls, per_prefill = [0] * replicas, [0] * replicas
    last: dict[str, tuple[int, int]] = {}
    recomputed = ideal = stuck = follow = 0
    waits = []
    for _, i, row in calls:
        ids, out = row["prompt"], row["out"]
        missed = len(ids) - caches[i].lookup(ids)
        caches[i].insert(ids + out)
        session = row["key"].split("/")[0]
        previous = last.get(session)
        ideal += len(ids) - (previous[1] // BLOCK * BLOCK if previous else 0)
        if previous is not None:
            follow += 1
            stuck += previous[0] == i
        last[session] = (i, len(ids) + len(out))
        recomputed += missed
        per_calls[i] += 1
        per_prefill[i] += missed
        waits.append(row["wait"])
    waits.sort()
    return {
        "calls": len(calls),
        "recomputed_over_ideal": recomputed / ideal,
        "calls_max_over_mean": max(per_calls) / statistics.mean(per_calls),
        "prefill_max_over_mean": max(per_prefill) / statistics.mean(per_prefill),
        "stickiness": stuck / max(1, follow),
        "p99_wait_s": waits[int(0.99 * (len(waits) - 1))] / 1,
    }


def run_cell(stack: Stack, cell: Cell, policy: str, args: argparse.Namespace) -> dict[str, Any]:
    log_dir = Path(tempfile.mkdtemp(prefix=f"routing-{policy}-", dir=stack.tmp))
    urls = stack.replicas(cell.replicas, log_dir, args)
    gateways = stack.gateways(args.gateways, urls, policy, args)
    secret = stack.settings.session_secret or ""
    todo = deque(enumerate(cell.turns))
    lock = threading.Lock()
    errors: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, turns = todo.popleft()
            try:
                run_session(gateways, secret, f"s-{policy[:2]}-{i:05d}", turns, args)
            except Exception as exc:  # noqa: BLE001 - counted, shown
                errors.append(f"session {i}: {type(exc).__name__}: {exc}")

    started = time.monotonic()
    with ThreadPoolExecutor(cell.clients) as pool:
        for _ in range(cell.clients):
            pool.submit(worker)
    wall = time.monotonic() - started
    for i in range(args.gateways):
        stack.stop(f"gateway-{i}")
    stack.stop("replicas")
    row = {
        "replicas": cell.replicas,
        "sessions": len(cell.turns),
        "concurrency": cell.clients,
        "policy": policy,
        "gateways": args.gateways,
        "sticky_bound": sticky_bound(cell.turns, cell.replicas),
        "wall_s": wall,
        "errors": errors[:5],
    }
    row.update(analyse(log_dir, cell.replicas, args.cache_tokens))
    row["p99_wait_s"] /= args.time_scale  # modelled seconds
    return row


def cells(args: argparse.Namespace) -> list[Cell]:
    out = []
    for shape in args.shape:
        replicas, per = (int(x) for x in shape.lower().split("x")[:2])
        n = replicas * per
        rng = random.Random(args.seed)
        turns = [args.fixed_turns] * n if args.fixed_turns else session_lengths(n, rng)
        for c in args.concurrency:
            clients = int(c[:-1]) * replicas if c.endswith("x") else int(c)
            out.append(Cell(replicas, per, clients, turns))
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| R | sessions | C | policy | recomputed/ideal | busiest/mean calls (sticky bound) "
        "| busiest/mean prefill | stickiness | p99 wait s | calls | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gateways = "" if r["gateways"] == 1 else f" ×{r['gateways']} gw"
        lines.append(
            f"| {r['replicas']} | {r['sessions']} | {r['concurrency']} | {r['policy']}{gateways} "
            f"| {r['recomputed_over_ideal']:.2f} "
            f"| {r['calls_max_over_mean']:.2f} ({r['sticky_bound']:.2f}) "
            f"| {r['prefill_max_over_mean']:.2f} | {r['stickiness']:.2f} "
            f"| {r['p99_wait_s']:.1f} | {r['calls']} | {r['wall_s']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", help="RxS: replicas x sessions per replica")
    parser.add_argument("--concurrency", nargs="+", default=["1x", "4x"])
    parser.add_argument("--fixed-turns", type=int, default=0)
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--gateways", type=int, default=1)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--cache-tokens", type=int, default=1_000_000)
    parser.add_argument("--time-scale", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=REPO / "bench/results/routing-gateway.json")
    parser.add_argument("--serve-replicas", help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_replicas:
        serve_replicas([int(p) for p in args.serve_replicas.split(",")], args.log_dir, args)
        return
    args.shape = args.shape or ["4x2", "4x8", "8x4"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        stack = Stack(Path(tmp))
        try:
            stack.start(stack.stack.seaweedfs())
            Storage(stack.settings).ensure_bucket()
            for cell in cells(args):
                for policy in args.policies:
                    row = run_cell(stack, cell, policy, args)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
        finally:
            stack.close()
    out = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    out["rows"] = rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(table(rows))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
