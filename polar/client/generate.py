"""Offline data generation: run a harness over a SWE-bench-style dataset, keep what resolves.

    summary = await generate(
        polar, load_instances("instances.jsonl"),
        harness=HarnessSpec(kind="codex", model="policy"),
        sessions_per_instance=4, out=Path("sft-out"), source_root="repos",
    )

Each instance becomes a TaskSpec (`polar.tasks.swe.instance_to_task`: the problem
statement as instruction, the repository at its base commit, the `swebench`
evaluator). At most `concurrency` tasks run at once; each task's group is read
as soon as it finishes (`PolarClient.iter_groups`, traces loaded from S3), and
only its resolved sessions are kept: status `completed` and reward ≥ 1 (every
FAIL_TO_PASS test passes, every PASS_TO_PASS test still passes). The backend is
whatever the gateway is configured with (`POLAR_UPSTREAM_URLS`); the harness
asks it for `harness.model`.

Written under `out` (by `polar.client.export.export_traces`, kept sessions only):

* `sft.jsonl`: the SFT view (`messages`, `tools`) of the kept sessions.
* `traces.jsonl` and `dataset/`: their token-level traces as RL rows (JSONL
  and a Hugging Face dataset; `datasets.load_from_disk`).
* `manifest.json`: the export's manifest (`source` says it was generated).
* `summary.json`: `GenerateSummary` — attempted, resolved, acceptance rate,
  per repository, failed and errored counts, the kept session ids.

A session is *resolved* as above, *failed* when it was graded and not
resolved (a wrong patch, an empty one, a harness that crashed or timed out),
*errored* when it has no reward (an evaluator error, a stage that failed, a
task that ended without a result: all of its sessions count as errored).
The acceptance rate is resolved sessions over attempted sessions.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polar.client import export as ex
from polar.client.sft import REWARD_TOLERANCE, RecordIndex
from polar.contracts import SessionResult
from polar.records import SessionStatus, Trace
from polar.tasks.spec import BuilderSpec, HarnessSpec, RuntimeSpec, TaskSpec, Timeouts
from polar.tasks.swe import SweInstance, instance_to_task

if TYPE_CHECKING:
    from polar.client.sdk import PolarClient, TaskRun

SUMMARY = "summary.json"
RESOLVED_REWARD = 1.0


def is_resolved(session: SessionResult) -> bool:
    """Whether a session's patch resolved its instance (completed, reward ≥ 1)."""
    reward = session.reward
    return (
        session.status == SessionStatus.COMPLETED
        and reward is not None
        and math.isfinite(reward)
        and reward >= RESOLVED_REWARD - REWARD_TOLERANCE
    )


@dataclass
class RepoCounts:
    """One repository's figures (sessions unless named otherwise)."""

    instances: int = 0
    attempted: int = 0
    resolved: int = 0
    failed: int = 0
    errored: int = 0
    resolved_instances: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.resolved / self.attempted if self.attempted else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acceptance_rate": self.acceptance_rate}


@dataclass
class GenerateSummary:
    """What `generate` did: counts overall and per repository, what was kept and written.

    `attempted`, `resolved`, `failed`, `errored` count sessions; `instances`
    the dataset's instances, `instances_done` those whose task finished (the
    progress), `resolved_instances` those with at least one resolved session.
    """

    out: str
    harness: str
    model: str
    sessions_per_instance: int
    instances: int
    instances_done: int = 0
    attempted: int = 0
    resolved: int = 0
    failed: int = 0
    errored: int = 0
    resolved_instances: int = 0
    per_repo: dict[str, RepoCounts] = field(default_factory=dict)
    kept_sessions: list[dict[str, Any]] = field(default_factory=list)
    """{session_id, instance_id, repo, workflow_id, reward}: the sessions written out"""
    task_errors: list[dict[str, str]] = field(default_factory=list)
    """{instance_id, workflow_id, error}: tasks that ended without a result"""
    traces: int = 0
    rl_rows: int = 0
    sft_rows: int = 0
    files: dict[str, str] = field(default_factory=dict)
    dataset: str | None = None

    @property
    def acceptance_rate(self) -> float:
        return self.resolved / self.attempted if self.attempted else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["acceptance_rate"] = self.acceptance_rate
        data["per_repo"] = {repo: c.as_dict() for repo, c in sorted(self.per_repo.items())}
        return data


