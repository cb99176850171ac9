"""Bare Temporal baseline for bench_scheduling: a task and its sessions with no Polar code.

`BareTask` starts N `BareSession` children; each runs five no-op activities of
the same shape as an empty Polar session (prepare, run, build, score,
teardown) on a queue layout like Polar's (`{queue}-init`, `-run`,
`-postrun`), with the same timeouts, heartbeat and retry policy. Inputs and
results are plain dataclasses; no search attributes, no queries, no pydantic.

    python bench/bare_temporal.py worker --address 127.0.0.1:7233 --queue bare --cap 20

runs a worker for every queue of `--queue` until SIGTERM (bench_scheduling
starts it as its own process, as it does `polar worker`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker


@dataclass
class BareTaskInput:
    task_id: str
    num_sessions: int


@dataclass
class BareSessionInput:
    session_id: str
    index: int
    task_id: str


@dataclass
class BareStageInput:
    session_id: str
    task_id: str
    stage: str


@dataclass
class BareStageResult:
    session_id: str
    stage: str
    ok: bool = True


@dataclass
class BareSessionResult:
    session_id: str
    index: int
    stages: list[str] = field(default_factory=list)


@dataclass
class BareTaskResult:
    task_id: str
    sessions: list[BareSessionResult]


@activity.defn(name="bare_stage")
async def bare_stage(request: BareStageInput) -> BareStageResult:
    """A stage that does nothing: what is left is Temporal's own round trip."""
    return BareStageResult(session_id=request.session_id, stage=request.stage)


# Polar's empty session: prepare (init), run (run), build + score (postrun), teardown (init)
STAGES = (
    ("prepare", "init"),
    ("run", "run"),
    ("build", "postrun"),
    ("score", "postrun"),
    ("teardown", "init"),
)


@workflow.defn(name="BareSession")
class BareSession:
    """Five no-op stage activities, each with Polar's timeouts and retry policy."""

    @workflow.run
    async def run(self, spec: BareSessionInput) -> BareSessionResult:
        queue = workflow.info().task_queue
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=3,
        )
        done: list[str] = []
        for stage, pool in STAGES:
            result = await workflow.execute_activity(
                bare_stage,
                BareStageInput(session_id=spec.session_id, task_id=spec.task_id, stage=stage),
                task_queue=f"{queue}-{pool}",
                start_to_close_timeout=timedelta(seconds=300),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=retry,
            )
            done.append(result.stage)
        return BareSessionResult(session_id=spec.session_id, index=spec.index, stages=done)


@workflow.defn(name="BareTask")
class BareTask:
    """Start `num_sessions` BareSession children at once and wait for all."""

    @workflow.run
    async def run(self, spec: BareTaskInput) -> BareTaskResult:
        nonce = workflow.uuid4().hex[:12]
        runs = [
            workflow.execute_child_workflow(
                BareSession.run,
                BareSessionInput(
                    session_id=f"{spec.task_id}-{nonce}-s{i}", index=i, task_id=spec.task_id
                ),
                id=f"{spec.task_id}-{nonce}-s{i}",
                task_queue=workflow.info().task_queue,
            )
            for i in range(spec.num_sessions)
        ]
        return BareTaskResult(task_id=spec.task_id, sessions=list(await asyncio.gather(*runs)))


async def serve(address: str, queue: str, cap: int, ready_file: Path | None) -> None:
    """Workflow worker on `queue`, activity workers on its -init/-run/-postrun queues."""
    client = await Client.connect(address)
    workers = [Worker(client, task_queue=queue, workflows=[BareTask, BareSession])]
    workers += [
        Worker(
            client,
            task_queue=f"{queue}-{pool}",
            activities=[bare_stage],
            max_concurrent_activities=cap,
        )
        for pool in ("init", "run", "postrun")
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    for w in workers:
        await w.__aenter__()
    if ready_file:
        ready_file.write_text(str(os.getpid()))
    try:
        await stop.wait()
    finally:
        for w in reversed(workers):
            await w.__aexit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="serve the bare workflows and activities")
    w.add_argument("--address", required=True)
    w.add_argument("--queue", required=True)
    w.add_argument("--cap", type=int, default=20, help="activity slots per stage queue")
    w.add_argument("--ready-file", type=Path)
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.queue, args.cap, args.ready_file))


if __name__ == "__main__":
    main()
