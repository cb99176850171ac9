"""`polar tasks audit`: run each task with its oracle, a no-op and canned hacks, on a real Polar.

A task is sound when its oracle scores the top of its reward range, the no-op agent
scores the bottom, and every adversary (app/adversaries/) scores the bottom too.
An adversary or no-op that scores more flags the task, naming the hack that worked; an
oracle that scores less than the top marks it broken. Sessions that end without a reward
(an evaluator error) are shown as `error`: no reward was handed out, so no hack worked.

Each probe is the task itself with its harness replaced by a `command` harness (one
session), so it is graded exactly as training would grade it. Targets:

* a Harbor task directory or a dataset of them (`task.toml`; `solution/solve.sh` is the
  oracle; polar.tasks.harbor);
* a SWE-bench JSONL file (the gold patch is the oracle; the adversaries are the empty patch,
  a test-edit patch made from the instance's test ids, and the `tamper-tests` program);
* a TaskSpec JSON file (its oracle a command given with it, if any).

Verdicts are kept by task fingerprint (`task_fingerprint`: what grading depends on, not
the harness) in `.polar-audit.json` beside the audited path, where `polar submit` looks, and
in Polar's bucket under `audits/<fingerprint>.json`, where the console finds the verdict of
any task with that fingerprint (it reads Temporal and S3, never the dataset's folder).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from app.adversaries import (
    ADVERSARIES,
    NOOP_COMMAND,
    adversary_command,
    describe,
    oracle_command,
    patch_command,
    steps_oracle_command,
    swe_test_edit_command,
    verifier_reads,
)
from polar.records import SessionStatus
from polar.tasks.spec import HarnessSpec, RuntimeSpec, TaskSpec

if TYPE_CHECKING:
    from polar.client.sdk import PolarClient

AUDIT_FILE = ".polar-audit.json"
"""Where an audit keeps its verdicts: in the audited directory, or beside the audited file."""
AUDIT_PREFIX = "audits/"
"""Where an audit also keeps each task's verdict in S3 (`audit_key`), for the console."""
ORACLE, NOOP = "oracle", "no-op"
SWE_ADVERSARIES = ("tamper-tests",)
"""The built-in adversaries a SWE-bench instance gets besides its own test-edit patch."""
PLANT_READS = verifier_reads.NAME
"""A Harbor task's own adversary: the files its tests read, planted (verifier_reads.py)."""
TEST_EDIT = "test-edit"
"""SWE-bench's test-edit patch: each test file the instance's test ids name (re)written with
a passing test under each id, and a pass-everything conftest.py."""

Expect = Literal["top", "bottom"]
Verdict = Literal["sound", "flagged", "broken"]


@dataclass(frozen=True)
class Probe:
    """One agent of an audit: its name, its harness command, and the reward it must get."""

    name: str
    command: str
    expect: Expect
    env: tuple[tuple[str, str], ...] = ()
    """Added to the harness's environment (Harbor: the oracle gets `[solution].env`)."""


@dataclass(frozen=True)
class AuditTarget:
    """A task to audit, the probes to run on it, and where it was read from."""

    task: TaskSpec
    probes: tuple[Probe, ...]
    origin: str


class ProbeResult(BaseModel):
    """How one probe's session ended."""

    probe: str
    expect: Expect
    status: str
    reward: float | None = None
    ok: bool
    """The reward is what the probe must get (for a no-op or adversary: no reward counts)."""
    seconds: float
    """From submit to result."""
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    """The session's time in each stage (`evaluate`: grading)."""
    error: str | None = None
    outcome: str | None = None
    """The session's outcome class (`policy_failure`, `infra_error:image`, ...)."""
    stderr: list[str] = Field(default_factory=list)
    """Where it got no reward, or an oracle missed the top: the first lines of the harness's
    stderr (the evaluator's when the harness wrote none), to say why without opening S3."""


class TaskAudit(BaseModel):
    """One task's audit: its verdict, the hacks that worked, each probe's result."""

    task_id: str
    origin: str
    fingerprint: str
    verdict: Verdict
    hacks: list[str] = Field(default_factory=list)
    """The no-op or adversaries that scored above the bottom of the reward range."""
    reasons: list[str] = Field(default_factory=list)
    probes: list[ProbeResult]
    seconds: float
    """Session-seconds: the probes' submit-to-result times added up (what auditing this task
    alone, one session at a time, takes)."""
    wall_seconds: float | None = None
    """Wall time from its first probe's submit to its last probe's result."""
    grading_seconds: float | None = None
    """The longest `evaluate` stage of its probes (a fresh runtime, the changes, the tests)."""
    build: str | None = None
    """How its environment's image came to be (Harbor: built, cached or prebuilt, with time)."""


