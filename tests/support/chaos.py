"""The chaos soak's engine (issue 22, item 3): a long task on the real stack, faults at random.

One node (a gateway and a `polar worker` process, tests/support/faults.py) in front of
a pool of two fake inference replicas (processes, bench/fake_vllm.py's answer shape),
sharing a Temporal dev server and SeaweedFS (a `DevStack`), runs one task of the fault
agent in the `local` runtime. While it runs, faults are injected at seeded random
points of its progress, one after the other:

* `worker_kill_init` / `_run` / `_postrun`: the worker SIGKILLed while a session is in
  that stage (a one-shot armed prepare action or evaluator that hangs; a harness
  mid-call), then restarted;
* `gateway_restart`: the gateway SIGKILLed and restarted on its port;
* `replica_kill`: one of the two inference replicas SIGKILLed (back after a while);
* `s3_outage`: SeaweedFS stopped for `s3_outage_s`;
* `temporal_restart`: the Temporal dev server stopped and restarted on its SQLite file;
* `dockerd_restart`: skipped, saying why: the soak runs `local` sessions only;
* `disk_full`: the worker's runtimes dir (a size-limited tmpfs, root only) filled for
  a moment;
* `sandbox_start`: the next harness's `unshare` fails once (the worker runs in a mount
  namespace of its own where `unshare` is a wrapper armed by a file; root only).

Afterwards `check` builds the ledger (which fault's time window each session's history
overlaps, and the activities in flight then) and the invariants: every session ended
ok or, only when a fault hit it, `infra_error` with a reason true to that fault; every
answer the harness saw recorded once in S3 and traced once; no runtime dir or sandbox
user's process left; every workflow history of the task replays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError

from app.devstack import DevStack, Service, http_ready
from polar.client.sdk import PolarClient, TaskRun
from polar.contracts import SessionResult, TaskResult
from polar.records import OutcomeClass, SessionStatus
from polar.settings import Settings
from polar.storage import Storage
from polar.temporal_client import connect
from tests.support.faults import Node, answered, fault_task
from tests.support.ports import free_port
from workflows import replay as rp

FAULTS: tuple[str, ...] = (
    "worker_kill_init",
    "worker_kill_run",
    "worker_kill_postrun",
    "gateway_restart",
    "replica_kill",
    "s3_outage",
    "temporal_restart",
    "dockerd_restart",
    "disk_full",
    "sandbox_start",
)
ALLOWED_REASONS: dict[str, frozenset[str]] = {
    "worker_kill_init": frozenset({"lost_host", "engine", "sandbox_start"}),
    "worker_kill_run": frozenset({"lost_host", "engine", "sandbox_start"}),
    "worker_kill_postrun": frozenset({"lost_host", "engine", "evaluator_host"}),
    "gateway_restart": frozenset({"gateway", "inference_backend"}),
    "replica_kill": frozenset({"gateway", "inference_backend"}),
    "s3_outage": frozenset({"storage", "gateway", "inference_backend"}),
    "temporal_restart": frozenset({"lost_host", "engine", "storage"}),
    "disk_full": frozenset({"sandbox_start", "engine", "storage", "evaluator_host"}),
    "sandbox_start": frozenset({"sandbox_start"}),
}
"""The infra reasons a session hit by each fault may end with (any other is a finding)."""
STAGES = {
    "prepare_runtime": "init",
    "run_harness": "run",
    "prepare_eval_runtime": "postrun",
    "evaluate": "postrun",
}
REPO = Path(__file__).resolve().parents[2]


@dataclass
class SoakConfig:
    sessions: int = 300
    minutes: float = 40.0
    seed: int = 0
    turns: int = 3
    pause_s: float = 0.3
    s3_outage_s: float = 20.0
    replica_down_s: float = 15.0
    disk_full_s: float = 3.0
    max_run: int = 8
    retries: int = 2
    faults: tuple[str, ...] = FAULTS
    spread: tuple[float, float] = (0.03, 0.7)
    """Faults are injected at random points of the task's progress (fraction of sessions
    done) within this range."""
    early: tuple[str, ...] = ()
    """Faults injected first, before the random ones (a short task prepares every session
    early on, so a kill in init must come first)."""
    uid_pool: str = "61400-61899"
    """The soak worker's own sandbox uids (within the default pool, above what other workers
    of this machine use): a process of one of them after the soak is a leak of the soak's."""
    progress: bool = True


