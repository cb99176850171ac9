"""Scheduling benchmark: backend utilisation, Temporal overhead, 200 concurrent sessions.

    .venv/bin/python bench/bench_scheduling.py                  # all three, ~5 min on 2 cores
    .venv/bin/python bench/bench_scheduling.py --utilisation    # (a) only
    .venv/bin/python bench/bench_scheduling.py --overhead --throughput --sessions-200 200

Every part is a real process on 127.0.0.1, started here and stopped at the end
(they also die with this script): the Temporal dev server, SeaweedFS, the
Polar gateway, a fake inference backend (this script with `--serve-backend`)
and `polar worker` processes, one per configuration. Sessions are real Polar
sessions (RolloutTask + Session workflows, local runtimes, `command`
harnesses calling the gateway with curl, every call recorded in S3).

(a) Utilisation. The fake backend models an inference server with `--slots`
slots: each call holds one slot for `--latency` seconds (calls beyond the
slots queue), and it keeps its own accounting of busy slot-seconds. Each
session's runtime has a set-up cost (a `sleep` prepare action), the harness
makes `--calls` sequential model calls, and the evaluator sleeps (post-run
cost). Stage isolation: all sessions submitted at once, the worker's
init / run / postrun pools capped separately, so prepared runtimes wait in
Temporal for a run slot. Serial pipeline: the same worker code, but the
driver keeps only M sessions in flight and starts the next one only when one
has finished, so each of the M slots does prepare → run → evaluate →
teardown back to back. Utilisation = busy slot-seconds / (slots × wall).

(b) Temporal overhead per empty session: harness `true`, no source, no
evaluator, per_request builder (0 completions). Latency at concurrency 1,
sessions/s at concurrency 20, and the mean of SessionResult.stage_seconds.

(c) Throughput: `--sessions-200` sessions submitted at once, as one task and
as 20 tasks (`--throughput-tasks`), each harness making 2 calls through the
gateway. Wall time, sessions/s,
calls/s, p50/p99 session duration (sum of stage_seconds), and a check that
every session completed with its 2 CompletionRecords in S3.

Prints a markdown table; writes bench/results/scheduling.json (parts not run
keep their previous figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import math
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.devstack import DevStack, Service, http_ready  # noqa: E402
from app.devstack import services as dev_services  # noqa: E402
from bench.fake_vllm import json_asgi_app, vllm_answer  # noqa: E402
from polar.contracts import SessionResult  # noqa: E402
from polar.records import SessionStatus  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage  # noqa: E402
from polar.tasks.spec import TaskSpec  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results" / "scheduling.json"
MODEL = "policy"
PROMPT_IDS = list(range(100, 116))
RESPONSE_IDS = list(range(200, 208))


# --------------------------------------------------------------------------- fake backend


def backend_app(slots: int, latency_s: float) -> Callable[..., Any]:
    """A raw ASGI app: vLLM's answer shape, `slots` concurrent calls of `latency_s` each.

    GET /stats: calls, busy slot-seconds, first call start / last call end
    (wall clock), the most calls waiting for a slot. POST /reset?slots=&latency=
    zeroes the accounting and may change the model.
    """
    state: dict[str, Any] = {}

    def reset(new_slots: int, new_latency: float) -> None:
        state.update(slots=new_slots, latency=new_latency, sem=asyncio.Semaphore(new_slots))
        state.update(calls=0, busy_s=0.0, first=None, last=None, waiting=0, max_waiting=0)

    reset(slots, latency_s)

    async def route(method: str, path: str, query: str, body: bytes) -> tuple[int, Any] | None:
        if method == "POST" and path.endswith("/chat/completions"):
            state["waiting"] += 1
            state["max_waiting"] = max(state["max_waiting"], state["waiting"] - state["slots"])
            async with state["sem"]:
                start = time.time()
                state["first"] = state["first"] or start
                await asyncio.sleep(state["latency"])
                end = time.time()
                state["busy_s"] += end - start
                state["last"] = end
                state["calls"] += 1
            state["waiting"] -= 1
            request = json.loads(body or b"{}")
            return 200, vllm_answer(
                request,
                state["calls"],
                prompt_ids=PROMPT_IDS,
                response_ids=RESPONSE_IDS,
                model=MODEL,
            )
        if path == "/stats":
            keys = ("slots", "latency", "calls", "busy_s", "first", "last", "max_waiting")
            return 200, {k: state[k] for k in keys}
        if path == "/reset" and method == "POST":
            params = dict(part.split("=", 1) for part in query.split("&") if part)
            reset(
                int(params.get("slots", state["slots"])),
                float(params.get("latency", state["latency"])),
            )
            return 200, {"ok": True}
        if path in ("/health", "/v1/models"):
            return 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        return None

    # the semaphore belongs to uvicorn's loop: make it at start-up
    return json_asgi_app(route, on_startup=lambda: reset(slots, latency_s))


def serve_backend(port: int, slots: int, latency_s: float) -> None:
    import uvicorn

    uvicorn.run(
        backend_app(slots, latency_s),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )


# --------------------------------------------------------------------------- processes


class Bench:
    """Temporal, SeaweedFS, gateway and fake backend on free loopback ports, state in a temp dir."""

    def __init__(self, tmp: Path, slots: int, latency_s: float) -> None:
        base = free_port(span=48)  # Temporal +0/+10/+20, UI +1, SeaweedFS +30..+37
        self.backend_port = base + 41
        self.backend = f"http://127.0.0.1:{self.backend_port}"
        self.settings = Settings(
            data_dir=tmp,
            temporal_address=f"127.0.0.1:{base}",
            temporal_ui_port=base + 1,
            s3_endpoint=f"http://127.0.0.1:{base + 30}",
            s3_bucket="polar-bench",
            gateway_host="127.0.0.1",
            gateway_port=base + 40,
            admin_port=base + 42,
            source_roots=tempfile.gettempdir(),  # the benchmarks' sources live in temp dirs
            gateway_url=None,
            upstream_urls=f"{self.backend}/v1",
            upstream_kind="vllm",
            upstream_model=MODEL,
            session_secret=secrets.token_hex(16),
            model_dir=None,
            log_format="text",
        )
        self.stack = DevStack(self.settings, with_model=False, die_with_parent=True)
        self.settings = self.stack.settings  # with the stack's generated S3 keys
        self.slots, self.latency_s = slots, latency_s
        self.started: list[str] = []
        self.workers = 0

    def log(self, line: str) -> None:
        print(f"  {line}", file=sys.stderr)

    def start(self) -> None:
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve-backend",
            str(self.backend_port),
            "--slots",
            str(self.slots),
            "--latency",
            str(self.latency_s),
        ]
        for service in (
            Service("fake-backend", argv, http_ready(f"{self.backend}/health"), start_timeout_s=30),
            self.stack.temporal(),
            self.stack.seaweedfs(),
            self.stack.gateway(),
        ):
            self.started.append(service.name)
            self.stack.start(service, log=self.log)
            if service.name == "seaweedfs":
                Storage(self.settings).ensure_bucket()

    @contextlib.contextmanager
    def worker(self, queue: str, init: int, run: int, postrun: int) -> Any:
        """One `polar worker` process serving every queue of `queue` with these caps."""
        settings = self.settings.model_copy(
            update={"task_queue": queue, "max_init": init, "max_run": run, "max_postrun": postrun}
        )
        stack = DevStack(settings, with_model=False, die_with_parent=True)
        self.workers += 1
        service = stack.worker(self.workers)
        self.started.append(service.name)
        stack.start(service, log=self.log)
        try:
            yield settings
        finally:
            stack.stop(service.name, quiet=True)
            self.started.remove(service.name)

    @contextlib.contextmanager
    def bare_worker(self, queue: str, cap: int) -> Any:
        """The bare Temporal baseline's worker (bench/bare_temporal.py), its own process."""
        ready = self.stack.run_dir / "bare-worker.ready"
        argv = [
            sys.executable,
            "-m",
            "bench.bare_temporal",
            "worker",
            "--address",
            self.settings.temporal_address,
            "--queue",
            queue,
            "--cap",
            str(cap),
            "--ready-file",
            str(ready),
        ]
        service = Service("bare-worker", argv, ready.exists, cwd=str(REPO), start_timeout_s=60)
        self.started.append(service.name)
        self.stack.start(service, log=self.log)
        try:
            yield
        finally:
            self.stack.stop(service.name, quiet=True)
            self.started.remove(service.name)

    def stop(self) -> None:
        for name in reversed(self.started):
            self.stack.stop(name, quiet=True)
        self.started.clear()

    def backend_reset(self, slots: int | None = None, latency_s: float | None = None) -> None:
        params = {k: v for k, v in (("slots", slots), ("latency", latency_s)) if v is not None}
        httpx.post(f"{self.backend}/reset", params=params, timeout=5).raise_for_status()

    def backend_stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.backend}/stats", timeout=5).json()