class Collector:
    """Accumulates finished groups: counts every session, keeps the resolved ones' traces."""

    def __init__(self, summary: GenerateSummary) -> None:
        self.summary = summary
        self.traces: list[Trace] = []
        self.rewards: dict[str, float | None] = {}

    def add(self, instance: SweInstance, group: Any, num_sessions: int) -> None:
        """Count one finished task's sessions (`group`: a `polar.client.sdk.Group`)."""
        s = self.summary
        repo = s.per_repo.setdefault(instance.repo, RepoCounts())
        s.instances_done += 1
        if group.result is None:
            s.attempted += num_sessions
            repo.attempted += num_sessions
            s.errored += num_sessions
            repo.errored += num_sessions
            s.task_errors.append(
                {
                    "instance_id": instance.instance_id,
                    "workflow_id": group.run.workflow_id,
                    "error": group.error or "no result",
                }
            )
            return
        kept: set[str] = set()
        for session in group.result.sessions:
            s.attempted += 1
            repo.attempted += 1
            if is_resolved(session):
                s.resolved += 1
                repo.resolved += 1
                kept.add(session.session_id)
                self.rewards[session.session_id] = session.reward
                s.kept_sessions.append(
                    {
                        "session_id": session.session_id,
                        "instance_id": instance.instance_id,
                        "repo": instance.repo,
                        "workflow_id": group.run.workflow_id,
                        "reward": session.reward,
                    }
                )
            elif session.reward is not None:
                s.failed += 1
                repo.failed += 1
            else:
                s.errored += 1
                repo.errored += 1
        if kept:
            s.resolved_instances += 1
            repo.resolved_instances += 1
        self.traces.extend(t for t in group.traces if t.provenance.session_id in kept)


def _records(polar: PolarClient, traces: Sequence[Trace]) -> RecordIndex:
    """CompletionRecords of the sessions with merged traces (the SFT view needs them)."""
    sessions = sorted({t.provenance.session_id for t in traces if len(t.provenance.record_ids) > 1})
    return ex.index_records(r for sid in sessions for r in polar.storage.list_completions(sid))


def task_specs(
    instances: Sequence[SweInstance],
    *,
    harness: HarnessSpec,
    sessions_per_instance: int,
    runtime: RuntimeSpec | dict[str, Any] | None,
    builder: BuilderSpec | dict[str, Any] | None,
    source_root: str | Path | None,
    timeouts: Timeouts | dict[str, Any] | None,
) -> list[tuple[SweInstance, TaskSpec]]:
    """Each instance with its task (every spec validated before anything is submitted)."""
    extra: dict[str, Any] = {}
    if builder is not None:
        extra["builder"] = builder if isinstance(builder, dict) else builder.model_dump()
    if timeouts is not None:
        extra["timeouts"] = timeouts if isinstance(timeouts, dict) else timeouts.model_dump()
    return [
        (
            inst,
            instance_to_task(
                inst,
                harness=harness,
                num_sessions=sessions_per_instance,
                source_root=source_root,
                runtime=runtime,
                metadata={"generated_by": "polar generate"},
                **extra,
            ),
        )
        for inst in instances
    ]


