"""Gateway benchmark: added latency of a recorded call, next to calling the upstream directly.

    .venv/bin/python bench/bench_gateway.py                      # about 1 min on 2 cores
    .venv/bin/python bench/bench_gateway.py --install-litellm    # make bench/.venv-litellm first
    .venv/bin/python bench/bench_gateway.py --no-litellm --calls-1 1000 --calls-32 50

Every part is its own process on 127.0.0.1, started here and stopped at the end:

* a fast fake upstream: vLLM's Chat Completions answer shape with fixed small
  token ids (16 prompt ids, 8 sampled ids, logprobs when asked), no model and
  ~0 latency: a raw ASGI app under uvicorn (`--serve-upstream PORT`);
* SeaweedFS (`DevStack.seaweedfs()`, data in a temp dir), so every gateway
  call really writes its CompletionRecord to S3 before it is answered;
* the Polar gateway (`DevStack.gateway()`, i.e. `python -m app.cli gateway`)
  in front of the fake upstream;
* LiteLLM's proxy from its own venv (bench/.venv-litellm, never the project's)
  with a `hosted_vllm/` model pointing at the same fake upstream, if installed.

The client (this process) runs 1 and 32 concurrent sessions, each with its
own httpx.AsyncClient (one kept-alive connection) and minted session key
(LiteLLM, without a database, only knows its master key), each doing sequential
non-streamed Chat Completions calls: first directly to the fake upstream,
then through the gateway, then through LiteLLM. Per-call latency p50/p99,
calls per second, and the latency each proxy adds over the direct call.
Afterwards the S3 bucket is listed: one record per gateway call must be there.
Client, gateway, SeaweedFS, the fake upstream and LiteLLM share the machine's cores.

Prints markdown tables (latency and throughput; CPU per call per process);
writes bench/results/gateway.json and, beside it, gateway.png (added latency and
proxy CPU per call against sessions; `--png` to put it elsewhere). `--plot-only
JSON` re-plots an existing results file without running anything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import math
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.devstack import DevStack, Service, StackError, http_ready  # noqa: E402
from bench.fake_vllm import read_body, vllm_answer  # noqa: E402
from polar.session_keys import SessionIdentity, mint_session_key  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results" / "gateway.json"
REALISTIC_RESULTS = REPO / "bench" / "results" / "gateway-realistic.json"
LITELLM_VENV = REPO / "bench" / ".venv-litellm"
# The newest litellm whose [proxy] extra installs from the index here: 1.109+ asks for a
# `litellm-proxy` package of the same version that the index does not have.
LITELLM_PIN = "litellm[proxy]==1.108.7"
MODEL = "policy"
PROMPT_IDS = list(range(1000, 1016))
RESPONSE_IDS = [2000, 2001, 2002, 2003, 2004, 2005, 2006, 151645]
REPLY_TEXT = "ok, done."
REQUEST = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List the files, then say done."},
    ],
    "max_tokens": 8,
    "temperature": 1.0,
}
REALISTIC_TOKENS = 32_000  # the realistic request's history, in tokens (~4 characters each)
REALISTIC_TOOLS = 15
TARGETS = ("direct", "polar", "litellm")
LABELS = {
    "direct": "direct to the fake upstream",
    "polar": "Polar gateway (record in S3)",
    "litellm": "LiteLLM proxy",
}


# --------------------------------------------------------------------------- payloads


def _tool(i: int) -> dict[str, Any]:
    """One of the realistic request's tools: a coding agent's, with a JSON schema."""
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Tool {i} of a coding agent: reads, edits or runs things in the "
            "workspace and returns what happened, as plain text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "a path in the workspace"},
                    "command": {"type": "string", "description": "a shell command to run"},
                    "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
                    "flags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["path"],
            },
        },
    }


def realistic_request(
    tokens: int = REALISTIC_TOKENS, tools: int = REALISTIC_TOOLS
) -> dict[str, Any]:
    """A coding agent's call late in its session: ~`tokens` tokens of history (system,
    task, then assistant tool calls and tool results of source files), `tools` tools,
    streamed to the caller."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "The test suite fails; find and fix the bug."},
    ]
    chars, turn = 0, 0
    while chars < tokens * 4:
        source = "\n".join(
            f"def f{turn}_{k}(x):\n    return x * {k} + {turn}  # line {k}" for k in range(40)
        )
        call_id = f"call_{turn:04d}"
        messages += [
            {
                "role": "assistant",
                "content": f"Step {turn}: reading the next file.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "tool_0",
                            "arguments": json.dumps({"path": f"src/m{turn}.py"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": source},
        ]
        chars += len(source) + 80
        turn += 1
    return {
        "model": MODEL,
        "messages": messages,
        "tools": [_tool(i) for i in range(tools)],
        "max_tokens": 8,
        "temperature": 1.0,
        "stream": True,
    }


# --------------------------------------------------------------------------- fake upstream


def _sse_body(answer: dict[str, Any]) -> bytes:
    """The answer as an OpenAI chunk stream (what a streaming caller of vLLM gets)."""
    from polar.providers.openai_chat import render_chat_stream

    return "".join(render_chat_stream(answer)).encode()


def upstream_app(prompt_tokens: int) -> Callable[..., Any]:
    """The fake upstream: vLLM's answer shape with fixed ids, as fast as it can; a chunk
    stream when asked to stream; `prompt_tokens` prompt ids."""
    counter = itertools.count()
    prompt_ids = PROMPT_IDS if prompt_tokens <= len(PROMPT_IDS) else list(range(prompt_tokens))
    models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm"}]}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_body(receive)
        path, status, media = scope["path"], 200, b"application/json"
        if scope["method"] == "POST" and path.endswith("/chat/completions"):
            request = json.loads(body or b"{}")
            answer = vllm_answer(
                request,
                next(counter),
                prompt_ids=prompt_ids,
                response_ids=RESPONSE_IDS,
                text=REPLY_TEXT,
                model=MODEL,
            )
            if request.get("stream"):
                data, media = _sse_body(answer), b"text/event-stream"
            else:
                data = json.dumps(answer).encode()
        elif path in ("/health", "/v1/models", "/models"):
            data = json.dumps(models).encode()
        else:
            status, data = 404, json.dumps({"error": {"message": f"no route {path}"}}).encode()
        headers = [(b"content-type", media), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def serve_upstream(port: int, prompt_tokens: int) -> None:
    import uvicorn

    uvicorn.run(
        upstream_app(prompt_tokens),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )


# --------------------------------------------------------------------------- processes


def _ports() -> tuple[int, int, int, int]:
    """S3 (8 consecutive ports), gateway, upstream, LiteLLM: all distinct."""
    s3 = free_port(8)
    taken = set(range(s3, s3 + 8))
    others: list[int] = []
    while len(others) < 3:
        port = free_port()
        if port not in taken:
            taken.add(port)
            others.append(port)
    return s3, others[0], others[1], others[2]


def _server_impl(python: str) -> str:
    """What uvicorn picks in that interpreter ('auto'): event loop and HTTP parser."""
    code = (
        "import importlib.util as u;"
        "print(('uvloop' if u.find_spec('uvloop') else 'asyncio') + ' + ' +"
        " ('httptools' if u.find_spec('httptools') else 'h11'))"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def litellm_version(venv: Path) -> str | None:
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip() or None


def install_litellm(venv: Path) -> None:
    """A throwaway venv with LiteLLM's proxy (never the project's venv)."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", LITELLM_PIN], check=True, timeout=900
    )


class Bench:
    """The processes of one run, on free loopback ports, with their state in a temp dir."""

    def __init__(self, tmp: Path, litellm_venv: Path | None, prompt_tokens: int) -> None:
        s3_port, gw_port, up_port, ll_port = _ports()
        self.tmp = tmp
        self.prompt_tokens = prompt_tokens
        self.gateway_root: Path | None = None
        self.upstream_port = up_port
        self.upstream_url = f"http://127.0.0.1:{up_port}/v1"
        self.litellm_url = f"http://127.0.0.1:{ll_port}/v1"
        self.settings = Settings(
            data_dir=tmp,
            s3_endpoint=f"http://127.0.0.1:{s3_port}",
            s3_bucket="polar-bench",
            gateway_host="127.0.0.1",
            gateway_port=gw_port,
            admin_port=free_port(),
            gateway_url=None,
            upstream_urls=self.upstream_url,
            upstream_kind="vllm",
            upstream_model=MODEL,
            session_secret=secrets.token_hex(16),
            model_dir=None,
        )
        self.gateway_url = f"{self.settings.gateway_base_url}/v1"
        self.stack = DevStack(self.settings, with_model=False, die_with_parent=True)
        self.settings = self.stack.settings  # with the stack's generated S3 keys
        self.litellm_venv = litellm_venv
        self.litellm_port = ll_port
        # without a database LiteLLM has no virtual keys: every session sends the master key
        self.litellm_key = f"sk-bench-{secrets.token_hex(16)}"
        self.started: list[str] = []

    def log(self, line: str) -> None:
        print(f"  {line}", file=sys.stderr)

    def _start(self, service: Service) -> None:
        self.started.append(service.name)
        self.stack.start(service, log=self.log)

    def start_core(self) -> None:
        up_port = self.upstream_port
        self._start(
            Service(
                "fake-upstream",
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--serve-upstream",
                    str(up_port),
                    "--prompt-tokens",
                    str(self.prompt_tokens),
                ],
                http_ready(f"http://127.0.0.1:{up_port}/health"),
                start_timeout_s=30,
            )
        )
        self._start(self.stack.seaweedfs())
        Storage(self.settings).ensure_bucket()
        gateway = self.stack.gateway()
        if self.gateway_root is not None:  # another checkout's gateway code (before/after runs)
            gateway = dataclasses.replace(gateway, cwd=str(self.gateway_root))
        self._start(gateway)

    def start_litellm(self) -> None:
        """LiteLLM's proxy on the same fake upstream; raises StackError if it does not come up."""
        assert self.litellm_venv is not None
        config = self.tmp / "litellm.yaml"  # JSON is YAML
        config.write_text(
            json.dumps(
                {
                    "model_list": [
                        {
                            "model_name": MODEL,
                            "litellm_params": {
                                "model": f"hosted_vllm/{MODEL}",
                                "api_base": self.upstream_url,
                                "api_key": "none",
                            },
                        }
                    ],
                    "litellm_settings": {"telemetry": False},
                    "general_settings": {"master_key": self.litellm_key},
                },
                indent=2,
            )
        )
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price list at start
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
            "HOME": str(self.tmp),
        }
        argv = [
            str(self.litellm_venv / "bin" / "litellm"),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.litellm_port),
        ]
        ready = http_ready(f"http://127.0.0.1:{self.litellm_port}/health/liveliness")
        service = Service("litellm", argv, ready, env=env, start_timeout_s=180, cwd=str(self.tmp))
        self._start(service)

    def stop(self) -> None:
        for name in reversed(self.started):
            self.stack.stop(name, quiet=True)
        self.started.clear()

    def base_url(self, target: str) -> str:
        return {
            "direct": self.upstream_url,
            "polar": self.gateway_url,
            "litellm": self.litellm_url,
        }[target]

    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.stack.log_path(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# --------------------------------------------------------------------------- client


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0-100) of a non-empty list."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _valid(response: httpx.Response, streamed: bool) -> bool:
    if response.status_code != 200:
        return False
    if streamed:  # a chunk stream: the reply's text in pieces, then [DONE]
        text = response.text
        return text.rstrip().endswith("data: [DONE]") and "stop" in text
    try:
        return response.json()["choices"][0]["message"]["content"] == REPLY_TEXT
    except (ValueError, KeyError, IndexError, TypeError):
        return False


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process (all its threads) so far; 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_phase(
    request: dict[str, Any],
    base_url: str,
    keys: list[str],
    calls: int,
    warmup: int,
    time_limit_s: float,
    pids: dict[str, int | None],
) -> dict[str, Any]:
    """`len(keys)` concurrent sessions; each makes `warmup` untimed, then `calls` timed calls."""
    sessions = len(keys)
    body = json.dumps(request).encode()
    streamed = bool(request.get("stream"))
    latencies: list[float] = []
    errors: list[str] = []
    ok_calls = 0

    async def one(client: httpx.AsyncClient, timed: bool) -> None:
        nonlocal ok_calls
        t0 = time.perf_counter()
        try:
            response = await client.post("/chat/completions", content=body)
        except httpx.HTTPError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            return
        elapsed = time.perf_counter() - t0
        if not _valid(response, streamed):
            errors.append(f"{response.status_code}: {response.text[:300]}")
            return
        ok_calls += 1
        if timed:
            latencies.append(elapsed)

    async def session(client: httpx.AsyncClient, n: int, timed: bool, deadline: float) -> None:
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            await one(client, timed)

    # one client (one kept-alive connection) per session, as each harness has its own
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=base_url,
                    timeout=60,
                    limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                    headers={"content-type": "application/json", "authorization": f"Bearer {k}"},
                )
            )
            for k in keys
        ]
        deadline = time.monotonic() + time_limit_s
        await asyncio.gather(*(session(c, warmup, False, deadline) for c in clients))
        deadline = time.monotonic() + time_limit_s
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        client_cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(session(c, calls, True, deadline) for c in clients))
        wall = time.perf_counter() - t0
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        cpu["client"] = time.process_time() - client_cpu0
    out: dict[str, Any] = {
        "sessions": sessions,
        "calls": len(latencies),
        "planned_calls": sessions * calls,
        "ok_calls_incl_warmup": ok_calls,
        "errors": len(errors),
        "first_errors": errors[:3],
        "wall_s": round(wall, 3),
        "calls_per_s": round(len(latencies) / wall, 1) if wall > 0 else None,
        # CPU time each process spent per timed call (ms), and all of them over the wall time
        "cpu_ms_per_call": {
            name: round(1000 * sec / max(len(latencies), 1), 3) for name, sec in cpu.items()
        },
        "cores_busy": round(sum(cpu.values()) / wall, 2) if wall > 0 else None,
    }
    if latencies:
        ms = [x * 1000 for x in latencies]
        out |= {
            "p50_ms": round(percentile(ms, 50), 3),
            "p99_ms": round(percentile(ms, 99), 3),
            "mean_ms": round(statistics.fmean(ms), 3),
            "max_ms": round(max(ms), 3),
        }
    return out