# --------------------------------------------------------------------------- sessions


def curl_calls(calls: int) -> str:
    """A shell harness making `calls` sequential Chat Completions calls through the gateway."""
    body = json.dumps(
        {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Fix the bug."}]}
    )
    one = (
        'curl -sf -o /dev/null --max-time 60 -H "Authorization: Bearer $OPENAI_API_KEY" '
        f"-H 'Content-Type: application/json' -d '{body}' \"$OPENAI_BASE_URL/chat/completions\""
    )
    return f"for i in $(seq {calls}); do {one} || exit 1; done"


def spec(
    task_id: str,
    harness: str,
    *,
    prepare_s: float = 0,
    evaluate_s: float | None = None,
    sessions: int = 1,
) -> TaskSpec:
    prepare = [{"type": "run", "command": f"sleep {prepare_s}"}] if prepare_s else []
    evaluator = (
        {"kind": "command", "command": f"sleep {evaluate_s}"}
        if evaluate_s is not None
        else {"kind": "none"}
    )
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "num_sessions": sessions,
            "runtime": {"kind": "local", "prepare": prepare},
            "harness": {"kind": "command", "command": harness},
            "evaluator": evaluator,
            "builder": {"name": "per_request"},
        }
    )


async def run_sessions(
    settings: Settings, make: Callable[[int], TaskSpec], n: int, in_flight: int, limit_s: float
) -> dict[str, Any]:
    """Run `n` one-session tasks, at most `in_flight` at a time (each starts when one ends)."""
    from polar.client.sdk import PolarClient

    polar = await PolarClient.connect(settings)
    gate = asyncio.Semaphore(in_flight)
    sessions: list[SessionResult] = []
    latencies: list[float] = []
    errors: list[str] = []

    async def one(i: int) -> None:
        async with gate:
            t0 = time.monotonic()
            try:
                result = await polar.wait(await polar.submit(make(i)))
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(exc).__name__}: {exc}")
                return
            latencies.append(time.monotonic() - t0)
            sessions.extend(result.sessions)

    t0 = time.monotonic()
    try:
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), limit_s)
    except TimeoutError:
        errors.append(f"time limit {limit_s:.0f}s reached")
    return {
        "wall_s": time.monotonic() - t0,
        "sessions": sessions,
        "latencies": latencies,
        "errors": errors,
    }


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0-100) of a non-empty list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def completed(sessions: list[SessionResult]) -> int:
    return sum(s.status == SessionStatus.COMPLETED for s in sessions)


def mean_stages(sessions: list[SessionResult]) -> dict[str, float]:
    stages: dict[str, list[float]] = {}
    for s in sessions:
        for stage, seconds in s.stage_seconds.items():
            stages.setdefault(stage, []).append(seconds)
    return {k: round(statistics.mean(v), 3) for k, v in stages.items()}


# --------------------------------------------------------------------------- (a) utilisation