class AuditReport(BaseModel):
    """An audit of several tasks."""

    tasks: list[TaskAudit]
    adversaries: dict[str, str] = Field(default_factory=dict)
    """Each adversary's hack, in one line."""
    seconds: float = 0.0

    @property
    def flagged(self) -> list[TaskAudit]:
        return [t for t in self.tasks if t.verdict != "sound"]


# ---------------------------------------------------------------------------- targets


def task_fingerprint(task: TaskSpec) -> str:
    """sha256 of what grading a task depends on (instruction, source, runtime, evaluator):
    the same for every harness and session count, so an audit's verdict is found again
    when the task is submitted for training."""
    data = task.model_dump(mode="json", include={"instruction", "source", "runtime", "evaluator"})
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def standard_probes(
    oracle: str | None, oracle_env: Mapping[str, str] | None = None
) -> tuple[Probe, ...]:
    """The oracle (when there is one), the no-op, and every built-in adversary."""
    env = tuple(sorted((oracle_env or {}).items()))
    probes = [Probe(ORACLE, oracle, "top", env)] if oracle is not None else []
    probes.append(Probe(NOOP, NOOP_COMMAND, "bottom"))
    probes.extend(Probe(name, adversary_command(name), "bottom") for name in ADVERSARIES)
    return tuple(probes)


def harbor_targets(path: Path, image_map: Mapping[str, str] | None = None) -> list[AuditTarget]:
    """One target per Harbor task under `path`, its oracle `solution/solve.sh` (`image_map`:
    the deployment's, as `polar submit` loads them)."""
    from activities.task_kinds import check_task_kinds
    from polar.tasks.harbor import load_harbor_tasks
    from polar.tasks.harbor_toml import find_task_dirs

    targets = []
    for task_dir in find_task_dirs(path):
        # loaded with a command harness: the probes replace it, and a command takes any
        # task's MCP servers (Pi, the default, refuses them)
        noop = HarnessSpec(kind="command", command=NOOP_COMMAND)
        (loaded,) = load_harbor_tasks(task_dir, harness=noop, image_map=image_map)
        task = check_task_kinds(loaded)
        solution = task_dir / "solution"
        oracle = oracle_command(solution) if (solution / "solve.sh").is_file() else None
        if task.steps:  # each step's own solution, at its step
            oracle = steps_oracle_command(task_dir, [step.name for step in task.steps])
        solution_env = task.metadata.get("harbor", {}).get("solution_env") or {}
        env = {str(k): str(v) for k, v in solution_env.items()}
        probes = standard_probes(oracle, env) + plant_reads_probe(task_dir / "tests", task)
        targets.append(AuditTarget(task, probes, str(task_dir)))
    return targets


def plant_reads_probe(tests_dir: Path, task: TaskSpec) -> tuple[Probe, ...]:
    """The `plant-reads` adversary for the files the tests name inside the task's workdir
    (app/adversaries/verifier_reads.py); none where they name none."""
    paths = verifier_reads.verifier_read_paths(tests_dir, task.runtime.workdir or "/workspace")
    if not paths:
        return ()
    word = verifier_reads.passing_word(tests_dir)
    return (Probe(PLANT_READS, verifier_reads.plant_reads_command(paths, word), "bottom"),)


def taskspec_target(path: Path, oracle: str | None = None) -> AuditTarget:
    """The TaskSpec of JSON file `path`, with `oracle` (a harness command) as its oracle."""
    from activities.task_kinds import check_task_kinds

    try:
        task = check_task_kinds(TaskSpec.model_validate_json(path.read_bytes()))
    except ValueError as exc:
        raise ValueError(f"invalid TaskSpec in {path}: {exc}") from exc
    return AuditTarget(task, standard_probes(oracle), str(path))