async def _put_async_cpu(storage: Storage, data: bytes, n: int) -> tuple[list[float], float]:
    """`n` sequential PUTs of `data` with the gateway's async client (obstore)."""
    import obstore

    times = []
    cpu0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        await obstore.put_async(storage.store, f"bench/aput-{i}", data)
        times.append((time.perf_counter() - t0) * 1000)
    return times, time.process_time() - cpu0


def check_records(bench: Bench, expected: int) -> dict[str, Any]:
    """Every gateway call of the run must have left one CompletionRecord in S3."""
    storage = Storage(bench.settings)
    keys = [k for k in storage.list_keys("sessions/") if "/completions/" in k]
    out: dict[str, Any] = {"expected": expected, "found": len(keys)}
    prompt_ids = PROMPT_IDS if bench.prompt_tokens <= len(PROMPT_IDS) else None
    if keys:
        record = storage.read_completion(storage.get_bytes(keys[-1]))
        out["sample_has_token_ids"] = (
            record.prompt_token_ids == (prompt_ids or list(range(bench.prompt_tokens)))
            and record.response_token_ids == RESPONSE_IDS
            and record.has_token_ids is True
        )
    out["ok"] = out["found"] == expected and out.get("sample_has_token_ids", False)
    if keys:
        # what one record write costs on its own: the same bytes PUT again, sequentially,
        # with boto3 (the gateway's client before) and obstore (the gateway's client now)
        data = storage.get_bytes(keys[-1])
        boto = storage.boto_client()
        times = []
        cpu0 = time.process_time()
        for i in range(100):
            t0 = time.perf_counter()
            boto.put_object(Bucket=storage.bucket, Key=f"bench/put-{i}", Body=data)
            times.append((time.perf_counter() - t0) * 1000)
        out["record_bytes"] = len(data)
        out["s3_put_p50_ms"] = round(percentile(times, 50), 3)
        out["s3_put_boto3_cpu_ms"] = round((time.process_time() - cpu0) * 1000 / 100, 3)
        atimes, acpu = asyncio.run(_put_async_cpu(storage, data, 100))
        out["s3_put_obstore_p50_ms"] = round(percentile(atimes, 50), 3)
        out["s3_put_obstore_cpu_ms"] = round(acpu * 1000 / 100, 3)
    return out