@dataclass
class Injection:
    fault: str
    at: float = 0.0
    until: float = 0.0
    skipped: str = ""
    note: str = ""


@dataclass
class FaultRow:
    fault: str
    injected: int = 0
    skipped: str = ""
    sessions: list[str] = field(default_factory=list)
    stages: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    lost: int = 0
    duplicated: int = 0
    leaked: int = 0


@dataclass
class SoakReport:
    config: dict[str, Any]
    seconds: float
    sessions: int
    finished: bool
    outcomes: dict[str, int]
    rows: list[FaultRow]
    injections: list[Injection]
    answered: int = 0
    recorded: int = 0
    backend_answers: int = 0
    lost: int = 0
    duplicated: int = 0
    retries: int = 0
    leaked_dirs: list[str] = field(default_factory=list)
    leaked_processes: list[str] = field(default_factory=list)
    histories: int = 0
    replay_failures: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """The markdown table: one row per fault, then the totals."""
        lines = [
            "| fault | injected | sessions affected | their outcomes | retries "
            "| lost / duplicated records | leaked runtimes |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in self.rows:
            if row.skipped:
                lines.append(f"| {row.fault} | 0 (skipped: {row.skipped}) | | | | | |")
                continue
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row.outcomes.items()))
            lines.append(
                f"| {row.fault} | {row.injected} | {len(row.sessions)} | {outcomes} "
                f"| {row.retries} | {row.lost} / {row.duplicated} | {row.leaked} |"
            )
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        leaked = len(self.leaked_dirs) + len(self.leaked_processes)
        lines.append(
            f"| **all** | {sum(r.injected for r in self.rows)} | {self.sessions} | {outcomes} "
            f"| {self.retries} | {self.lost} / {self.duplicated} | {leaked} |"
        )
        return "\n".join(lines)

    def summary(self) -> str:
        return (
            f"{self.sessions} sessions in {self.seconds:.0f} s; {self.answered} answers seen by "
            f"harnesses, {self.recorded} records in S3, {self.backend_answers} answers from the "
            f"replicas; {self.histories} histories replayed, {len(self.replay_failures)} failed; "
            f"violations: {len(self.violations)}"
        )


# --------------------------------------------------------------------------- the replicas


def serve_replica(port: int, log: Path, name: str) -> None:
    """A fake vLLM replica (a process of its own, so it can be SIGKILLed): answers every chat
    completion with a text whose id names the replica and its process, and logs each id it
    answered."""
    import uvicorn

    from bench.fake_vllm import json_asgi_app, vllm_answer

    count = 0

    async def route(method: str, path: str, query: str, body: bytes) -> tuple[int, Any] | None:
        nonlocal count
        if path == "/health":
            return 200, {"ok": True}
        if path.endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "policy", "object": "model"}]}
        if path.endswith("/chat/completions"):
            count += 1
            answer = vllm_answer(json.loads(body), count, prompt_ids=[1, 2], response_ids=[3])
            # the pid too: a replica killed and started again counts from 1 again, and two
            # answers sharing an id would read as one answer recorded twice
            answer["id"] = f"chatcmpl-{name}-{os.getpid()}-{count}"
            with log.open("a") as fh:
                fh.write(answer["id"] + "\n")
            return 200, answer
        return None

    uvicorn.run(json_asgi_app(route), host="127.0.0.1", port=port, log_level="warning")


# --------------------------------------------------------------------------- the soak