async def bench_utilisation(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    n, slots = args.sessions, args.slots
    harness = curl_calls(args.calls)
    configs = [
        {
            "name": "stage isolation",
            "mode": "isolation",
            "in_flight": n,
            "caps": (args.init_cap, args.run_cap, args.postrun_cap),
        }
    ]
    for m in args.serial_slots:
        configs.append(
            {
                "name": f"serial pipeline, {m} slots",
                "mode": "serial",
                "in_flight": m,
                "caps": (m, m, m),
            }
        )
    rows = []
    for k, cfg in enumerate(configs):
        queue = f"util{k}-{uuid.uuid4().hex[:6]}"
        print(f"(a) {cfg['name']}: {n} sessions …", file=sys.stderr)
        with bench.worker(queue, *cfg["caps"]) as settings:
            bench.backend_reset(slots, args.latency)

            def make(i: int, k: int = k) -> TaskSpec:
                return spec(
                    f"util{k}-{i}", harness, prepare_s=args.prepare_s, evaluate_s=args.evaluate_s
                )

            out = await run_sessions(settings, make, n, cfg["in_flight"], args.phase_limit_s)
            stats = bench.backend_stats()
        wall = out["wall_s"]
        window = (stats["last"] - stats["first"]) if stats["first"] else 0.0
        rows.append(
            {
                "config": cfg["name"],
                "mode": cfg["mode"],
                "sessions_in_flight": cfg["in_flight"],
                "caps_init_run_postrun": list(cfg["caps"]),
                "sessions": n,
                "completed": completed(out["sessions"]),
                "errors": out["errors"][:3],
                "wall_s": round(wall, 2),
                "backend_calls": stats["calls"],
                "busy_slot_s": round(stats["busy_s"], 2),
                "utilisation": round(stats["busy_s"] / (slots * wall), 4) if wall else None,
                "utilisation_call_window": round(stats["busy_s"] / (slots * window), 4)
                if window
                else None,
                "max_calls_waiting_for_slot": stats["max_waiting"],
                "sessions_per_min": round(60 * completed(out["sessions"]) / wall, 1)
                if wall
                else None,
                "mean_stage_s": mean_stages(out["sessions"]),
            }
        )
    return {
        "params": {
            "sessions": n,
            "backend_slots": slots,
            "latency_s": args.latency,
            "calls_per_session": args.calls,
            "prepare_s": args.prepare_s,
            "evaluate_s": args.evaluate_s,
            "serial_slots": args.serial_slots,
            "isolation_caps": [args.init_cap, args.run_cap, args.postrun_cap],
        },
        "rows": rows,
    }


# --------------------------------------------------------------------------- (b) overhead


async def bench_overhead(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    queue = f"empty-{uuid.uuid4().hex[:6]}"
    c = args.overhead_concurrency
    print(
        f"(b) empty sessions: {args.overhead_n1} at concurrency 1, {args.overhead_nc} at {c} …",
        file=sys.stderr,
    )
    with bench.worker(queue, c, c, c) as settings:
        warm = await run_sessions(settings, lambda i: spec(f"warm-{i}", "true"), 2, 1, 60)
        one = await run_sessions(
            settings, lambda i: spec(f"empty1-{i}", "true"), args.overhead_n1, 1, args.phase_limit_s
        )
        many = await run_sessions(
            settings, lambda i: spec(f"emptyc-{i}", "true"), args.overhead_nc, c, args.phase_limit_s
        )
    lat = one["latencies"] or [float("nan")]
    return {
        "params": {
            "sessions_c1": args.overhead_n1,
            "sessions_cN": args.overhead_nc,
            "concurrency": c,
            "caps": [c, c, c],
            "harness": "true",
            "evaluator": "none",
            "builder": "per_request",
            "warmup_completed": completed(warm["sessions"]),
        },
        "c1": {
            "completed": completed(one["sessions"]),
            "errors": one["errors"][:3],
            "latency_p50_s": round(percentile(lat, 50), 3),
            "latency_mean_s": round(statistics.mean(lat), 3),
            "latency_min_s": round(min(lat), 3),
            "mean_stage_s": mean_stages(one["sessions"]),
        },
        "cN": {
            "completed": completed(many["sessions"]),
            "errors": many["errors"][:3],
            "wall_s": round(many["wall_s"], 2),
            "sessions_per_s": round(completed(many["sessions"]) / many["wall_s"], 2),
            "latency_p50_s": round(percentile(many["latencies"] or [float("nan")], 50), 3),
            "mean_stage_s": mean_stages(many["sessions"]),
        },
    }


# --------------------------------------------------------------------------- (c) throughput


async def bench_throughput(bench: Bench, args: argparse.Namespace, tasks: int) -> dict[str, Any]:
    from polar.client.sdk import PolarClient

    n, cap = args.sessions_200, args.throughput_cap
    queue = f"many-{uuid.uuid4().hex[:6]}"
    print(f"(c) {tasks} task(s), {n} sessions in all, 2 calls each, caps {cap} …", file=sys.stderr)
    with bench.worker(queue, cap, cap, cap) as settings:
        bench.backend_reset(args.throughput_slots, args.throughput_latency)
        polar = await PolarClient.connect(settings)
        sizes = [n // tasks + (i < n % tasks) for i in range(tasks)]
        specs = [spec(f"many-{uuid.uuid4().hex[:6]}", curl_calls(2), sessions=k) for k in sizes]
        t0 = time.monotonic()
        error = None
        sessions: list[SessionResult] = []
        lifetimes: list[float] = []
        starts: list[float] = []
        try:
            runs = await asyncio.gather(*(polar.submit(task) for task in specs))
            results = await asyncio.gather(
                *(polar.wait(run, timeout_s=args.phase_limit_s) for run in runs)
            )
            sessions = [s for result in results for s in result.sessions]
            # each Session workflow's start → close, as Temporal recorded it (incl. queueing)
            for run in runs:
                query = f"ParentWorkflowId = '{run.workflow_id}'"
                async for ex in polar.client.list_workflows(query):
                    if ex.start_time and ex.close_time:
                        lifetimes.append((ex.close_time - ex.start_time).total_seconds())
                        starts.append(ex.start_time.timestamp())
        except Exception as exc:  # noqa: BLE001 - reported
            error = f"{type(exc).__name__}: {exc}"
        wall = time.monotonic() - t0
        stats = bench.backend_stats()
    storage = Storage(bench.settings)
    records = await asyncio.gather(
        *(asyncio.to_thread(storage.count_completions, s.session_id) for s in sessions)
    )
    traces = sum(1 for s in sessions if s.traces_key and s.num_completions == 2)
    durations = [sum(s.stage_seconds.values()) for s in sessions] or [float("nan")]
    ok = (
        error is None
        and len(sessions) == n
        and completed(sessions) == n
        and all(r == 2 for r in records)
        and traces == n
    )
    return {
        "params": {
            "sessions": n,
            "tasks": tasks,
            "caps": [cap, cap, cap],
            "calls_per_session": 2,
            "backend_slots": args.throughput_slots,
            "latency_s": args.throughput_latency,
        },
        "error": error,
        "sessions": len(sessions),
        "completed": completed(sessions),
        "wall_s": round(wall, 2),
        "sessions_per_s": round(completed(sessions) / wall, 2),
        "backend_calls": stats["calls"],
        "calls_per_s": round(stats["calls"] / wall, 2),
        "session_p50_s": round(percentile(lifetimes or [float("nan")], 50), 2),
        "session_p99_s": round(percentile(lifetimes or [float("nan")], 99), 2),
        "session_durations_from": "Temporal: Session workflow start_time → close_time",
        # Little's law: how many sessions were alive at once on average, and over how long
        # Temporal spread the 200 Session workflow starts
        "mean_sessions_alive": round(sum(lifetimes) / wall, 1),
        "session_start_spread_s": round(max(starts) - min(starts), 2) if starts else None,
        "stage_sum_p50_s": round(percentile(durations, 50), 2),
        "stage_sum_p99_s": round(percentile(durations, 99), 2),
        "mean_stage_s": mean_stages(sessions),
        "records_in_s3": sum(records),
        "sessions_with_2_records": sum(r == 2 for r in records),
        "sessions_with_traces": traces,
        "ok": ok,
    }


# --------------------------------------------------------------------------- (d) Polar ÷ bare


def proc_cpu_s(pid: int | None) -> float:
    """CPU seconds of `pid` and its waited-for children (utime+stime+cutime+cstime)."""
    return sum(proc_cpu_split_s(pid))


def proc_cpu_split_s(pid: int | None) -> tuple[float, float]:
    """(own, waited-for children) CPU seconds of `pid`: utime+stime, cutime+cstime."""
    if not pid:
        return float("nan"), float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan"), float("nan")
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(x) for x in fields[11:13]) / tick, sum(int(x) for x in fields[13:15]) / tick


def machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat: everything but idle, iowait)."""
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in cpu[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def cpu_parts(bench: Bench, worker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of each part of the stack, the worker split into its own and its
    children's (sandbox, git, forwarder), and of the whole machine."""
    own, children = proc_cpu_split_s(worker_pid)
    parts = {"worker_own": own, "worker_children": children, "machine": machine_busy_s()}
    for name in ("temporal", "seaweedfs", "gateway"):
        parts[name] = proc_cpu_s(bench.stack.pid(name))
    return parts


def proc_peak_rss_mib(pid: int | None) -> float | None:
    """Peak resident set size (VmHWM) of `pid`, MiB."""
    if not pid:
        return None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


async def history_size(client: Any, workflow_id: str) -> dict[str, int]:
    """Events and bytes of one workflow's history, as the server counts them."""
    info = (await client.get_workflow_handle(workflow_id).describe()).raw_description
    info = info.workflow_execution_info
    return {"events": info.history_length, "bytes": info.history_size_bytes}


async def start_rate(client: Any, query: str) -> dict[str, Any]:
    """How fast Temporal started the workflows matching `query` (children of one task)."""
    found = sorted(
        [
            (ex.start_time.timestamp(), ex.id)
            async for ex in client.list_workflows(query)
            if ex.start_time
        ]
    )
    starts = [t for t, _ in found]
    spread = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    return {
        "children": len(starts),
        "start_spread_s": round(spread, 2),
        "children_per_s": round((len(starts) - 1) / spread, 2) if spread else None,
        "child_history": await history_size(client, found[-1][1]) if found else None,
    }


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for the rounds of a phase: the median of each number (nested dicts too), the
    rounds' count; the first error when no round succeeded."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]

    def merge(values: list[Any]) -> Any:
        first = values[0]
        if isinstance(first, dict):
            return {k: merge([v[k] for v in values if k in v]) for k in first}
        if isinstance(first, (int, float)) and not isinstance(first, bool):
            return round(statistics.median(values), 3)
        return first

    row = merge(ok)
    row["rounds"] = len(ok)
    if len(ok) < len(runs):
        row["failed_rounds"] = len(runs) - len(ok)
    return row


def ratio(top: dict[str, Any], bottom: dict[str, Any], phase: str, key: str) -> float | None:
    """top[phase][key] / bottom[phase][key], None when either is missing."""
    a, b = top.get(phase, {}).get(key), bottom.get(phase, {}).get(key)
    return round(a / b, 2) if a and b else None


@dataclasses.dataclass
class System:
    """One side of the comparison: how to run a task of n empty sessions and wait for it."""

    name: str
    run_task: Callable[[str, int], Any]
    children_query: Callable[[str, str], str]
    pid: Callable[[], int | None]


async def measure_system(
    system: System, phase: str, args: argparse.Namespace, client: Any
) -> dict[str, Any]:
    """One phase for one system: c1 latency, cN sessions/s, or one task of many sessions."""
    cpu0, t0 = proc_cpu_s(system.pid()), time.monotonic()
    out: dict[str, Any] = {}
    if phase == "c1":
        lat = []
        for i in range(args.overhead_n1):
            t = time.monotonic()
            await system.run_task(f"c1-{i}", 1)
            lat.append(time.monotonic() - t)
        out = {
            "sessions": len(lat),
            "latency_p50_s": round(percentile(lat, 50), 3),
            "latency_mean_s": round(statistics.mean(lat), 3),
            "latency_min_s": round(min(lat), 3),
        }
    elif phase == "cN":
        gate = asyncio.Semaphore(args.overhead_concurrency)

        async def one(i: int) -> None:
            async with gate:
                await system.run_task(f"cn-{i}", 1)

        await asyncio.gather(*(one(i) for i in range(args.overhead_nc)))
        wall = time.monotonic() - t0
        out = {
            "sessions": args.overhead_nc,
            "wall_s": round(wall, 2),
            "sessions_per_s": round(args.overhead_nc / wall, 2),
        }
    else:
        n = args.one_task_sessions
        task_id, workflow_id = await system.run_task("one", n)
        wall = time.monotonic() - t0
        out = {"sessions": n, "wall_s": round(wall, 2), "sessions_per_s": round(n / wall, 2)}
        out |= await start_rate(client, system.children_query(task_id, workflow_id))
        out["task_history"] = await history_size(client, workflow_id)
    sessions = out["sessions"]
    out["worker_cpu_ms_per_session"] = round(1000 * (proc_cpu_s(system.pid()) - cpu0) / sessions, 1)
    return out


async def bench_baseline(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Polar and bare Temporal side by side on one dev server, phase by phase."""
    from bench.bare_temporal import BareTask, BareTaskInput
    from polar.client.sdk import PolarClient

    cap = max(args.overhead_concurrency, args.one_task_sessions)
    polar_queue = f"pb-{uuid.uuid4().hex[:6]}"
    bare_queue = f"bare-{uuid.uuid4().hex[:6]}"
    print(
        f"(d) Polar ÷ bare: {args.overhead_n1} at concurrency 1, {args.overhead_nc} at "
        f"{args.overhead_concurrency}, one task of {args.one_task_sessions} …",
        file=sys.stderr,
    )
    with bench.worker(polar_queue, cap, cap, cap) as settings, bench.bare_worker(bare_queue, cap):
        polar = await PolarClient.connect(settings)
        client = polar.client

        finished: list[SessionResult] = []  # Polar's sessions of the current phase

        async def polar_task(tag: str, n: int, direct: bool = False) -> tuple[str, str]:
            task_id = f"{tag}-{uuid.uuid4().hex[:8]}"
            task = spec(task_id, "true", sessions=n)
            if direct:  # the early-stop path starts every child from the task (no batches)
                task = task.model_copy(update={"min_usable_sessions": n})
            run = await polar.submit(task)
            result = await polar.wait(run, timeout_s=args.phase_limit_s)
            finished.extend(result.sessions)
            if completed(result.sessions) != n:
                errors = {s.error for s in result.sessions if s.error}
                raise RuntimeError(
                    f"polar task {task_id}: {completed(result.sessions)}/{n} "
                    f"completed: {sorted(errors)[:3]}"
                )
            return task_id, run.workflow_id

        async def bare_task(tag: str, n: int) -> tuple[str, str]:
            task_id = f"bare-{tag}-{uuid.uuid4().hex[:8]}"
            result = await client.execute_workflow(
                BareTask.run,
                BareTaskInput(task_id=task_id, num_sessions=n),
                id=task_id,
                task_queue=bare_queue,
                execution_timeout=dt.timedelta(seconds=args.phase_limit_s),
            )
            if len(result.sessions) != n:
                raise RuntimeError(f"bare task {task_id}: {len(result.sessions)}/{n}")
            return task_id, task_id

        systems = [
            System(
                "polar",
                polar_task,
                lambda task_id, wid: f"PolarTaskId = '{task_id}' AND WorkflowType = 'Session'",
                lambda: bench.stack.pid(f"worker-{bench.workers}"),
            ),
            System(
                "bare",
                bare_task,
                lambda task_id, wid: f"ParentWorkflowId = '{wid}'",
                lambda: bench.stack.pid("bare-worker"),
            ),
        ]
        direct = System(
            "polar_direct",
            functools.partial(polar_task, direct=True),
            systems[0].children_query,
            systems[0].pid,
        )
        for system in systems:  # warm up: imports, sandbox, first polls
            await system.run_task("warm", 2)
        rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
            s.name: {} for s in [*systems, direct]
        }
        phases = [p for p in ("c1", "cN", "one_task") if p in args.baseline_phases]
        plan: list[tuple[str, System]] = []
        for phase in phases:  # c1 and cN alternate the systems, round by round (drift)
            for k in range(1 if phase == "one_task" else args.baseline_rounds):
                plan += [(phase, s) for s in (systems if k % 2 == 0 else systems[::-1])]
        if "one_task" in phases and not args.no_direct:
            plan.append(("one_task", direct))
        for phase, system in plan:
            print(f"    {system.name} {phase} …", file=sys.stderr)
            cpu0 = proc_cpu_s(bench.stack.pid("temporal"))
            parts0 = cpu_parts(bench, system.pid())
            finished.clear()
            try:
                row = await measure_system(system, phase, args, client)
            except Exception as exc:  # noqa: BLE001 - recorded, the other phases go on
                error = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                rounds[system.name].setdefault(phase, []).append(error)
                continue
            row["server_cpu_ms_per_session"] = round(
                1000 * (proc_cpu_s(bench.stack.pid("temporal")) - cpu0) / row["sessions"], 1
            )
            parts1 = cpu_parts(bench, system.pid())
            row["cpu_ms_per_session"] = {
                k: round(1000 * (parts1[k] - parts0[k]) / row["sessions"], 1) for k in parts0
            }
            row["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
            if finished:  # the Session workflow's laps (workflow.time() at each stage's end)
                row["mean_stage_s"] = mean_stages(finished)
            rounds[system.name].setdefault(phase, []).append(row)
        rows = {
            name: {phase: median_row(runs) for phase, runs in by_phase.items()}
            for name, by_phase in rounds.items()
        }
        p, b = rows["polar"], rows["bare"]
    ratios = {
        "c1_latency_p50": ratio(p, b, "c1", "latency_p50_s"),
        "cN_sessions_per_s": ratio(b, p, "cN", "sessions_per_s"),
        "one_task_children_per_s": ratio(b, p, "one_task", "children_per_s"),
    }
    return {
        "params": {
            "sessions_c1": args.overhead_n1,
            "sessions_cN": args.overhead_nc,
            "concurrency": args.overhead_concurrency,
            "one_task_sessions": args.one_task_sessions,
            "rounds_c1_cN": args.baseline_rounds,
            "caps": [cap, cap, cap],
            "harness": "true",
            "evaluator": "none",
            "builder": "per_request",
            # dev-server properties the stack sets (main() may have cleared them)
            "dev_server_dynamic_config": dict(dev_services.TEMPORAL_DEV_DYNAMIC_CONFIG),
            "dev_server_sqlite_pragmas": dict(dev_services.TEMPORAL_DEV_SQLITE_PRAGMAS),
        },
        "polar": p,
        "bare": b,
        "polar_direct": rows["polar_direct"],
        # > 1 means Polar is slower: latency polar/bare; rates bare/polar
        "polar_over_bare": ratios,
    }


# --------------------------------------------------------------- (e) large, (f) big spec


async def bench_large(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One task of `--large-sessions` empty sessions: wall, worker memory, history sizes."""
    from polar.client.sdk import PolarClient

    n, cap = args.large_sessions, args.large_cap
    queue = f"large-{uuid.uuid4().hex[:6]}"
    print(f"(e) one task of {n} sessions (harness `true`), caps {cap} …", file=sys.stderr)
    load = os.getloadavg()[0]
    with bench.worker(queue, cap, cap, cap) as settings:
        polar = await PolarClient.connect(settings)
        worker_pid = bench.stack.pid(f"worker-{bench.workers}")
        await polar.wait(await polar.submit(spec("large-warm", "true")), timeout_s=120)
        task = spec(f"large-{uuid.uuid4().hex[:6]}", "true", sessions=n)
        t0 = time.monotonic()
        run = await polar.submit(task)
        result = await polar.wait(run, timeout_s=args.phase_limit_s)
        wall = time.monotonic() - t0
        query = f"PolarTaskId = '{task.task_id}' AND WorkflowType = 'Session'"
        starts = await start_rate(polar.client, query)
        batch_ids = sorted(
            {
                ex.parent_id
                async for ex in polar.client.list_workflows(query)
                if ex.parent_id and ex.parent_id != run.workflow_id
            }
        )
        out = {
            "params": {"sessions": n, "caps": [cap, cap, cap], "harness": "true"},
            "completed": completed(result.sessions),
            "wall_s": round(wall, 2),
            "sessions_per_s": round(n / wall, 2),
            "worker_peak_rss_mib": proc_peak_rss_mib(worker_pid),
            "server_peak_rss_mib": proc_peak_rss_mib(bench.stack.pid("temporal")),
            "session_starts": starts,
            "batches": len(batch_ids),
            "task_history": await history_size(polar.client, run.workflow_id),
            "batch_history": await history_size(polar.client, batch_ids[0]) if batch_ids else None,
            "child_history": starts.pop("child_history"),
            "load_avg_1m_before": round(load, 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
        }
    return out


async def bench_big_spec(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """History sizes of a task whose instruction is `--big-instruction-kib` KiB."""
    from polar.client.sdk import PolarClient

    kib = args.big_instruction_kib
    queue = f"bigspec-{uuid.uuid4().hex[:6]}"
    print(f"(f) a task with a {kib} KiB instruction, 4 sessions …", file=sys.stderr)
    instruction = "".join(f"line {i:07d} of a long problem statement …\n" for i in range(kib * 24))
    with bench.worker(queue, 8, 8, 8) as settings:
        polar = await PolarClient.connect(settings)
        task = spec(f"bigspec-{uuid.uuid4().hex[:6]}", 'test -n "$POLAR_INSTRUCTION"', sessions=4)
        task = task.model_copy(update={"instruction": instruction[: kib * 1024]})
        run = await polar.submit(task)
        result = await polar.wait(run, timeout_s=args.phase_limit_s)
        return {
            "params": {"instruction_bytes": len(task.instruction), "sessions": 4},
            "completed": completed(result.sessions),
            "task_history": await history_size(polar.client, run.workflow_id),
            "child_history": await history_size(polar.client, result.sessions[0].session_id),
        }


# --------------------------------------------------------------------------- report


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def markdown(result: dict[str, Any]) -> str:
    out: list[str] = []
    util = result.get("utilisation")
    if util:
        p = util["params"]
        out += [
            f"(a) backend utilisation: {p['sessions']} sessions; backend {p['backend_slots']} "
            f"slots × {p['latency_s']} s/call; {p['calls_per_session']} calls/session; "
            f"prepare {p['prepare_s']} s, evaluate {p['evaluate_s']} s",
            "",
            "| pipeline | sessions in flight | caps init/run/postrun | wall s | utilisation "
            "| (first→last call) | sessions/min | completed |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in util["rows"]:
            caps = "/".join(map(str, r["caps_init_run_postrun"]))
            out.append(
                f"| {r['config']} | {r['sessions_in_flight']} | {caps} | {r['wall_s']} | "
                f"{_pct(r['utilisation'])} | {_pct(r['utilisation_call_window'])} | "
                f"{r['sessions_per_min']} | {r['completed']}/{r['sessions']} |"
            )
        out.append("")
    over = result.get("overhead")
    if over:
        c1, cn, p = over["c1"], over["cN"], over["params"]
        stages = ", ".join(f"{k} {v}" for k, v in c1["mean_stage_s"].items())
        out += [
            "(b) Temporal overhead per empty session (harness `true`, no evaluator)",
            "",
            "| figure | value |",
            "|---|---|",
            f"| latency at concurrency 1, p50 (mean; min) | {c1['latency_p50_s']} s "
            f"({c1['latency_mean_s']}; {c1['latency_min_s']}) |",
            f"| mean stage seconds at concurrency 1 | {stages} |",
            f"| sessions/s at concurrency {p['concurrency']} | {cn['sessions_per_s']} "
            f"({cn['completed']} in {cn['wall_s']} s, p50 latency {cn['latency_p50_s']} s) |",
            "",
        ]
    base = result.get("baseline")
    if base:
        out += baseline_markdown(base)
    big = result.get("big_spec")
    if big:
        t, c = big["task_history"], big["child_history"]
        out += [
            f"(f) a task with a {big['params']['instruction_bytes']} B instruction, 4 sessions: "
            f"task history {t['events']} events, {t['bytes']} B; a session's {c['events']} "
            f"events, {c['bytes']} B",
            "",
        ]
    large = result.get("large")
    if large:
        bh = large["batch_history"] or {}
        out += [
            f"(e) one task of {large['params']['sessions']} sessions: "
            f"{large['completed']} completed in {large['wall_s']} s "
            f"({large['sessions_per_s']} sessions/s, children started at "
            f"{large['session_starts']['children_per_s']}/s); worker peak RSS "
            f"{large['worker_peak_rss_mib']} MiB, server {large['server_peak_rss_mib']} MiB; "
            f"histories (events, bytes): task {large['task_history']}, a batch {bh or '–'}, "
            f"a session {large['child_history']}; load {large['load_avg_1m_before']} → "
            f"{large['load_avg_1m_after']}",
            "",
        ]
    thr = result.get("throughput")
    if thr:
        out += [
            f"(c) {thr['rows'][0]['params']['sessions']} concurrent sessions, 2 gateway calls each",
            "",
            "| tasks | wall s | sessions/s | calls/s | session p50 / p99 s (start → close) "
            "| stage laps p50 / p99 s | sessions alive (mean) | Session starts spread over s "
            "| completed | records in S3 | ok |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in thr["rows"]:
            out.append(
                f"| {r['params']['tasks']} | {r['wall_s']} | {r['sessions_per_s']} | "
                f"{r['calls_per_s']} | {r['session_p50_s']} / {r['session_p99_s']} | "
                f"{r['stage_sum_p50_s']} / {r['stage_sum_p99_s']} | "
                f"{r['mean_sessions_alive']} | {r['session_start_spread_s']} | "
                f"{r['completed']}/{r['params']['sessions']} | {r['records_in_s3']} | {r['ok']} |"
            )
        out.append("")
    return "\n".join(out)


def baseline_markdown(base: dict[str, Any]) -> list[str]:
    """The (d) table: Polar, bare and their ratio per figure."""
    p, b, r = base["polar"], base["bare"], base["polar_over_bare"]
    d = base.get("polar_direct", {})
    n = base["params"]["one_task_sessions"]

    def g(side: dict[str, Any], phase: str, key: str) -> Any:
        row = side.get(phase, {})
        return row.get(key, row.get("error", "–")) if row else "–"

    out = [
        "(d) Polar ÷ bare Temporal, same dev server, same run (empty sessions)",
        "",
        "| figure | Polar | bare | Polar ÷ bare |",
        "|---|---|---|---|",
        f"| latency at concurrency 1, p50 s | {g(p, 'c1', 'latency_p50_s')} | "
        f"{g(b, 'c1', 'latency_p50_s')} | {r['c1_latency_p50']} |",
        f"| sessions/s at {base['params']['concurrency']} in flight | "
        f"{g(p, 'cN', 'sessions_per_s')} | {g(b, 'cN', 'sessions_per_s')} | "
        f"{r['cN_sessions_per_s']} (bare/Polar) |",
        f"| child starts/s, one task of {n} | {g(p, 'one_task', 'children_per_s')} | "
        f"{g(b, 'one_task', 'children_per_s')} | {r['one_task_children_per_s']} (bare/Polar) |",
        f"| one task of {n}: wall s | {g(p, 'one_task', 'wall_s')} | "
        f"{g(b, 'one_task', 'wall_s')} | |",
        f"| Polar, all children started by the task (early-stop path): child starts/s, wall s "
        f"| {g(d, 'one_task', 'children_per_s')}, {g(d, 'one_task', 'wall_s')} | | |",
    ]
    for phase in ("c1", "cN", "one_task"):
        out.append(
            f"| worker / server CPU ms per session, {phase} | "
            f"{g(p, phase, 'worker_cpu_ms_per_session')} / "
            f"{g(p, phase, 'server_cpu_ms_per_session')} | "
            f"{g(b, phase, 'worker_cpu_ms_per_session')} / "
            f"{g(b, phase, 'server_cpu_ms_per_session')} | |"
        )
    for phase in ("c1", "cN"):
        cp, cb = g(p, phase, "cpu_ms_per_session"), g(b, phase, "cpu_ms_per_session")
        if isinstance(cp, dict) and isinstance(cb, dict):
            out.append(
                f"| whole machine CPU ms per session, {phase} (Polar: worker's children) | "
                f"{cp['machine']} ({cp['worker_children']}) | {cb['machine']} | "
                f"{round(cp['machine'] / cb['machine'], 2) if cb['machine'] else '–'} |"
            )
    for side, name in ((p, "Polar"), (b, "bare")):
        th = g(side, "one_task", "task_history")
        ch = g(side, "one_task", "child_history")
        if isinstance(th, dict) and isinstance(ch, dict):
            out.append(
                f"| {name} histories, one task of {n}: task / a child (events, bytes) | "
                f"{th['events']}, {th['bytes']} / {ch['events']}, {ch['bytes']} | | |"
            )
    out.append("")
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def measure(bench: Bench, args: argparse.Namespace, parts: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "utilisation" in parts:
        out["utilisation"] = await bench_utilisation(bench, args)
    if "overhead" in parts:
        out["overhead"] = await bench_overhead(bench, args)
    if "baseline" in parts:
        out["baseline"] = await bench_baseline(bench, args)
    if "big_spec" in parts:
        out["big_spec"] = await bench_big_spec(bench, args)
    if "large" in parts:
        out["large"] = await bench_large(bench, args)
    if "throughput" in parts:
        rows = [await bench_throughput(bench, args, t) for t in args.throughput_tasks]
        out["throughput"] = {"rows": rows, "ok": all(r["ok"] for r in rows)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utilisation", action="store_true", help="run (a)")
    parser.add_argument("--overhead", action="store_true", help="run (b)")
    parser.add_argument("--throughput", action="store_true", help="run (c)")
    parser.add_argument(
        "--large", action="store_true", help="run (e): one task of --large-sessions empty sessions"
    )
    parser.add_argument(
        "--big-spec",
        action="store_true",
        help="run (f): histories of a task with a large instruction",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="run (d): Polar ÷ bare Temporal (uses the (b) sizes)",
    )
    g = parser.add_argument_group("(a) utilisation")
    g.add_argument("--sessions", type=int, default=32, help="sessions per configuration")
    g.add_argument("--slots", type=int, default=4, help="backend slots")
    g.add_argument("--latency", type=float, default=0.5, help="seconds per backend call")
    g.add_argument("--calls", type=int, default=4, help="model calls per session")
    g.add_argument("--prepare-s", type=float, default=2.0, help="runtime set-up cost")
    g.add_argument("--evaluate-s", type=float, default=2.0, help="evaluator cost")
    g.add_argument("--init-cap", type=int, default=8, help="stage isolation: init pool")
    g.add_argument("--run-cap", type=int, default=4, help="stage isolation: run pool")
    g.add_argument("--postrun-cap", type=int, default=8, help="stage isolation: postrun pool")
    g.add_argument(
        "--serial-slots",
        type=_ints,
        default=[4, 20],
        help="serial pipelines to run: sessions in flight (default 4,20)",
    )
    g = parser.add_argument_group("(b) overhead")
    g.add_argument("--overhead-n1", type=int, default=10, help="sessions at concurrency 1")
    g.add_argument("--overhead-nc", type=int, default=60, help="sessions at concurrency N")
    g.add_argument("--overhead-concurrency", type=int, default=20)
    g.add_argument(
        "--one-task-sessions",
        type=int,
        default=200,
        help="(d): sessions of the task whose child-start rate is measured",
    )
    g.add_argument(
        "--baseline-phases",
        type=lambda text: text.split(","),
        default=["c1", "cN", "one_task"],
        help="(d): the phases to run, of c1,cN,one_task (default all)",
    )
    g.add_argument(
        "--baseline-rounds",
        type=int,
        default=3,
        help="(d): rounds of c1 and cN, Polar and bare alternating; medians reported",
    )
    g.add_argument(
        "--no-direct",
        action="store_true",
        help="(d): skip the one task started without fan-out (polar_direct)",
    )
    g.add_argument("--large-sessions", type=int, default=1000, help="(e): sessions of the task")
    g.add_argument("--large-cap", type=int, default=50, help="(e): cap of each stage pool")
    g.add_argument("--big-instruction-kib", type=int, default=64, help="(f): instruction size")
    g = parser.add_argument_group("(c) throughput")
    g.add_argument("--sessions-200", type=int, default=200, help="sessions of the task")
    g.add_argument(
        "--throughput-tasks",
        type=_ints,
        default=[1, 20],
        help="split them into this many tasks; a run per value (1,20)",
    )
    g.add_argument("--throughput-cap", type=int, default=200, help="cap of each stage pool")
    g.add_argument("--throughput-slots", type=int, default=64, help="backend slots")
    g.add_argument("--throughput-latency", type=float, default=0.05, help="s per call")
    parser.add_argument(
        "--phase-limit-s", type=float, default=300.0, help="time bound of each measured phase"
    )
    parser.add_argument(
        "--dev-config",
        choices=("stack", "default"),
        default="stack",
        help="dev server dynamic config: the stack's, or Temporal's defaults (to measure it)",
    )
    parser.add_argument(
        "--dev-sqlite",
        choices=("stack", "default"),
        default="stack",
        help="dev server SQLite pragmas: the stack's (WAL, synchronous=normal), or SQLite's "
        "defaults (rollback journal, synchronous=full)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, S3 data)")
    parser.add_argument("--serve-backend", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_backend:
        serve_backend(args.serve_backend, args.slots, args.latency)
        return
    every = ("utilisation", "overhead", "throughput", "baseline", "big_spec", "large")
    parts = [p for p in every if getattr(args, p)]
    parts = parts or ["utilisation", "overhead", "throughput", "baseline", "big_spec"]

    if args.dev_config == "default":
        dev_services.TEMPORAL_DEV_DYNAMIC_CONFIG = {}
    if args.dev_sqlite == "default":
        dev_services.TEMPORAL_DEV_SQLITE_PRAGMAS = {}
    started = time.monotonic()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"warning: load average {load:.2f} before the run: figures will be noisy",
            file=sys.stderr,
        )
    tmp_dir = (
        contextlib.nullcontext(tempfile.mkdtemp(prefix="polar-bench-sched-"))
        if args.keep
        else tempfile.TemporaryDirectory(prefix="polar-bench-sched-", ignore_cleanup_errors=True)
    )
    with tmp_dir as tmp:
        os.chmod(tmp, 0o711)  # the local runtime's harness user must traverse the data dir
        bench = Bench(Path(tmp), args.slots, args.latency)
        try:
            print("starting fake backend, Temporal, SeaweedFS, gateway …", file=sys.stderr)
            bench.start()
            measured = asyncio.run(measure(bench, args, parts))
        finally:
            bench.stop()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)

    previous: dict[str, Any] = {}
    if args.out.exists():
        with contextlib.suppress(ValueError):
            previous = json.loads(args.out.read_text())
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(load, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "total_s": round(time.monotonic() - started, 1),
        "parts": parts,
        "shared_cores": "Temporal, SeaweedFS, gateway, fake backend, worker, harness "
        "subprocesses and this client on one machine",
    }
    result = {k: v for k, v in previous.items() if k not in parts}
    result["meta"] = previous.get("meta", {}) | {f"run_{p}": meta for p in parts}
    result.update(measured)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    print(f"\nresults: {args.out}")
    thr = measured.get("throughput")
    if thr and not thr["ok"]:
        bad = [r for r in thr["rows"] if not r["ok"]]
        sys.exit(
            "throughput check failed: "
            + "; ".join(
                f"{r['params']['tasks']} task(s): {r['completed']}/{r['params']['sessions']} "
                f"completed, {r['sessions_with_2_records']} with 2 records, {r['error']}"
                for r in bad
            )
        )


if __name__ == "__main__":
    main()
