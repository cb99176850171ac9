"""Console benchmark: the first render of a 200-call session page and of a 1,000-session
task page (and the list, a trace, two 200-call sessions compared, the training and topology
pages), on synthetic data in a fresh dev stack's Temporal and S3.

    .venv/bin/python bench/bench_console.py                  # 200 calls, 1,000 sessions
    .venv/bin/python bench/bench_console.py --calls 50 --sessions 100 --runs 3

The 200-call session is bench_builders' (`long_session`: the tiny Qwen3-style
tokenizer's template, tool calls with reasoning, two sub-agents, two compactions),
its CompletionRecords stored as the gateway stores them, its traces built by
`prefix_merging` with their rewards sidecar, plus harness and evaluator logs, a
report and a patch; a second session holds the same conversation (the compare page
reads both and finds no divergence: every call's digest compared). The workflows are
stand-ins named `Session` and `RolloutTask` (a worker of this script's own, on its own
queue) that return a synthetic
`SessionResult` and a `TaskResult` of `--sessions` sessions: real visibility
entries, histories and results, with no stage run. Each page is read through the
console's ASGI app: "first" is a fresh app's first request (its caches empty, the
tokenizer not loaded), "warm" the median of `--runs` more on the same app.

Prints a markdown table; writes bench/results/console.json. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from temporalio import workflow  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import SearchAttributePair, TypedSearchAttributes  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from app.console import create_app  # noqa: E402
from app.devstack import DevStack  # noqa: E402
from bench.bench_builders import long_session, run_builder  # noqa: E402
from bench.tiny_backend import TINY_MODEL  # noqa: E402
from polar import search_attributes as sa  # noqa: E402
from polar.contracts import SessionResult, TaskResult  # noqa: E402
from polar.records import CompletionRecord, SessionStatus  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage, TraceRewards, artifact_key, traces_key  # noqa: E402
from polar.temporal_client import connect  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results" / "console.json"
QUEUE = "console-bench"


@workflow.defn(name="Session")
class StandInSession:
    """Returns the result it is given (`raw["result"]`): a finished session, no stage run."""

    @workflow.run
    async def run(self, raw: dict[str, Any]) -> dict[str, Any]:
        return dict(raw["result"])


@workflow.defn(name="RolloutTask")
class StandInTask:
    """Returns the result it is given: a finished task of many sessions."""

    @workflow.run
    async def run(self, raw: dict[str, Any]) -> dict[str, Any]:
        return dict(raw["result"])


def session_records(sid: str, task_id: str, calls: int) -> list[CompletionRecord]:
    records = long_session(TINY_MODEL, calls)
    return [r.model_copy(update={"session_id": sid, "task_id": task_id}) for r in records]


def store_session(storage: Storage, records: list[CompletionRecord]) -> SessionResult:
    """The session's records, traces, rewards, logs, report and patch in S3; its result."""
    sid, task_id = records[0].session_id, records[0].task_id
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(storage.put_completion, records))
    out = run_builder("prefix_merging", records, TINY_MODEL)
    key = traces_key(sid, "prefix_merging")
    for trace in out.traces:
        trace.provenance.session_id = sid
    storage.put_traces(key, out.traces)
    for trace in out.traces:
        trace.reward = 1.0
    storage.put_rewards(key, TraceRewards.of(out.traces, SessionStatus.COMPLETED))
    log = "".join(f"step {i}: ran the tests, 3 failed\n" for i in range(5000)).encode()
    patch = "diff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n"
    patch += "@@ -1,3 +1,3 @@\n-    return x\n+    return x + 1\n"
    for name, data in {
        "harness-attempt1.stdout": log,
        "harness-attempt1.stderr": b"warning: slow\n",
        "evaluate.stdout": log[:20000],
        "evaluate.stderr": b"",
        "command-report.json": json.dumps({"patch_applied": True}).encode(),
        "command-model.patch": patch.encode(),
    }.items():
        storage.put_bytes(artifact_key(sid, name), data, "text/plain")
    return SessionResult(
        session_id=sid,
        task_id=task_id,
        index=0,
        status=SessionStatus.COMPLETED,
        reward=1.0,
        harness="command",
        num_completions=len(records),
        num_traces=len(out.traces),
        num_response_tokens=sum(int(sum(t.loss_mask)) for t in out.traces),
        traces_key=key,
        harness_started=True,
        stage_seconds={"prepare": 1.2, "run": 812.0, "build": 2.1, "evaluate": 30.5},
        hosts=["bench-host"],
    )


