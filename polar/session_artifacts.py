"""The names under which a session's result lists what it stored (`SessionResult.artifacts`).

The Session workflow fills the map from what its stages return (the run's `HarnessResult`,
the build's traces key, the evaluation's keys, the score's sidecar): pure functions of those
results, no S3 listing. A name says which stage stored the object, whatever the attempt:

    harness.stdout, harness.stderr   the last run's output (`harness-attempt{n}.stdout`)
    harness/<path>                   its native logs, `$POLAR_ARTIFACTS_DIR` files, egress log
    artifacts/, artifacts/manifest.json  what its collection copied out of the runtime
                                     (`RuntimeSpec.collect`: Harbor's `artifacts/`), a folder
    traces, traces.rewards           the built traces and their rewards sidecar
    evaluation.report                the evaluator's JSON report (`{kind}-report.json`)
    evaluation.patch                 the session's patch it graded (`{kind}-model.patch`)
    evaluation/<log>                 the evaluator's logs (`evaluate.stdout`, ...)

A run that kept more than `MAX_LISTED_FILES` files is listed as one folder, `harness/`, whose
value is the key prefix to list (a name ending in `/` is always such a folder): the result
travels in Temporal payloads, one per session inside its task's result, so it stays small.
"""

from __future__ import annotations

from polar.contracts import EvaluateResult, HarnessResult, SessionResult

HARNESS_STDOUT = "harness.stdout"
HARNESS_STDERR = "harness.stderr"
HARNESS_FILES = "harness/"
"""The prefix of the run's files' names, and the name of their folder when there are many."""
TRACES = "traces"
TRACE_REWARDS = "traces.rewards"
COLLECTED = "artifacts/"
COLLECTED_MANIFEST = "artifacts/manifest.json"
EVALUATION_REPORT = "evaluation.report"
EVALUATION_PATCH = "evaluation.patch"
EVALUATION_LOGS = "evaluation/"
MAX_LISTED_FILES = 8
"""Most of a run's files listed one by one; past it, their folder is listed instead."""


def is_folder(name: str) -> bool:
    """Whether an artifacts entry names a folder (its value is a key prefix, ending in `/`)."""
    return name.endswith("/")


def harness_artifacts(run: HarnessResult) -> dict[str, str]:
    """The run's stdout, stderr and files (or their folder), by name."""
    folder = run.stdout_key.removesuffix(".stdout") + "/"  # harness-attempt{n}/ beside it
    named = {HARNESS_STDOUT: run.stdout_key, HARNESS_STDERR: run.stderr_key}
    if run.collected is not None:  # a folder and its manifest: listing it is S3's
        named[COLLECTED] = run.collected.prefix
        named[COLLECTED_MANIFEST] = run.collected.manifest_key
    if len(run.artifact_keys) > MAX_LISTED_FILES:
        named[HARNESS_FILES] = folder
        return named
    for key in run.artifact_keys:
        named[HARNESS_FILES + key.removeprefix(folder)] = key
    return named


def evaluation_artifacts(evaluation: EvaluateResult) -> dict[str, str]:
    """The evaluation's report, the patch it graded and its logs, by name."""
    named: dict[str, str] = {}
    if evaluation.report_key:
        named[EVALUATION_REPORT] = evaluation.report_key
    if evaluation.patch_key:
        named[EVALUATION_PATCH] = evaluation.patch_key
    logs = evaluation.log_keys or ([evaluation.log_key] if evaluation.log_key else [])
    for key in logs:
        named[EVALUATION_LOGS + key.rsplit("/", 1)[-1]] = key
    return named


RESULT_BUDGET = 1_000_000
"""Bytes of its sessions' JSON past which a task's result leaves out their artifact maps
(`TaskResult.artifacts_omitted`): Temporal refuses a payload over 2 MB, and 1,024 sessions with
their maps come close to it (about 1.8 kB each, 0.8 kB without)."""


def fit_task_result(
    sessions: list[SessionResult], budget: int = RESULT_BUDGET
) -> tuple[list[SessionResult], bool]:
    """The sessions a task's result carries, and whether their artifact maps were left out to
    keep it within `budget` bytes of JSON (each Session workflow's own result keeps its map)."""
    if sum(len(s.model_dump_json()) for s in sessions) <= budget:
        return sessions, False
    return [s.model_copy(update={"artifacts": {}}) for s in sessions], True