# --------------------------------------------------------------------------- report


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| path | sessions | calls | p50 ms | p99 ms | calls/s | added p50 ms | added p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        label = LABELS[row["target"]]
        if row["target"] == "litellm" and result["litellm"].get("version"):
            label = f"LiteLLM proxy {result['litellm']['version']}"
        added = row["target"] != "direct"
        lines.append(
            f"| {label} | {row['sessions']} | {row['calls']} | {_fmt(row.get('p50_ms'))} "
            f"| {_fmt(row.get('p99_ms'))} | {_fmt(row.get('calls_per_s'), 0)} "
            f"| {_fmt(row.get('added_p50_ms')) if added else ''} "
            f"| {_fmt(row.get('added_p99_ms')) if added else ''} |"
        )
    lines += [
        "",
        "| CPU ms per call | sessions | client | fake upstream | proxy | SeaweedFS | cores busy |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        cpu = row.get("cpu_ms_per_call", {})
        proxy = {"polar": "gateway", "litellm": "litellm"}.get(row["target"])
        lines.append(
            f"| {LABELS[row['target']].split(' (')[0]} | {row['sessions']} "
            f"| {_fmt(cpu.get('client'))} | {_fmt(cpu.get('fake-upstream'))} "
            f"| {_fmt(cpu.get(proxy)) if proxy else ''} "
            f"| {_fmt(cpu.get('seaweedfs')) if row['target'] == 'polar' else ''} "
            f"| {_fmt(row.get('cores_busy'))} |"
        )
    notes = []
    for c, ratio in result.get("ratios", {}).items():
        notes.append(
            f"{c} session(s): Polar adds {ratio['polar_added_p50_ms']:.2f} ms at p50, LiteLLM "
            f"{ratio['litellm_added_p50_ms']:.2f} ms (Polar / LiteLLM = "
            f"{_fmt(ratio['added_p50_ratio'])}); throughput Polar / LiteLLM = "
            f"{_fmt(ratio['calls_per_s_ratio'])}"
        )
    ll = result["litellm"]
    if ll["status"] != "measured":
        notes.append(f"LiteLLM not measured: {ll['reason']}")
    rec = result["records"]
    notes.append(
        f"records in S3: {rec['found']} of {rec['expected']} gateway calls"
        f"{', token ids as sent by the upstream' if rec.get('sample_has_token_ids') else ''}"
        + (
            f"; one {rec['record_bytes']} B record PUT alone (boto3 → SeaweedFS): "
            f"p50 {rec['s3_put_p50_ms']:.2f} ms, {rec['s3_put_boto3_cpu_ms']:.2f} ms CPU in boto3; "
            f"with obstore (the gateway's client): p50 {rec.get('s3_put_obstore_p50_ms', 0):.2f} "
            f"ms, {rec.get('s3_put_obstore_cpu_ms', 0):.2f} ms CPU"
            if "s3_put_p50_ms" in rec
            else ""
        )
    )
    return "\n".join(lines) + "\n\n" + "\n".join(f"* {n}" for n in notes)


PLOTTED = {"polar": ("Polar gateway", "C0"), "litellm": ("LiteLLM proxy", "C1")}
PROXY_PROCESS = {"polar": "gateway", "litellm": "litellm"}  # whose CPU is the proxy's


def _spans_decades(values: list[float]) -> bool:
    """Whether positive `values` span a factor of 10 or more (then a log axis reads better)."""
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) >= 10 * min(positive)