def swe_targets(
    path: Path,
    *,
    source_root: Path | None,
    runtime: RuntimeSpec,
    ids: Iterable[str] | None = None,
) -> list[AuditTarget]:
    """One target per SWE-bench instance in JSONL `path`: gold patch, empty patch, the
    test-edit patch and the generic `tamper-tests`."""
    from polar.tasks.swe import instance_to_task, load_instances

    targets = []
    for instance in load_instances(path, ids):
        task = instance_to_task(
            instance,
            harness={"kind": "command", "command": NOOP_COMMAND},
            source_root=source_root,
            runtime=runtime,
        )
        probes = [Probe(ORACLE, patch_command(instance.patch), "top")] if instance.patch else []
        probes.append(Probe(NOOP, NOOP_COMMAND, "bottom"))
        test_ids = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
        probes.append(Probe(TEST_EDIT, swe_test_edit_command(test_ids), "bottom"))
        probes.extend(Probe(name, adversary_command(name), "bottom") for name in SWE_ADVERSARIES)
        targets.append(AuditTarget(task, tuple(probes), f"{path}#{instance.instance_id}"))
    return targets


def probe_task(target: AuditTarget, probe: Probe) -> TaskSpec:
    """The target's task with `probe` as its only session's harness."""
    task = target.task
    harness = HarnessSpec(
        kind="command",
        command=probe.command,
        model=task.harness.model,
        env={**task.harness.env, **dict(probe.env)},
    )
    suffix = f".audit-{probe.name}"
    return task.model_copy(
        update={
            "task_id": task.task_id[: 128 - len(suffix)] + suffix,
            "harness": harness,
            "num_sessions": 1,
            "min_usable_sessions": None,
        }
    )


# ---------------------------------------------------------------------------- running


async def run_probe(polar: PolarClient, target: AuditTarget, probe: Probe) -> ProbeResult:
    """Submit one probe's session and wait for its result."""
    started = time.monotonic()
    try:
        result = await polar.wait(await polar.submit(probe_task(target, probe)))
    except Exception as exc:  # noqa: BLE001 - refused or failed: a probe without a reward
        return ProbeResult(
            probe=probe.name,
            expect=probe.expect,
            status="not run",
            ok=probe.expect == "bottom",
            seconds=round(time.monotonic() - started, 1),
            error=f"{type(exc).__name__}: {exc}",
        )
    (session,) = result.sessions
    lo, hi = target.task.evaluator.reward_range
    reward = session.reward
    if probe.expect == "top":
        ok = reward is not None and reward >= hi
    else:
        ok = reward is None or reward <= lo
    error = session.error if session.status != SessionStatus.COMPLETED or reward is None else None
    explain = reward is None or not ok and probe.expect == "top"
    return ProbeResult(
        probe=probe.name,
        expect=probe.expect,
        status=session.status.value,
        reward=reward,
        ok=ok,
        seconds=round(time.monotonic() - started, 1),
        stage_seconds=session.stage_seconds,
        error=error or (session.evaluation if reward is None else None),
        outcome=session.outcome.label if session.outcome is not None else None,
        stderr=await stderr_head(polar, session.session_id) if explain else [],
    )


STDERR_LINES = 5
STDERR_LINE_CHARS = 200


async def stderr_head(polar: PolarClient, session_id: str) -> list[str]:
    """The first non-empty lines of a session's stderr: its last harness attempt's, else its
    evaluator's (empty where it stored none, or S3 cannot say)."""
    from app.cli.session_text import terminal_safe
    from app.console.session_objects import SessionObjects

    objects = SessionObjects(polar.storage)
    try:
        artifacts = await objects.artifacts(session_id)
        for keys in (sorted(artifacts.harness_logs)[::-1], sorted(artifacts.eval_logs)):
            for key in (k for k in keys if k.endswith(".stderr")):
                lines = [
                    terminal_safe(line[:STDERR_LINE_CHARS])  # the session's text: escaped
                    for line in (await objects.get(key)).decode("utf-8", "replace").splitlines()
                    if line.strip()
                ]
                if lines:
                    return lines[:STDERR_LINES]
    except Exception:  # noqa: BLE001 - the cause is a courtesy: the verdict stands without it
        return []
    return []


def scored(result: ProbeResult) -> str:
    """`scored 0.5`, or `got no reward (infra_error:image)` (a session that ended without
    one, and its outcome class)."""
    if result.reward is not None:
        return f"scored {result.reward:g}"
    return f"got no reward ({result.outcome})" if result.outcome else "got no reward"


def why_not(result: ProbeResult) -> str:
    """A failed top probe's cause: its error, then the first lines of its stderr."""
    parts = [result.error] if result.error else []
    if result.stderr:
        parts.append("stderr: " + " | ".join(result.stderr))
    return "; ".join(parts)