def task_result(task_id: str, sessions: int, seed: int = 0) -> TaskResult:
    """A finished task of `sessions` sessions with mixed statuses and rewards."""
    rng = random.Random(seed)
    results = []
    for i in range(sessions):
        status = rng.choices(
            [SessionStatus.COMPLETED, SessionStatus.HARNESS_FAILED, SessionStatus.ERROR],
            [0.8, 0.15, 0.05],
        )[0]
        error = status == SessionStatus.ERROR
        results.append(
            SessionResult(
                session_id=f"{task_id}-{uuid.uuid4().hex[:12]}-s{i}",
                task_id=task_id,
                index=i,
                status=status,
                reward=None if error else rng.choice([0.0, 0.25, 0.5, 1.0]),
                harness="command",
                num_completions=rng.randint(5, 200),
                num_response_tokens=rng.randint(500, 50_000),
                harness_started=True,
                error_type="ClientError" if error else None,
                error_stage="build" if error else None,
                error="build: S3 said no" if error else None,
                stage_seconds={"prepare": 1.0, "run": rng.uniform(60, 900), "build": 2.0},
                hosts=[f"node-{i % 16}"],
            )
        )
    return TaskResult(task_id=task_id, sessions=results)


def search_attributes(task_id: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [SearchAttributePair(sa.TASK_ID, task_id), SearchAttributePair(sa.HARNESS, "command")]
    )


async def start_workflows(
    client: Client, session: SessionResult, task: TaskResult, runtime: dict[str, str]
) -> str:
    """The stand-in Session and RolloutTask workflows, run to their end; the task's id."""
    attrs = TypedSearchAttributes(
        [
            SearchAttributePair(sa.TASK_ID, session.task_id),
            SearchAttributePair(sa.HARNESS, "command"),
        ]
    )
    spec: dict[str, Any] = {"task_id": session.task_id, "harness": {"kind": "command"}}
    spec["runtime"] = runtime
    spec["policy_version"] = 1  # as a trainer bridge tags its tasks: the training page
    await client.execute_workflow(
        "Session",
        {"task": spec, "result": session.model_dump(mode="json")},
        id=session.session_id,
        task_queue=QUEUE,
        search_attributes=attrs,
    )
    task_wf = f"task-{task.task_id}-{uuid.uuid4().hex[:8]}"
    await client.execute_workflow(
        "RolloutTask",
        {**spec, "num_sessions": len(task.sessions), "result": task.model_dump(mode="json")},
        id=task_wf,
        task_queue=QUEUE,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(sa.TASK_ID, task.task_id),
                SearchAttributePair(sa.HARNESS, "command"),
            ]
        ),
    )
    return task_wf


async def timed(app_factory: Callable[[], Any], url: str, runs: int) -> tuple[float, float, int]:
    """A fresh app's first GET of `url` and the median of `runs` more: seconds, and bytes."""
    transport = httpx.ASGITransport(app=app_factory())
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
        t0 = time.perf_counter()
        first = await http.get(url)
        first_s = time.perf_counter() - t0
        assert first.status_code == 200, first.text[:500]
        warm = []
        for _ in range(runs):
            t0 = time.perf_counter()
            await http.get(url)
            warm.append(time.perf_counter() - t0)
    return first_s, statistics.median(warm), len(first.content)