async def run_tasks(
    polar: PolarClient,
    specs: Sequence[tuple[SweInstance, TaskSpec]],
    collector: Collector,
    *,
    concurrency: int,
    task_timeout_s: float | None,
    on_progress: Callable[[GenerateSummary], None] | None,
) -> None:
    """Run every task, at most `concurrency` at once, each group into `collector` as soon as
    its task finishes (`on_progress` after each)."""
    queue: asyncio.Queue[tuple[SweInstance, TaskSpec]] = asyncio.Queue()
    for item in specs:
        queue.put_nowait(item)

    from polar.client.sdk import Group

    async def one(inst: SweInstance, spec: TaskSpec) -> None:
        run: TaskRun = await polar.submit(spec)
        group: Group | None = None
        try:
            async for got in polar.iter_groups(
                [run], load_traces=True, include_failed=True, timeout_s=task_timeout_s
            ):
                group = got
        except TimeoutError as exc:
            group = Group(run, None, error=str(exc))
        if group is None:  # dropped as stale: cannot happen without min_policy_version
            group = Group(run, None, error="no group")
        collector.add(inst, group, spec.num_sessions)
        if on_progress:
            on_progress(collector.summary)

    async def worker() -> None:
        while not queue.empty():
            inst, spec = queue.get_nowait()
            await one(inst, spec)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(specs)) or 1)))


async def write_kept(
    polar: PolarClient, collector: Collector, out: Path, harness: HarnessSpec
) -> None:
    """Export the kept sessions under `out` and write the summary beside them."""
    summary = collector.summary
    traces = collector.traces
    records = await asyncio.to_thread(_records, polar, traces)
    exported = ex.export_traces(
        traces,
        out,
        (ex.ExportFormat.ALL,),
        min_reward=RESOLVED_REWARD,
        rewards=collector.rewards,
        records=records,
        source={
            "generated": True,
            "dataset": summary.dataset,
            "harness": harness.kind,
            "model": harness.model,
            "sessions": [k["session_id"] for k in summary.kept_sessions],
        },
    )
    summary.traces = exported.traces
    summary.rl_rows = exported.rl_rows
    summary.sft_rows = exported.sft_rows
    summary.files = {**exported.files, "manifest": str(out / ex.MANIFEST)}
    summary.files["summary"] = str(out / SUMMARY)
    (out / SUMMARY).write_text(json.dumps(summary.as_dict(), indent=2) + "\n")


async def generate(
    polar: PolarClient,
    instances: Iterable[SweInstance],
    *,
    harness: HarnessSpec | dict[str, Any],
    out: Path,
    sessions_per_instance: int = 1,
    runtime: RuntimeSpec | dict[str, Any] | None = None,
    builder: BuilderSpec | dict[str, Any] | None = None,
    source_root: str | Path | None = None,
    timeouts: Timeouts | dict[str, Any] | None = None,
    concurrency: int = 8,
    task_timeout_s: float | None = None,
    on_progress: Callable[[GenerateSummary], None] | None = None,
    dataset: str | Path | None = None,
) -> GenerateSummary:
    """Roll `harness` out on every instance, keep the resolved sessions, write them to `out`.

    `concurrency` bounds the tasks in flight (each runs `sessions_per_instance`
    sessions); `task_timeout_s` bounds the wait for one task (a task that runs
    past it counts as errored). `on_progress` is called with the running
    summary once at the start and after each finished task.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    harness = harness if isinstance(harness, HarnessSpec) else HarnessSpec.model_validate(harness)
    chosen = list(instances)
    specs = task_specs(
        chosen,
        harness=harness,
        sessions_per_instance=sessions_per_instance,
        runtime=runtime,
        builder=builder,
        source_root=source_root,
        timeouts=timeouts,
    )
    summary = GenerateSummary(
        out=str(out),
        harness=harness.kind,
        model=harness.model,
        sessions_per_instance=sessions_per_instance,
        instances=len(chosen),
        dataset=None if dataset is None else str(dataset),
    )
    for inst in chosen:
        summary.per_repo.setdefault(inst.repo, RepoCounts()).instances += 1
    collector = Collector(summary)
    if on_progress:
        on_progress(summary)
    await run_tasks(
        polar,
        specs,
        collector,
        concurrency=concurrency,
        task_timeout_s=task_timeout_s,
        on_progress=on_progress,
    )
    await write_kept(polar, collector, out, harness)
    return summary