def judge(target: AuditTarget, results: list[ProbeResult]) -> TaskAudit:
    """The task's verdict from its probes' results."""
    hacks = [r.probe for r in results if r.expect == "bottom" and not r.ok]
    reasons = [
        f"{r.probe} {scored(r)}" + (f": {why_not(r)}" if r.expect == "top" and why_not(r) else "")
        for r in results
        if not r.ok
    ]
    broken = any(r.expect == "top" and not r.ok for r in results)
    if not any(r.probe == ORACLE for r in results):
        reasons.append("no oracle: the top reward is not shown reachable")
    verdict: Verdict = "flagged" if hacks else "broken" if broken else "sound"
    return TaskAudit(
        task_id=target.task.task_id,
        origin=target.origin,
        fingerprint=task_fingerprint(target.task),
        verdict=verdict,
        hacks=hacks,
        reasons=reasons,
        probes=results,
        seconds=round(sum(r.seconds for r in results), 1),
        grading_seconds=max(
            (r.stage_seconds["evaluate"] for r in results if "evaluate" in r.stage_seconds),
            default=None,
        ),
    )


ProbeProgress = Callable[[str, ProbeResult], None]
"""Told each probe's result as it comes: the task id and the result."""


async def audit_target(
    polar: PolarClient,
    target: AuditTarget,
    slots: asyncio.Semaphore,
    on_probe: ProbeProgress | None = None,
) -> TaskAudit:
    """Every probe of one target (at most `slots` sessions at once across the audit)."""
    started = time.monotonic()

    async def one(probe: Probe) -> ProbeResult:
        async with slots:
            result = await run_probe(polar, target, probe)
        if on_probe is not None:
            on_probe(target.task.task_id, result)
        return result

    audit = judge(target, list(await asyncio.gather(*(one(p) for p in target.probes))))
    audit.wall_seconds = round(time.monotonic() - started, 1)
    data = audit.model_dump_json(indent=2).encode()
    await asyncio.to_thread(polar.storage.put_bytes, audit_key(audit.fingerprint), data)
    return audit


async def run_audit(
    polar: PolarClient,
    targets: list[AuditTarget],
    *,
    parallel: int = 4,
    on_task: Callable[[TaskAudit], None] | None = None,
    on_probe: ProbeProgress | None = None,
) -> AuditReport:
    """Audit every target, at most `parallel` sessions at once; `on_probe` and `on_task` are
    told each result as it comes."""
    slots = asyncio.Semaphore(parallel)
    started = time.monotonic()

    async def one(target: AuditTarget) -> TaskAudit:
        audit = await audit_target(polar, target, slots, on_probe)
        if on_task is not None:
            on_task(audit)
        return audit

    audits = await asyncio.gather(*(one(t) for t in targets))
    used = {p.name for t in targets for p in t.probes}
    described = {name: describe(name) for name in ADVERSARIES if name in used}
    if PLANT_READS in used:
        described[PLANT_READS] = verifier_reads.DESCRIPTION
    return AuditReport(
        tasks=list(audits),
        adversaries=described,
        seconds=round(time.monotonic() - started, 1),
    )


# ---------------------------------------------------------------------------- verdicts


def audit_key(fingerprint: str) -> str:
    """The S3 key of the verdict of the tasks with this fingerprint."""
    return f"{AUDIT_PREFIX}{fingerprint}.json"


def audit_file_for(path: Path) -> Path:
    """Where the audit of `path` keeps its verdicts."""
    return (path if path.is_dir() else path.parent) / AUDIT_FILE


def save_verdicts(report: AuditReport, path: Path) -> Path:
    """Merge the report's verdicts into the audit file of `path` (by fingerprint)."""
    out = audit_file_for(path)
    known = load_verdicts(out)
    known.update({t.fingerprint: t for t in report.tasks})
    data = {fp: audit.model_dump(mode="json") for fp, audit in sorted(known.items())}
    out.write_text(json.dumps({"verdicts": data}, indent=2) + "\n", encoding="utf-8")
    return out


def load_verdicts(file: Path) -> dict[str, TaskAudit]:
    """The verdicts of an audit file by fingerprint ({} when there is none)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreadable audit file {file}: {exc}") from exc
    return {fp: TaskAudit.model_validate(v) for fp, v in data.get("verdicts", {}).items()}


def find_verdict(task: TaskSpec, near: Path) -> TaskAudit | None:
    """The audit of `task` in the audit files of `near` and of its parent folders."""
    fingerprint = task_fingerprint(task)
    start = near.resolve()
    for folder in [start, *start.parents] if start.is_dir() else start.parents:
        found = load_verdicts(folder / AUDIT_FILE).get(fingerprint)
        if found is not None:
            return found
    return None