async def measure(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    storage = Storage(settings)
    client = await connect(settings)
    task_id = f"console-bench-{secrets.token_hex(3)}"
    sid = f"{task_id}-s0"
    t0 = time.perf_counter()
    records = session_records(sid, task_id, args.calls)
    session = await asyncio.to_thread(store_session, storage, records)
    twin = session_records(f"{task_id}-s1", task_id, args.calls)  # the same conversation
    twin_session = await asyncio.to_thread(store_session, storage, twin)
    task = task_result(task_id, args.sessions)
    task.sessions[:2] = [session, twin_session]  # the first two: the stored 200-call ones
    setup_s = time.perf_counter() - t0
    runner = UnsandboxedWorkflowRunner()
    workflows = [StandInSession, StandInTask]
    async with Worker(client, task_queue=QUEUE, workflows=workflows, workflow_runner=runner):
        task_wf = await start_workflows(client, session, task, {"kind": "docker"})

    def app() -> Any:
        return create_app(settings, client=client, storage=storage)

    pages = {
        "session (200 calls)": f"/sessions/{sid}",
        "task (1,000 sessions)": f"/tasks/{task_wf}",
        "tasks list": f"/?task={task_id}",
        "trace (longest)": f"/sessions/{sid}/traces/{longest_trace(storage, session)}",
        "compare (two 200-call sessions)": (
            f"/tasks/{task_wf}/compare?session={sid}&session={twin_session.session_id}"
        ),
        "training (the task, tagged)": f"/training?task={task_id}",
        "topology (no gateway running)": "/topology",
    }
    figures = {}
    for name, url in pages.items():
        first, warm, size = await timed(app, url, args.runs)
        figures[name] = {"first_s": first, "warm_s": warm, "html_bytes": size}
    prompts = sum(len(r.prompt_token_ids or ()) for r in records)
    return {
        "calls": len(records),
        "prompt_tokens": prompts,
        "sampled_tokens": sum(len(r.response_token_ids or ()) for r in records),
        "traces": session.num_traces,
        "sessions": len(task.sessions),
        "setup_s": setup_s,
        "pages": figures,
    }


def longest_trace(storage: Storage, session: SessionResult) -> int:
    assert session.traces_key is not None
    traces = storage.load_traces(session.traces_key)
    return max(range(len(traces)), key=lambda i: len(traces[i].prompt_ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5, help="warm requests after the first")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polar-bench-console-") as tmp:
        base = free_port(span=48)
        settings = Settings(
            data_dir=Path(tmp),
            temporal_address=f"127.0.0.1:{base}",
            temporal_ui_port=base + 1,
            s3_endpoint=f"http://127.0.0.1:{base + 30}",
            s3_bucket="polar-bench",
            session_secret=secrets.token_urlsafe(32),
            s3_access_key=f"bench-{secrets.token_hex(4)}",
            s3_secret_key=secrets.token_urlsafe(32),
            console_tokenizer_dir=TINY_MODEL,
        )
        stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
        log = lambda line: print(f"  {line}", file=sys.stderr)  # noqa: E731
        stack.start(stack.temporal(), log=log)
        stack.start(stack.seaweedfs(), log=log)
        try:
            Storage(settings).ensure_bucket()
            result = asyncio.run(measure(settings, args))
        finally:
            for name in ("temporal", "seaweedfs"):
                stack.stop(name, quiet=True, grace_s=0)
    result["meta"] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),  # a shared machine: others' load
    }
    report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


def report(result: dict[str, Any]) -> None:
    print(
        f"\n{result['calls']} calls, {result['prompt_tokens']:,} prompt tokens, "
        f"{result['sampled_tokens']:,} sampled, {result['traces']} traces; "
        f"task of {result['sessions']:,} sessions (setup {result['setup_s']:.1f} s, not timed); "
        f"load average {result['meta']['load_avg_1m_at_end']} on {result['meta']['cpus']} CPUs\n"
    )
    print("| page | first render (s) | warm, median (s) | HTML (KB) |")
    print("|---|---|---|---|")
    for name, f in result["pages"].items():
        print(f"| {name} | {f['first_s']:.3f} | {f['warm_s']:.3f} | {f['html_bytes'] / 1024:.0f} |")


if __name__ == "__main__":
    main()