class Soak:
    """One soak: its node, replicas and task; `run` injects the faults, `check` reports."""

    def __init__(self, stack: DevStack, work: Path, config: SoakConfig) -> None:
        self.stack, self.work, self.config = stack, work, config
        self.rng = random.Random(config.seed)
        self.marks = work / "marks"
        self.agent_log = work / "answers.jsonl"
        self.replica_logs = [work / "replica-a.log", work / "replica-b.log"]
        self.replica_ports = [free_port(), free_port()]
        self.queue = f"polar-soak-{config.seed}-{os.getpid()}"
        urls = ",".join(f"http://127.0.0.1:{p}/v1" for p in self.replica_ports)
        base = stack.settings.model_copy(
            update={
                "task_queue": self.queue,
                "upstream_urls": urls,
                "upstream_health_interval_s": 2.0,
                "sandbox_uid_pool": config.uid_pool,
                "max_run": config.max_run,
            }
        )
        self.node = Node(base, work / "node", "soak")
        self.runtimes = Path(self.node.settings.data_dir) / "runtimes"
        self.injections: list[Injection] = []
        self.disk_reason = self._can_fill_disk()
        self.sandbox_reason = self._can_fail_sandbox()
        self.run: TaskRun | None = None
        self.polar: PolarClient | None = None
        self.done = 0

    # ---------------------------------------------------------------- set up, tear down
    def _can_fill_disk(self) -> str:
        if os.geteuid() != 0:
            return "a size-limited tmpfs for the runtimes dir needs root"
        if shutil.which("mount") is None:
            return "no mount(8)"
        return ""

    def _can_fail_sandbox(self) -> str:
        if os.geteuid() != 0:
            return "a worker mount namespace with a failing unshare needs root"
        if shutil.which("unshare") is None:
            return "no unshare(1)"
        return ""

    def start(self) -> None:
        for directory in (self.work, self.marks):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o777 if directory == self.marks else 0o711)
        self.agent_log.touch()
        self.agent_log.chmod(0o666)  # appended by the sandbox users
        for i, port in enumerate(self.replica_ports):
            self.node.stack.start(self._replica(i, port), log=lambda _: None)
        if not self.disk_reason:
            self.runtimes.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=256m,mode=0711", "polar-soak", self.runtimes],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                self.disk_reason = f"mount tmpfs failed: {done.stderr.strip()}"
        if not self.sandbox_reason:
            self._write_unshare_wrapper()
        self.node.start_gateway()
        self.start_worker()

    def _replica(self, index: int, port: int) -> Service:
        name = "ab"[index]
        argv = [sys.executable, "-m", "tests.support.chaos", "replica", str(port)]
        argv += [str(self.replica_logs[index]), name]
        ready = http_ready(f"http://127.0.0.1:{port}/health")
        return Service(f"replica-{name}", argv, ready, start_timeout_s=30, cwd=str(REPO))

    def _write_unshare_wrapper(self) -> None:
        real = shutil.which("unshare", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
        assert real is not None
        self.unshare = Path(real)
        bin_dir = self.work / "bin"
        bin_dir.mkdir(exist_ok=True)
        copy = bin_dir / "unshare-real"
        shutil.copy2(real, copy)
        arm, claimed = self.marks / "sandbox.arm", self.marks / "sandbox.hit"
        self.wrapper = bin_dir / "unshare"
        self.wrapper.write_text(
            "#!/bin/sh\n"
            "# the soak's sandbox start failure: the next harness's unshare fails once\n"
            'case "$*" in *agent.py*)\n'
            f"  if mv {arm} {claimed} 2>/dev/null; then\n"
            '    echo "unshare: injected sandbox start failure" >&2; exit 1\n'
            "  fi;;\nesac\n"
            f'exec {copy} "$@"\n'
        )
        self.wrapper.chmod(0o755)

    def start_worker(self) -> None:
        """The node's worker, in a mount namespace of its own where `unshare` is the armed
        wrapper (when the sandbox start fault can be made here)."""
        service = self.node.stack.worker()
        argv = [*service.argv, "--queues", "workflow,init,run,postrun"]
        argv += ["--max-run", str(self.config.max_run)]
        if not self.sandbox_reason:
            bind = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", bind]
            argv += ["polar-soak-worker", str(self.wrapper), str(self.unshare), *service.argv]
            argv += ["--queues", "workflow,init,run,postrun", "--max-run", str(self.config.max_run)]
        self.node.stack.start(replace(service, argv=argv), log=lambda _: None)

    def close(self) -> None:
        self.node.close()
        for name in ("replica-a", "replica-b"):
            self.node.stack.stop(name, quiet=True, grace_s=0)
        if not self.disk_reason:
            subprocess.run(["umount", "-l", self.runtimes], capture_output=True)

    # ---------------------------------------------------------------- the task
    def spec(self) -> Any:
        hang = "if mv {m}/{s}.arm {m}/{s}.hit 2>/dev/null; then sleep 120; fi"
        spec = fault_task(
            f"soak-{self.config.seed}-{int(time.time())}",
            sessions=self.config.sessions,
            turns=self.config.turns,
            pause_s=self.config.pause_s,
            log=self.agent_log,
            heartbeat_s=10,
            prepare=hang.format(m=self.marks, s="init") + "; true",
            evaluator=hang.format(m=self.marks, s="postrun") + "; test -s answer.txt",
        )
        data = spec.model_dump(mode="json")
        data["infra_errors"] = {"group": "wait", "retries": self.config.retries}
        return type(spec).model_validate(data)

    async def execute(self) -> tuple[TaskResult | None, float]:
        """Submit the task, inject every fault at its random point, wait for the end."""
        settings = self.node.settings
        self.polar = PolarClient(await connect(settings), settings)
        began = time.monotonic()
        self.run = await self.polar.submit(self.spec())
        deadline = began + self.config.minutes * 60
        waiting = asyncio.ensure_future(self._result())
        ticker = asyncio.ensure_future(self._progress(began))
        try:
            await self._inject_all(waiting, deadline)
            remaining = max(1.0, deadline - time.monotonic())
            try:
                result: TaskResult | None = await asyncio.wait_for(waiting, remaining)
            except TimeoutError:
                result = None
                with contextlib.suppress(Exception):
                    await self.polar.cancel(self.run)
        finally:
            ticker.cancel()
            if self.config.progress:
                print(file=sys.stderr)
        return result, time.monotonic() - began

    async def _result(self) -> TaskResult:
        """The task's result; the long poll is taken up again when Temporal restarts."""
        assert self.polar is not None and self.run is not None
        while True:
            try:
                return await self.polar.wait(self.run)
            except RPCError:
                await asyncio.sleep(2)

    async def _progress(self, began: float) -> None:
        while True:
            self.done = self.harnesses_done()
            if self.config.progress:
                elapsed = time.monotonic() - began
                faults = sum(1 for i in self.injections if not i.skipped)
                print(
                    f"\r  soak {self.done}/{self.config.sessions} harnesses done, "
                    f"{faults} faults injected, {elapsed / 60:4.1f} min",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            await asyncio.sleep(3)

    def harnesses_done(self) -> int:
        """Sessions whose harness answered every turn (the task's own progress advances a
        batch of sessions at a time)."""
        turns = Counter(line["session_id"] for line in answered(self.agent_log))
        return sum(1 for n in turns.values() if n >= self.config.turns)

    async def _inject_all(self, waiting: asyncio.Future[Any], deadline: float) -> None:
        early = [(0.0, f) for f in self.config.early if f in self.config.faults]
        rest = [f for f in self.config.faults if f not in self.config.early]
        points = early + sorted((self.rng.uniform(*self.config.spread), f) for f in rest)
        for point, fault in points:
            target = int(point * self.config.sessions)
            while self.done < target and not waiting.done() and time.monotonic() < deadline:
                await asyncio.sleep(1)
            if waiting.done() or time.monotonic() >= deadline:
                self.injections.append(Injection(fault, skipped="the task ended before it"))
                continue
            await asyncio.sleep(self.rng.uniform(0, 3))
            injection = Injection(fault, at=time.time())
            try:
                await getattr(self, f"_{fault}")(injection)
            except Exception as exc:  # noqa: BLE001 - an injection that failed is reported
                injection.skipped = injection.skipped or f"injection failed: {exc!r}"
            injection.until = time.time()
            self.injections.append(injection)
            if self.config.progress:
                what = injection.skipped or injection.note or "done"
                print(f"\n  fault {fault} at {point:.0%}: {what}", file=sys.stderr)

    # ---------------------------------------------------------------- the faults
    async def _armed_hang(self, stage: str, injection: Injection) -> None:
        arm, hit = self.marks / f"{stage}.arm", self.marks / f"{stage}.hit"
        hit.unlink(missing_ok=True)
        arm.touch()
        arm.chmod(0o666)
        for _ in range(240):
            if hit.exists():
                break
            await asyncio.sleep(0.25)
        else:
            arm.unlink(missing_ok=True)
            injection.skipped = f"no {stage} command started within 60 s"
            return
        injection.at = time.time()  # a session is in the stage now
        await asyncio.sleep(1)
        await self._restart_worker(injection)

    async def _restart_worker(self, injection: Injection) -> None:
        pid = self.node.kill("worker")
        self.start_worker()
        injection.note = f"worker {pid} SIGKILLed, now {self.node.pid('worker')}"

    async def _worker_kill_init(self, injection: Injection) -> None:
        await self._armed_hang("init", injection)

    async def _worker_kill_postrun(self, injection: Injection) -> None:
        await self._armed_hang("postrun", injection)

    async def _worker_kill_run(self, injection: Injection) -> None:
        for _ in range(120):  # a harness answered within the last 2 s: one is mid-run
            lines = answered(self.agent_log)
            if lines and time.time() - lines[-1]["t"] < 2:
                break
            await asyncio.sleep(0.5)
        injection.at = time.time()
        await self._restart_worker(injection)

    async def _gateway_restart(self, injection: Injection) -> None:
        pid = self.node.kill("gateway")
        await asyncio.sleep(1)
        self.node.start_gateway()
        injection.note = f"gateway {pid} SIGKILLed, restarted on its port"

    async def _replica_kill(self, injection: Injection) -> None:
        pid = self.node.stack.kill("replica-b")
        await asyncio.sleep(self.config.replica_down_s)
        self.node.stack.start(self._replica(1, self.replica_ports[1]), log=lambda _: None)
        injection.note = f"replica b ({pid}) SIGKILLed, back after {self.config.replica_down_s} s"

    async def _s3_outage(self, injection: Injection) -> None:
        try:
            self.stack.stop("seaweedfs", quiet=True)
            await asyncio.sleep(self.config.s3_outage_s)
        finally:
            self.stack.start(self.stack.seaweedfs(), log=lambda _: None)
        injection.note = f"SeaweedFS stopped for {self.config.s3_outage_s} s"

    async def _temporal_restart(self, injection: Injection) -> None:
        try:
            self.stack.stop("temporal", quiet=True)
            await asyncio.sleep(2)
        finally:
            self.stack.start(self.stack.temporal(), log=lambda _: None)
        injection.note = "dev server stopped and restarted on its SQLite file"

    async def _dockerd_restart(self, injection: Injection) -> None:
        injection.skipped = (
            "the soak runs local-runtime sessions only (no docker session to hit; restarting "
            "the machine's shared dockerd would hit other tests)"
        )

    async def _disk_full(self, injection: Injection) -> None:
        if self.disk_reason:
            injection.skipped = self.disk_reason
            return
        filler = self.runtimes / ".soak-filler"
        stat = os.statvfs(self.runtimes)
        free = stat.f_bavail * stat.f_frsize
        with contextlib.suppress(OSError), filler.open("wb") as fh:
            os.posix_fallocate(fh.fileno(), 0, free)
        try:
            await asyncio.sleep(self.config.disk_full_s)
        finally:
            filler.unlink(missing_ok=True)
        injection.note = f"{free >> 20} MiB tmpfs filled for {self.config.disk_full_s} s"

    async def _sandbox_start(self, injection: Injection) -> None:
        if self.sandbox_reason:
            injection.skipped = self.sandbox_reason
            return
        arm, hit = self.marks / "sandbox.arm", self.marks / "sandbox.hit"
        hit.unlink(missing_ok=True)
        arm.touch()
        for _ in range(240):
            if hit.exists():  # claimed since the arm: the window is [arm, seen]
                injection.note = "one harness's unshare failed"
                return
            await asyncio.sleep(0.25)
        arm.unlink(missing_ok=True)
        injection.skipped = "no harness started within 60 s"

    # ---------------------------------------------------------------- after it
    async def check(self, result: TaskResult | None, seconds: float) -> SoakReport:
        assert self.polar is not None and self.run is not None
        client = self.polar.client
        histories = await task_histories(client, self.run.workflow_id)
        sessions = {s.session_id: s for s in result.sessions} if result else {}
        report = SoakReport(
            config={k: v for k, v in asdict(self.config).items() if k != "progress"},
            seconds=seconds,
            sessions=len(sessions),
            finished=result is not None,
            outcomes=dict(result.outcome_counts) if result else {},
            rows=[],
            injections=self.injections,
        )
        if result is None:
            report.violations.append(f"the task did not end within {self.config.minutes} min")
        report.histories = len(histories)
        for history in histories:
            replayed = await rp.replay(history)
            if not replayed.ok:
                report.replay_failures.append(f"{history.workflow_id}: {replayed.explanation}")
        windows = {h.workflow_id: session_window(h) for h in histories}
        seen = Counter(a["id"] for a in answered(self.agent_log))
        by_session: dict[str, list[str]] = {}
        for line in answered(self.agent_log):
            by_session.setdefault(line["session_id"], []).append(line["id"])
        report.answered = sum(seen.values())
        report.backend_answers = sum(
            len(p.read_text().split()) for p in self.replica_logs if p.exists()
        )
        hits = self._hits(windows)
        per_session = {
            sid: self._session_records(s, by_session.get(sid, [])) for sid, s in sessions.items()
        }
        report.recorded = sum(r["recorded"] for r in per_session.values())
        report.lost = sum(r["lost"] for r in per_session.values())
        report.duplicated = sum(r["duplicated"] for r in per_session.values())
        retries = {sid: retry_count(sessions[sid], windows.get(sid)) for sid in sessions}
        report.retries = sum(retries.values())
        report.leaked_dirs = [p.name for p in self.leaked_dirs()]
        report.leaked_processes = pool_processes(self.config.uid_pool)
        for session_id, session in sorted(sessions.items()):
            report.violations += judge(
                session, hits.get(session_id, set()), per_session[session_id]
            )
        for fault in self.config.faults:
            row = FaultRow(fault)
            done = [i for i in self.injections if i.fault == fault and not i.skipped]
            row.injected = len(done)
            if not done:
                row.skipped = next((i.skipped for i in self.injections if i.fault == fault), "")
            hit = sorted(sid for sid, faults in hits.items() if fault in faults and sid in sessions)
            row.sessions = hit
            for sid in hit:
                outcome = sessions[sid].outcome
                label = outcome.label if outcome else "cancelled"
                row.outcomes[label] = row.outcomes.get(label, 0) + 1
                row.retries += retries[sid]
                row.lost += per_session[sid]["lost"]
                row.duplicated += per_session[sid]["duplicated"]
                row.leaked += sum(1 for d in report.leaked_dirs if d == sid)
            for injection in done:
                for stage, n in stages_at(windows, injection.at).items():
                    row.stages[stage] = row.stages.get(stage, 0) + n
            report.rows.append(row)
        return report

    def _hits(self, windows: dict[str, Window]) -> dict[str, set[str]]:
        """Session id -> the faults whose time window its life overlaps."""
        hits: dict[str, set[str]] = {}
        for injection in self.injections:
            if injection.skipped:
                continue
            for sid, window in windows.items():
                if window.kind == "Session" and window.overlaps(injection.at, injection.until):
                    hits.setdefault(sid, set()).add(injection.fault)
        return hits

    def _session_records(self, session: SessionResult, seen: list[str]) -> dict[str, int]:
        """Lost and duplicated records of one session: what its harness saw answered against
        S3's records against its traces."""
        assert self.polar is not None
        records = self.polar.storage.list_completions(session.session_id)
        ids = [r.record_id for r in records]
        responses = Counter(r.response.get("id") for r in records if r.response)
        lost = sum(1 for rid in set(seen) if responses[rid] == 0)
        duplicated = (len(ids) - len(set(ids))) + sum(n - 1 for n in responses.values() if n > 1)
        if session.traces_key:
            traced = [x for t in self.polar.load_traces(session) for x in t.provenance.record_ids]
            duplicated += len(traced) - len(set(traced))
            if session.status == SessionStatus.COMPLETED:
                unseen = sum(session.unseen_completions.values())
                lost += max(0, len(set(ids) - set(traced)) - unseen)
        return {"recorded": len(ids), "lost": lost, "duplicated": duplicated}

    def leaked_dirs(self) -> list[Path]:
        if not self.runtimes.exists():
            return []
        return [p for p in self.runtimes.iterdir() if not p.name.startswith(".")]


# --------------------------------------------------------------------------- ledger helpers


@dataclass
class Window:
    kind: str
    start: float
    end: float
    activities: list[tuple[str, float, float, int]]
    """(activity, in flight from, closed, attempt) of each closed activity."""

    def overlaps(self, start: float, end: float) -> bool:
        """Whether one of its activities was in flight within [start, end]."""
        return any(began <= end and start <= closed for _, began, closed, _ in self.activities)


def _seconds(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


def session_window(history: WorkflowHistory) -> Window:
    """A workflow's life and its activity attempts, from its history."""
    events = list(history.events)
    kind = events[0].workflow_execution_started_event_attributes.workflow_type.name
    names: dict[int, str] = {}
    scheduled_at: dict[int, float] = {}
    started: dict[int, float] = {}
    attempts: dict[int, int] = {}
    activities = []
    closing = {
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
    }
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            names[event.event_id] = attrs.activity_type.name
            scheduled_at[event.event_id] = _seconds(event)
        elif event.event_type in closing:
            scheduled = getattr(event, closing[event.event_type]).scheduled_event_id
            # the started event is written with the close: its time is the last attempt's, so
            # an activity run more than once counts as in flight from its scheduling on
            attempt = attempts.get(scheduled, 1)
            began = started.get(scheduled, _seconds(event))
            if attempt > 1:
                began = scheduled_at.get(scheduled, began)
            activities.append((names.get(scheduled, "?"), began, _seconds(event), attempt))
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            began_attrs = event.activity_task_started_event_attributes
            started[began_attrs.scheduled_event_id] = _seconds(event)
            attempts[began_attrs.scheduled_event_id] = began_attrs.attempt
    return Window(kind, _seconds(events[0]), _seconds(events[-1]), activities)


def stages_at(windows: dict[str, Window], at: float) -> dict[str, int]:
    """How many sessions had each stage's activity in flight at `at`."""
    out: Counter[str] = Counter()
    for window in windows.values():
        if window.kind != "Session":
            continue
        for activity, began, closed, _ in window.activities:
            if began <= at <= closed:
                out[STAGES.get(activity, activity)] += 1
    return dict(out)


def retry_count(session: SessionResult, window: Window | None) -> int:
    """Reruns of a session: its infra attempts plus each stage activity's retried attempts."""
    retried = sum(a[3] - 1 for a in window.activities) if window else 0
    return len(session.infra_attempts) + retried


def judge(session: SessionResult, hits: set[str], records: dict[str, int]) -> list[str]:
    """What is wrong with one session's end, given the faults that hit it."""
    out = []
    outcome = session.outcome
    name = f"session {session.session_id} (faults: {', '.join(sorted(hits)) or 'none'})"
    if outcome is None:
        return [f"{name}: cancelled"]
    if outcome.outcome == OutcomeClass.OK:
        if session.reward != 1.0:
            out.append(f"{name}: ok with reward {session.reward}")
    elif outcome.outcome == OutcomeClass.INFRA_ERROR:
        allowed = (
            set().union(*(ALLOWED_REASONS.get(f, frozenset()) for f in hits)) if hits else set()
        )
        reason = outcome.reason.value if outcome.reason else ""
        if reason not in allowed:
            out.append(f"{name}: {outcome.label} ({outcome.detail}), not from a fault that hit it")
        if session.reward is not None:
            out.append(f"{name}: infra_error with reward {session.reward}")
    else:
        out.append(f"{name}: {outcome.label} ({outcome.detail}; error {session.error})")
    for attempt in session.infra_attempts:
        reason = attempt.split(":")[1].split()[0] if attempt.startswith("infra_error:") else ""
        allowed = (
            set().union(*(ALLOWED_REASONS.get(f, frozenset()) for f in hits)) if hits else set()
        )
        if reason and reason not in allowed:
            out.append(f"{name}: retried after {attempt!r}, not from a fault that hit it")
    if records["lost"] or records["duplicated"]:
        out.append(f"{name}: {records['lost']} lost, {records['duplicated']} duplicated records")
    return out


async def task_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """The histories of a task's workflows: the task, its batches and its sessions."""
    ids = [workflow_id]
    async for execution in client.list_workflows(f"RootWorkflowId = '{workflow_id}'"):
        if execution.id != workflow_id:
            ids.append(execution.id)
    return [await rp.fetch_history(client, wid) for wid in ids]


def pool_processes(pool: str) -> list[str]:
    """Processes of the soak's sandbox users (`pool`: FIRST-LAST): `pid uid cmdline` each."""
    first, last = (int(x) for x in pool.split("-"))
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
            if first <= uid <= last:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                out.append(f"{entry.name} {uid} {cmd.strip()}")
    return out


async def soak(stack: DevStack, work: Path, config: SoakConfig) -> SoakReport:
    """Run one soak on `stack` (Temporal and SeaweedFS running) in `work`; its report."""
    run = Soak(stack, work, config)
    try:
        run.start()
        result, seconds = await run.execute()
        await asyncio.sleep(2)  # the last teardowns' processes exit
        return await run.check(result, seconds)
    finally:
        run.close()


def bench_stack(work: Path) -> DevStack:
    """A Temporal dev server and SeaweedFS of the bench's own, state under `work`."""
    import secrets

    base = free_port(span=48)
    settings = Settings(
        data_dir=work / "stack",
        temporal_address=f"127.0.0.1:{base}",
        temporal_ui_port=base + 1,
        s3_endpoint=f"http://127.0.0.1:{base + 30}",
        s3_bucket="polar-soak",
        gateway_port=base + 40,
        admin_port=base + 42,
        source_roots=f"{work},{REPO}",
        session_secret=secrets.token_urlsafe(32),
        s3_access_key=f"polar-soak-{secrets.token_hex(4)}",
        s3_secret_key=secrets.token_urlsafe(32),
        log_format="text",
    )
    (work / "stack").mkdir(parents=True, exist_ok=True)
    stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
    stack.start(stack.temporal(), log=lambda _: None)
    stack.start(stack.seaweedfs(), log=lambda _: None)
    Storage(stack.settings).ensure_bucket()
    return stack


if __name__ == "__main__" and sys.argv[1:2] == ["replica"]:
    serve_replica(int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