def _payload_label(result: dict[str, Any]) -> str:
    params = result.get("params", {})
    if params.get("payload") == "realistic":
        request = params.get("request", {})
        return (
            f"realistic request ({request.get('bytes', 0) / 1000:.0f} kB, "
            f"{request.get('messages', '?')} messages, {request.get('tools', '?')} tools, streamed)"
        )
    return "small request (system + user, 8 tokens out)"


def _label_points(ax: Any, xs: list[int], ys: list[float], fmt: str) -> None:
    """Each point's value beside it: right of the first points, left of the last."""
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        last = i == len(xs) - 1 and len(xs) > 1
        ax.annotate(
            fmt.format(y),
            (x, y),
            textcoords="offset points",
            xytext=(-7 if last else 7, 5),
            ha="right" if last else "left",
            fontsize=8,
        )


def _plain_log_labels(ax: Any, values: list[float]) -> None:
    """A log y axis labelled with plain numbers (1, 10, 100; also 2 and 5 between them when
    the values span under two decades), not powers of ten."""
    from matplotlib.ticker import FuncFormatter

    positive = [v for v in values if v > 0]
    narrow = math.log10(max(positive) / min(positive)) < 2

    def minor(value: float, _pos: int) -> str:
        mantissa = round(value / 10 ** math.floor(math.log10(value)))
        return f"{value:,g}" if narrow and mantissa in (2, 5) else ""

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def plot_results(result: dict[str, Any], path: Path) -> None:
    """Draw a results dict as a two-panel PNG at `path`: (a) added latency (p50, p99
    lighter) and (b) the proxy's CPU per call (SeaweedFS's behind Polar dashed), each
    against concurrent sessions, one line per proxy measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    rows = [r for r in result["rows"] if r["target"] in PLOTTED]
    sessions = sorted({r["sessions"] for r in result["rows"]})
    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(11, 4.6))
    lat_values: list[float] = []
    cpu_values: list[float] = []
    for target, (label, color) in PLOTTED.items():
        mine = sorted((r for r in rows if r["target"] == target), key=lambda r: r["sessions"])
        if target == "litellm" and result.get("litellm", {}).get("version"):
            label = f"LiteLLM proxy {result['litellm']['version']}"
        timed = [r for r in mine if "added_p50_ms" in r]
        if timed:
            xs = [r["sessions"] for r in timed]
            p50 = [r["added_p50_ms"] for r in timed]
            p99 = [r["added_p99_ms"] for r in timed]
            lat.plot(xs, p50, "-o", color=color, label=f"{label}, p50")
            lat.plot(xs, p99, "--", marker=".", color=color, alpha=0.4, label=f"{label}, p99")
            _label_points(lat, xs, p50, "{:,.1f}")
            lat_values += p50 + p99
        process = PROXY_PROCESS[target]
        spent = [r for r in mine if process in r.get("cpu_ms_per_call", {}) and r["calls"]]
        if spent:
            xs = [r["sessions"] for r in spent]
            ms = [r["cpu_ms_per_call"][process] for r in spent]
            cpu.plot(xs, ms, "-o", color=color, label=label)
            _label_points(cpu, xs, ms, "{:.2f}")
            cpu_values += ms
        if target == "polar":
            s3 = [r for r in spent if "seaweedfs" in r["cpu_ms_per_call"]]
            if s3:
                ms = [r["cpu_ms_per_call"]["seaweedfs"] for r in s3]
                cpu.plot(
                    [r["sessions"] for r in s3],
                    ms,
                    "--s",
                    color=color,
                    alpha=0.6,
                    label="SeaweedFS (Polar's record writes)",
                )
                cpu_values += ms
    for ax, values in ((lat, lat_values), (cpu, cpu_values)):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sessions, [str(s) for s in sessions])
        ax.xaxis.set_minor_locator(NullLocator())
        if _spans_decades(values):
            ax.set_yscale("log", nonpositive="mask")
            _plain_log_labels(ax, values)
        elif values:  # linear from 0 (or below, if a proxy came out faster than direct)
            low, high = min(0.0, *values), max(0.0, *values)
            pad = 0.1 * (high - low or 1.0)
            ax.set_ylim(low - pad if low < 0 else 0.0, high + pad)
        ax.margins(y=0.1)  # room for the value labels (log axes; linear ones are padded above)
        ax.set_xlabel("concurrent sessions")
        ax.grid(True, which="both", alpha=0.3)
        if values:
            ax.legend(fontsize=8)
    lat.set_ylabel("added latency over direct (ms)")
    lat.set_title("(a) latency the proxy adds", fontsize=10)
    cpu.set_ylabel("CPU per call (ms)")
    cpu.set_title("(b) proxy process CPU per timed call", fontsize=10)
    meta = result.get("meta", {})
    litellm = result.get("litellm", {})
    missing = "" if litellm.get("status") == "measured" else " (LiteLLM not measured)"
    fig.suptitle(
        f"Gateway overhead, {_payload_label(result)}{missing}\n{meta.get('date', '?')[:10]}, "
        f"{meta.get('cpus', '?')} cores shared by every process, load average "
        f"{meta.get('load_avg_1m_before', '?')} before the run",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plot(result: dict[str, Any], path: Path) -> Path | None:
    """`plot_results`, or None with the reason printed when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "no plot: matplotlib is not installed (a dev dependency: pip install -e '.[dev]')",
            file=sys.stderr,
        )
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_results(result, path)
    return path


