"""The `harbor` evaluator: a Harbor task's `tests/test.sh`, where the agent never was.

Grading happens in the evaluator's fresh runtime (activities/evaluators/fresh.py):
the task's environment image started afresh, plus the session's changes (a
binary diff of its workspace against its baseline, junk and `PROTECTED` paths
left out) and its collected artifacts. Harbor's separate verifier
(`workspace_changes` false) gets the artifacts alone, in its own image where the task
has one (`image`). Only then, and only there:

1. the task's `tests/` (a folder of the worker host, `evaluator.harbor.tests_dir`)
   is copied to `/tests`, readable by all; `/logs/verifier` is removed and made
   afresh, owned by the verifier user;
2. `bash /tests/test.sh` runs in the workspace as the task's verifier user
   (in a container the toolbox's `polar-helper runas`, elsewhere `setpriv`; None: the
   image's user), with that user's `HOME` in the image and the
   task's verifier env, within its timeout; every process it left is then killed;
3. the reward is read from `/logs/verifier` only, in Harbor's order (harbor 0.25,
   harbor/verifier/verifier.py: `reward.json` if it exists, else `reward.txt`):
   `reward.json` is an object of named rewards, every one kept in the report, the
   session's reward taken as Harbor takes its primary reward (`primary_reward`: `reward`,
   else the only one; several and no `reward`: their mean, or the task's
   `evaluator.harbor.reward_key`); `reward.txt` is one number.

Who wrote the reward. test.sh often runs the agent's code (it imports the module under
test, or runs pytest in the workspace) as the verifier user, who owns `/logs/verifier`:
that code can write the reward files too, at import, at exit (`os._exit`), or from a
process it forked, and nothing tells its writes from the verifier's (the same process, or
the same uid; what test.sh left is killed the moment it exits and again by the reap, so a
write just after its exit is no different from one just before it). What Polar can see
is read as tampering, reward 0 (the policy's failure): a reward file that is a link or
not a regular file, and `reward.txt` and `reward.json` that both exist and disagree (or
one of them does not parse). Such a task is flagged by `polar tasks audit` (the
`code-writes-reward` adversary) and warned about when loaded (polar/tasks/harbor.py); a
verifier immune to it runs as root and runs the code under test as another user
(docs/harbor.md).

Where the grading fails and the session's changes were in place, the failure is the
session's unless shown otherwise: a test.sh past its timeout with changes in place is
reward 0, as a link or disagreeing files are (the code under test can sleep, or plant
them). With no changes (the untouched task: a no-op session, or the control grading of
activities/evaluators/control.py) each of these is an evaluator error, the task's own. No
reward file, or one that does not parse, is an evaluator error, which the control grading
turns into the policy's 0 where the untouched task grades.

A session whose changes cannot be read (its harness broke the workspace's git)
or do not apply gets reward 0, as with `command`.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import shlex
import shutil
import time
from pathlib import Path
from typing import ClassVar

from activities import safe_files
from activities.evaluators.base import (
    Evaluation,
    EvaluationJob,
    EvaluatorConfig,
    EvaluatorError,
    Tick,
    reap,
    run_in,
)
from activities.evaluators.fresh import carry_changes
from activities.evaluators.harbor.config import HarborConfig
from activities.evaluators.harbor.report import HarborReport
from activities.evaluators.protected import PROTECTED
from activities.runtimes import Runtime
from activities.runtimes.network.channel_paths import TOOLBOX_HELPER
from activities.runtimes.network.egress import EGRESS_LOG, EgressDoor, EgressRefused, open_egress
from activities.shell_command import ProcessOutcome
from polar.contracts import RuntimeHandle, invalid_input
from polar.evaluation_reports import Baselines, EvaluationReport
from polar.host_paths import outside_roots, resolved_problem, source_roots
from polar.settings import WorkerSettings

__all__ = [
    "HarborEvaluator",
    "Tampering",
    "judge_reward_files",
    "parse_reward",
    "primary_reward",
]

TEST_LOG = "harbor-test"
"""test.sh's log in the evaluator runtime (kept as `harbor-test.stdout` / `.stderr`)."""
TESTS_IN_RUNTIME = "/tests"
VERIFIER_DIR = "/logs/verifier"
REWARD_FILES = ("reward.json", "reward.txt")
"""Harbor's order (harbor 0.25, harbor/verifier/verifier.py: reward.json if it exists)."""
AGREE_TOL = 1e-6
"""reward.txt and reward.json's `reward` within this (relative or absolute) agree."""
USER_MISSING = 97
MAX_REWARD_BYTES = 1 << 20
SETUP_TIMEOUT_S = 120.0


def parse_reward(
    name: str, raw: bytes, reward_key: str | None = None
) -> tuple[float, dict[str, float]]:
    """(reward, components) of a `reward.json` or `reward.txt`, the reward as
    `primary_reward` takes it (EvaluatorError if the file is empty, not a number, not
    finite, or a JSON object without the reward)."""
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        raise EvaluatorError(f"{VERIFIER_DIR}/{name} is empty")
    if name == "reward.txt":
        try:
            value = float(text)
        except ValueError:
            raise EvaluatorError(
                f"{VERIFIER_DIR}/reward.txt is not a number: {text[:80]!r}"
            ) from None
        if not math.isfinite(value):
            raise EvaluatorError(f"{VERIFIER_DIR}/reward.txt is not finite: {text[:80]!r}")
        return value, {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvaluatorError(f"{VERIFIER_DIR}/reward.json is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise EvaluatorError(f"{VERIFIER_DIR}/reward.json is not an object of numbers")
    components: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise EvaluatorError(f"{VERIFIER_DIR}/reward.json: {key!r} is not a number")
        if not math.isfinite(value):
            raise EvaluatorError(f"{VERIFIER_DIR}/reward.json: {key!r} is not finite")
        components[str(key)] = float(value)
    return primary_reward(components, reward_key), components


def primary_reward(components: dict[str, float], reward_key: str | None = None) -> float:
    """The session's reward of a `reward.json`'s named rewards: `reward_key`'s where the task
    names one; else as Harbor takes the primary reward (harbor 0.25, cli/jobs.py
    `_primary_reward`): `reward`, else the only one; else, where Harbor keeps several named
    rewards and no primary (its metrics then aggregate each name apart), their mean, as
    Harbor's reward kit combines components by default (equal weights)."""
    keys = ", ".join(sorted(components)) or "none"
    if reward_key is not None:
        if reward_key not in components:
            raise EvaluatorError(
                f"{VERIFIER_DIR}/reward.json has no {reward_key!r}, the task's "
                f"evaluator.harbor.reward_key (keys: {keys})"
            )
        return components[reward_key]
    if "reward" in components:
        return components["reward"]
    if not components:
        raise EvaluatorError(f"{VERIFIER_DIR}/reward.json holds no reward (an empty object)")
    return math.fsum(components.values()) / len(components)


class Tampering(Exception):
    """What /logs/verifier holds shows that something besides the verifier wrote it: a
    reward file that is a link or not a regular file, or reward.txt and reward.json that
    both exist and disagree. Reward 0 where the session's code ran in the verifier (an
    evaluator error where it did not: then only the task wrote there)."""


def judge_reward_files(
    found: dict[str, bytes], odd: dict[str, str] | None = None, reward_key: str | None = None
) -> tuple[str, float, dict[str, float]]:
    """(file, reward, components) of what test.sh left in /logs/verifier: `found` maps a
    reward file's name to its bytes (plain files only), `odd` a reward file that was there
    but not a plain file to what it was. Harbor's order: reward.json if it exists, else
    reward.txt. Tampering for an odd file, or both files where they disagree (or one does
    not parse); EvaluatorError for no file, or the one file not parsing."""
    for name, what in sorted((odd or {}).items()):
        raise Tampering(f"{VERIFIER_DIR}/{name} is {what}")
    present = [name for name in REWARD_FILES if name in found]
    if not present:
        raise EvaluatorError(
            f"tests/test.sh wrote no reward: neither {VERIFIER_DIR}/reward.json nor "
            "reward.txt (never scored 0)"
        )
    name = present[0]
    if len(present) == 1:
        return (name, *parse_reward(name, found[name], reward_key))
    try:
        parsed = {n: parse_reward(n, found[n], reward_key) for n in REWARD_FILES}
    except EvaluatorError as exc:
        raise Tampering(f"both reward files exist and one is not valid: {exc}") from None
    (reward, components), (text, _) = parsed["reward.json"], parsed["reward.txt"]
    if not math.isclose(reward, text, rel_tol=AGREE_TOL, abs_tol=AGREE_TOL):
        raise Tampering(
            f"{VERIFIER_DIR}/reward.json says {reward:g} and reward.txt says {text:g}: two writers"
        )
    return name, reward, components


def _setup_script(staged: str, user: str | None) -> str:
    """Put the tests at /tests (readable by all) and make /logs/verifier afresh."""
    owner = f"chown {shlex.quote(user)} {VERIFIER_DIR}\n" if user else ""
    # the user is checked here, before test.sh: test.sh's own exit code then means nothing
    # but test.sh's (the code under test can exit with any code)
    known = f"id -u {shlex.quote(user)} >/dev/null || exit {USER_MISSING}\n" if user else ""
    return (
        "set -eu\n" + known + f"rm -rf {TESTS_IN_RUNTIME} {VERIFIER_DIR}\n"
        f"cp -a {shlex.quote(staged)} {TESTS_IN_RUNTIME}\n"
        f"chown -R 0:0 {TESTS_IN_RUNTIME} && chmod -R a+rX,go-w {TESTS_IN_RUNTIME}\n"
        f"mkdir -p /logs && mkdir {VERIFIER_DIR}\n" + owner
    )


HOME_OF = (
    "home_of() { while IFS=: read -r name _ uid _ _ home _; do\n"
    '  if [ "$name" = "$1" ] || [ "$uid" = "$1" ]; then printf %s "$home"; return; fi\n'
    "done < /etc/passwd; }\n"
)
"""Shell: the home of a user (name or uid) in the image's /etc/passwd, with nothing but the
shell (a task image need not have getent or awk)."""


def _test_command(spec: HarborConfig) -> str:
    """test.sh as the verifier user, with that user's HOME from the image (as Harbor's exec
    has it: a test.sh may source what the image installed there; `/` where it has none),
    unless the task's verifier env sets HOME."""
    script = shlex.quote(f"{TESTS_IN_RUNTIME}/{spec.test_script}")
    who = '"$(id -u)"' if spec.user is None else shlex.quote(spec.user)
    home = "" if "HOME" in spec.env else f'HOME=$(home_of {who}); export HOME="${{HOME:-/}}"\n'
    if spec.user is None:
        return f"{HOME_OF}{home}exec bash {script}"
    # in a container the toolbox's helper switches user (alpine's busybox setpriv cannot)
    helper = shlex.quote(TOOLBOX_HELPER)
    return (
        f"{HOME_OF}gid=$(id -g {who}) || exit {USER_MISSING}\n{home}"
        f"if [ -x {helper} ]; then exec {helper} runas {who} bash {script}; fi\n"
        f'exec setpriv --reuid={who} --regid="$gid" --init-groups -- bash {script}'
    )


class HarborEvaluator:
    """`kind: harbor`: the task's tests/test.sh in a fresh runtime holding the session's
    changes; the reward only from a /logs/verifier made fresh for it."""

    kind: ClassVar[str] = "harbor"
    needs_fresh_runtime: ClassVar[bool] = True
    needs_traces: ClassVar[bool] = False
    report_model: ClassVar[type[EvaluationReport]] = HarborReport
    config_model: ClassVar[type[EvaluatorConfig]] = HarborConfig

    async def evaluate(self, job: EvaluationJob) -> Evaluation:
        spec = HarborConfig.of(job.spec)
        runtime, handle = job.fresh()
        session_handle = job.session_handle
        if session_handle.baseline is None:
            raise EvaluatorError(
                "the session's runtime has no git baseline to diff against (git missing in "
                "the task's image?)"
            )
        tests = _checked_tests(spec, job.settings)
        changes = await carry_changes(
            job.session_runtime,
            session_handle,
            session_handle.baseline,
            runtime,
            handle,
            protected=list(dict.fromkeys([*PROTECTED, *job.spec.protected])),
            timeout_s=job.timeout_s,
            on_tick=job.on_tick,
            apply=spec.workspace_changes,  # Harbor's separate verifier: artifacts only
        )
        report = HarborReport(
            task=spec.task,
            verifier_user=spec.user,
            baselines=Baselines(session=session_handle.baseline, eval=handle.baseline),
            separate=not spec.workspace_changes,
        )
        evaluation = changes.evaluation(report)
        if not changes.applied:
            return evaluation

        if job.put_artifacts is not None and not job.control:  # Harbor's upload_artifacts
            try:
                report.artifacts_placed = await job.put_artifacts()
            except (OSError, ValueError) as exc:
                why = f"cannot put the collected artifacts in place: {exc}"
                raise EvaluatorError(why) from None
        # after the artifacts: an artifact at /tests or /logs/verifier is gone before test.sh
        await _put_tests_in_place(runtime, handle, tests, spec, job.on_tick)
        # the session's code (or the files it left for collection) is in the runtime test.sh
        # runs in: what goes wrong from here may be its doing (an untouched task, a no-op's
        # or the control's, has only the task's)
        applied = not changes.empty and not changes.kept_out
        session_code = (applied or bool(report.artifacts_placed)) and not job.control

        started = time.monotonic()
        outcome = await _run_test_script(runtime, handle, spec, job.settings, job.on_tick)
        await reap(runtime, handle)  # nothing test.sh (or the code it ran) left runs on
        report.duration_s = round(time.monotonic() - started, 3)
        report.test_exit_code = outcome.exit_code
        report.test_timed_out = outcome.timed_out
        if outcome.timed_out:
            why = f"tests/test.sh ran past its {spec.timeout_s:.0f} s timeout"
            if not session_code:
                raise EvaluatorError(why)
            evaluation.detail = (
                f"{why} with the session's changes (or the files it left) in place (what "
                "the session wrote can keep it running): reward 0"
            )
            return evaluation
        scored = await _score(
            runtime, handle, evaluation, report, outcome.exit_code, session_code, spec.reward_key
        )
        if scored and changes.protected_dropped:
            evaluation.detail += (
                f"; protected files kept: {', '.join(changes.protected_dropped[:5])}"
            )
        return evaluation

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """test.sh's stdout and stderr (empty where it never ran)."""
        runtime, handle = job.fresh()
        limit = job.settings.max_log_bytes
        logs = {
            path.name: safe_files.read_log_file(path, limit=limit)
            for path in runtime.log_paths(handle, TEST_LOG)
        }
        egress = _egress_log_path(runtime, handle)
        if egress.is_file():  # written by the worker: test.sh's egress attempts
            logs[egress.name] = egress.read_bytes()
        return logs


def _checked_tests(spec: HarborConfig, settings: WorkerSettings) -> list[Path]:
    """The task's tests dirs (a step's own last), host paths the worker may read, one of
    them holding the test script."""
    dirs = [Path(d) for d in (spec.tests_dir, spec.step_tests_dir) if d is not None]
    for tests in dirs:
        _check_tests_dir(tests, settings)
    if not any((tests / spec.test_script).is_file() for tests in dirs):
        raise EvaluatorError(f"harbor task {spec.task}: {dirs[-1] / spec.test_script} is missing")
    return [tests for tests in dirs if tests.is_dir()]


async def _put_tests_in_place(
    runtime: Runtime,
    handle: RuntimeHandle,
    tests: list[Path],
    spec: HarborConfig,
    on_tick: Tick,
) -> None:
    """Copy the tests to /tests (through scratch, under a name the code under test could not
    know in advance) and make /logs/verifier afresh; EvaluatorError where it cannot."""
    scratch = runtime.scratch(handle)
    tag = secrets.token_hex(16)  # names the code under test could not know in advance
    staged = scratch / f"tests-{tag}"
    for folder in tests:  # a step's own tests over the task's, as Harbor uploads them
        await _copy_tree(folder, staged)
    try:
        code, _, log = await run_in(
            runtime,
            handle,
            _setup_script(str(staged), spec.user),
            "harbor-setup",
            SETUP_TIMEOUT_S,
            on_tick,
        )
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    if code == USER_MISSING and spec.user:
        raise EvaluatorError(f"the verifier user {spec.user!r} is not in the task's image")
    if code != 0:
        raise EvaluatorError(f"cannot put the tests in place: {log.strip()[-500:]}")


async def _run_test_script(
    runtime: Runtime,
    handle: RuntimeHandle,
    spec: HarborConfig,
    settings: WorkerSettings,
    on_tick: Tick,
) -> ProcessOutcome:
    """Run test.sh as the verifier user, with its network where the task asks for one
    (its egress log kept beside test.sh's logs)."""
    egress: EgressDoor | None = None
    try:  # test.sh's network, where the task's verifier asks for one (egress.py)
        async with open_egress(
            runtime, handle, spec.network, settings, "evaluator.harbor"
        ) as egress:
            command, env = _test_command(spec), dict(spec.env)
            if egress is not None:
                command, env = egress.wrap(command), {**env, **egress.env}
            return await runtime.run(
                handle,
                command,
                env=env,
                log_name=TEST_LOG,
                timeout_s=spec.timeout_s,
                on_tick=on_tick,
            )
    except EgressRefused as exc:
        raise invalid_input(str(exc), "InvalidTaskSpec") from exc
    finally:
        if egress is not None:
            egress_log = _egress_log_path(runtime, handle)  # no-follow: never a link
            safe_files.write_bytes(egress_log.parent, egress_log.name, egress.proxy.log.jsonl())


async def _score(
    runtime: Runtime,
    handle: RuntimeHandle,
    evaluation: Evaluation,
    report: HarborReport,
    exit_code: int | None,
    session_code: bool,
    reward_key: str | None,
) -> bool:
    """The reward test.sh left in /logs/verifier, in `evaluation` and `report`; whether there
    was one (False: tampering, reward 0 where the session's code ran; an evaluator error
    where it did not)."""
    # read from outside: nothing runs in a runtime after the code under test
    found, odd = await runtime.read_files(handle, VERIFIER_DIR, REWARD_FILES, MAX_REWARD_BYTES)
    try:
        name, reward, components = judge_reward_files(found, odd, reward_key)
    except Tampering as exc:
        if not session_code:
            raise EvaluatorError(f"{exc} (the untouched task: the task's own)") from None
        evaluation.detail = (
            f"tampering: {exc}; the code under test ran as the verifier, so it is the "
            f"session's: reward 0 (test.sh exited {exit_code})"
        )
        return False
    report.reward, report.reward_file, report.components = reward, name, components
    evaluation.reward, evaluation.components = reward, dict(components)
    evaluation.detail = f"{name}: {reward:g}; test.sh exited {exit_code}"
    return True


def _egress_log_path(runtime: Runtime, handle: RuntimeHandle) -> Path:
    """Where the worker keeps test.sh's egress log, beside its logs (`harbor-egress.jsonl`)."""
    return runtime.log_paths(handle, TEST_LOG)[0].with_name(f"harbor-{EGRESS_LOG}")


def _check_tests_dir(path: Path, settings: WorkerSettings) -> None:
    """The tests dir is a host path the worker reads: under a source root once resolved,
    never in the stack's data dir nor a system dir (as init_activities checks a source)."""
    problem = resolved_problem(path) or outside_roots(path, source_roots(settings.source_roots))
    real, state = path.resolve(), Path(settings.data_dir).resolve()
    if problem is None and (real == state or real.is_relative_to(state)):
        problem = f"resolves to {real}, inside the data dir {state}"
    if problem is not None:
        raise EvaluatorError(f"harbor.tests_dir {path} {problem}: a task may not read it")


async def _copy_tree(src: Path, dest: Path) -> None:
    await asyncio.to_thread(shutil.copytree, src, dest, symlinks=True, dirs_exist_ok=True)