def _added(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fill in added latency per proxy row; the Polar / LiteLLM ratios per concurrency."""
    ratios: dict[str, Any] = {}
    by = {(r["target"], r["sessions"]): r for r in rows}
    for row in rows:
        direct = by.get(("direct", row["sessions"]))
        if row["target"] == "direct" or not direct or "p50_ms" not in row:
            continue
        row["added_p50_ms"] = round(row["p50_ms"] - direct["p50_ms"], 3)
        row["added_p99_ms"] = round(row["p99_ms"] - direct["p99_ms"], 3)
    for (target, sessions), row in by.items():
        other = by.get(("litellm", sessions))
        if target != "polar" or not other or "added_p50_ms" not in other:
            continue
        ratios[str(sessions)] = {
            "polar_added_p50_ms": row["added_p50_ms"],
            "litellm_added_p50_ms": other["added_p50_ms"],
            "added_p50_ratio": round(row["added_p50_ms"] / other["added_p50_ms"], 2)
            if other["added_p50_ms"] > 0
            else None,
            "calls_per_s_ratio": round(row["calls_per_s"] / other["calls_per_s"], 2),
        }
    return ratios


async def measure(bench: Bench, args: argparse.Namespace, targets: list[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    gateway_calls = 0
    run = secrets.token_hex(3)
    for sessions in args.concurrency:
        calls = args.calls_1 if sessions == 1 else max(1, args.calls_32 * 32 // sessions)
        for target in targets:
            keys = [
                mint_session_key(
                    SessionIdentity(f"bench-{run}-{target}-c{sessions}-{i}", f"bench-{run}"),
                    bench.settings.session_secret,
                )
                if target != "litellm"
                else bench.litellm_key
                for i in range(sessions)
            ]
            print(f"  {target}: {sessions} session(s) x {calls} calls", file=sys.stderr)
            pids = {name: bench.stack.pid(name) for name in bench.started}
            row = {"target": target} | await run_phase(
                args.request,
                bench.base_url(target),
                keys,
                calls,
                args.warmup,
                args.phase_limit_s,
                pids,
            )
            if target == "polar":
                gateway_calls += row["ok_calls_incl_warmup"]
            rows.append(row)
    return {"rows": rows, "gateway_calls": gateway_calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls-1", type=int, default=400, help="timed calls of the 1 session")
    parser.add_argument(
        "--calls-32", type=int, default=25, help="timed calls per session at 32 sessions"
    )
    parser.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 32],
        help="comma-separated session counts (default 1,32)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per session first")
    parser.add_argument(
        "--phase-limit-s", type=float, default=60.0, help="time bound of each timed phase"
    )
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument("--litellm-venv", type=Path, default=LITELLM_VENV)
    parser.add_argument(
        "--install-litellm", action="store_true", help=f"pip install {LITELLM_PIN} there first"
    )
    parser.add_argument(
        "--payload",
        choices=("small", "realistic"),
        default="small",
        help="small: system + user message, non-streamed (default); realistic: "
        f"{REALISTIC_TOKENS:,} tokens of history, {REALISTIC_TOOLS} tools, streamed to the caller",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results JSON (default {RESULTS.name}, or {REALISTIC_RESULTS.name} for realistic)",
    )
    parser.add_argument(
        "--prompt-tokens", type=int, default=len(PROMPT_IDS), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--gateway-root",
        type=Path,
        default=None,
        help="run the gateway from this checkout (e.g. a git worktree of an earlier commit): "
        "`python -m app.cli gateway` with it as working directory",
    )
    parser.add_argument(
        "--png",
        type=Path,
        default=None,
        help="plot (default: the results JSON's path with .png; none without matplotlib)",
    )
    parser.add_argument(
        "--plot-only",
        type=Path,
        metavar="JSON",
        default=None,
        help="run nothing: read this results file and write its plot (beside it, or --png)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, S3 data)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, args.prompt_tokens)
        return
    if args.plot_only:
        try:
            saved = json.loads(args.plot_only.read_text())
        except (OSError, ValueError) as exc:
            sys.exit(f"--plot-only: cannot read {args.plot_only}: {exc}")
        if not isinstance(saved, dict) or not isinstance(saved.get("rows"), list):
            sys.exit(f"--plot-only: {args.plot_only} is not a bench_gateway.py results file")
        plot = write_plot(saved, args.png or args.plot_only.with_suffix(".png"))
        if plot is None:
            sys.exit(1)
        print(f"plot: {plot}")
        return
    realistic = args.payload == "realistic"
    args.request = realistic_request() if realistic else REQUEST
    prompt_tokens = REALISTIC_TOKENS if realistic else len(PROMPT_IDS)
    if args.out is None:
        args.out = REALISTIC_RESULTS if realistic else RESULTS

    litellm: dict[str, Any] = {"status": "skipped", "reason": "--no-litellm"}
    venv: Path | None = None
    if not args.no_litellm:
        if args.install_litellm:
            print(f"installing {LITELLM_PIN} into {args.litellm_venv} …", file=sys.stderr)
            install_litellm(args.litellm_venv)
        version = litellm_version(args.litellm_venv)
        if version is None:
            litellm = {
                "status": "not installed",
                "reason": f"no LiteLLM in {args.litellm_venv}; rerun with --install-litellm "
                f"(pip install '{LITELLM_PIN}' into that venv)",
            }
        else:
            venv = args.litellm_venv
            litellm = {
                "status": "measured",
                "version": version,
                "pin": LITELLM_PIN,
                "server": _server_impl(str(venv / "bin" / "python")),
            }

    started = time.monotonic()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"warning: load average {load:.2f} before the run: figures will be noisy",
            file=sys.stderr,
        )
    tmp_dir = (
        contextlib.nullcontext(tempfile.mkdtemp(prefix="polar-bench-gw-"))
        if args.keep
        else tempfile.TemporaryDirectory(prefix="polar-bench-gw-")
    )
    with tmp_dir as tmp:
        bench = Bench(Path(tmp), venv, prompt_tokens)
        bench.gateway_root = args.gateway_root
        try:
            print("starting fake upstream, SeaweedFS, gateway …", file=sys.stderr)
            bench.start_core()
            targets = ["direct", "polar"]
            if venv is not None:
                print("starting LiteLLM's proxy …", file=sys.stderr)
                try:
                    bench.start_litellm()
                    targets.append("litellm")
                except StackError as exc:
                    litellm |= {"status": "failed", "reason": f"did not start: {exc}"}
            measured = asyncio.run(measure(bench, args, targets))
            records = check_records(bench, measured["gateway_calls"])
            ll_rows = [r for r in measured["rows"] if r["target"] == "litellm"]
            if ll_rows and any(r["calls"] == 0 for r in ll_rows):
                first = next(e for r in ll_rows for e in r["first_errors"])
                litellm |= {
                    "status": "failed",
                    "reason": f"calls failed: {first}",
                    "log_tail": bench.log_tail("litellm"),
                }
        finally:
            bench.stop()

    rows = measured["rows"]
    result: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "polar_server": _server_impl(sys.executable),
            "gateway_root": str(args.gateway_root) if args.gateway_root else None,
            "shared_cores": "client, gateway, SeaweedFS, fake upstream and LiteLLM on one machine",
            "load_avg_1m_before": round(load, 2),
            "total_s": round(time.monotonic() - started, 1),
        },
        "params": {
            "concurrency": args.concurrency,
            "calls_1": args.calls_1,
            "calls_32": args.calls_32,
            "warmup": args.warmup,
            "phase_limit_s": args.phase_limit_s,
            "payload": args.payload,
            "request": REQUEST
            if not realistic
            else {
                "messages": len(args.request["messages"]),
                "tools": len(args.request["tools"]),
                "bytes": len(json.dumps(args.request)),
                "stream": True,
            },
            "upstream": "raw ASGI app under uvicorn, vLLM answer shape, "
            f"{prompt_tokens} prompt ids, {len(RESPONSE_IDS)} sampled ids",
        },
        "rows": rows,
        "litellm": litellm,
        "records": records,
    }
    result["ratios"] = _added(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    plot = write_plot(result, args.png or args.out.with_suffix(".png"))
    print(f"\nresults: {args.out}" + (f", plot: {plot}" if plot else ""))
    if not records["ok"]:
        sys.exit(f"records check failed: {records}")


if __name__ == "__main__":
    main()
