"""Harbor tasks graded where the agent never was, on the real Docker engine.

The bundled tasks (examples/harbor) are loaded by Polar's loader, their
environments built offline by polar/tasks/harbor_images.py (the second load is
the cache), and each session runs a scripted agent (the task's own
solution/solve.sh, or nothing) in a container of the task's image. The `harbor`
evaluator then grades in a fresh container of the same image with the
session's changes: /tests copied in only then, test.sh run as the task's
verifier user, the reward read from a /logs/verifier made fresh. A reward the
agent planted in its own /logs/verifier never counts; a test.sh that writes no
reward, or a bad one, is an evaluator error, never a 0.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from activities.evaluators.base import Evaluation, EvaluatorError
from activities.evaluators.harbor import HarborReport
from activities.runtimes.base import PrepareFailed
from activities.runtimes.kinds.docker import DockerRuntime
from app.adversaries import adversary_command
from polar.outcomes import classify, error_outcome
from polar.records import SessionStatus
from polar.settings import get_settings
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.sources import CommandAction
from polar.tasks.spec import EvaluatorSpec, TaskSpec
from tests.support.container_sessions import docker_runtime
from tests.support.eval_runtimes import grade, prepare_session, run_harness
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples" / "harbor"
SOUND = ("hello-file", "fix-add", "csv-sum", "app-workdir", "skill-stamp", "mcp-vault")


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[DockerRuntime]:
    yield from docker_runtime(tmp_path / "runtimes")


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`tmp_path` a source root besides the checkout, for tasks copied there to be graded
    (the evaluator reads tests/ from the host only under POLAR_SOURCE_ROOTS)."""
    monkeypatch.setenv("POLAR_SOURCE_ROOTS", f"{tmp_path},{REPO}")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _task(path: Path) -> TaskSpec:
    ensure_images(path)
    (spec,) = load_harbor_tasks(path)
    return spec


async def _session(runtime: DockerRuntime, spec: TaskSpec, script: str, sid: str) -> Evaluation:
    handle = await prepare_session(runtime, spec.runtime, None, sid)
    try:
        await run_harness(runtime, handle, script)
        return await grade(runtime, spec.runtime, None, handle, spec.evaluator, timeout_s=300)
    finally:
        await runtime.teardown(handle)


@pytest.mark.parametrize("name", SOUND)
async def test_the_oracle_scores_1_and_doing_nothing_0(runtime: DockerRuntime, name: str) -> None:
    built = ensure_images(EXAMPLES / name)
    assert built[0].how in ("built", "cached")
    assert ensure_images(EXAMPLES / name)[0].how == "cached"  # keyed on the content
    spec = _task(EXAMPLES / name)
    # app-workdir's image has WORKDIR /app: the agent works there, its changes graded there
    assert spec.runtime.workdir == ("/app" if name == "app-workdir" else "/workspace")
    solve = (EXAMPLES / name / "solution" / "solve.sh").read_text()
    oracle = await _session(runtime, spec, solve, f"hb-{name}-oracle")
    assert oracle.reward == 1.0, oracle.detail
    report = oracle.report
    assert isinstance(report, HarborReport) and report.task == f"polar/{name}"
    assert report.test_exit_code == 0 and report.reward_file in ("reward.txt", "reward.json")
    if name == "fix-add":  # reward.json: every number a component; test.sh run as root
        assert report.reward_file == "reward.json" and report.verifier_user is None
        assert report.components == {
            "reward": 1.0,
            "passed": 4.0,
            "add_small": 1.0,
            "add_negative": 1.0,
            "add_float": 1.0,
            "mul_kept": 1.0,
        }
    noop = await _session(runtime, spec, "true", f"hb-{name}-noop")
    assert noop.reward == 0.0, noop.detail


async def test_a_healthcheck_runs_before_the_agent_as_harbor_runs_it(
    runtime: DockerRuntime, tmp_root: Path
) -> None:
    """csv-sum's `[environment.healthcheck]` passed in the oracle's session above (its data is
    there); a check that never passes fails the prepare step, naming the check, and no
    session starts."""
    (csv_sum,) = load_harbor_tasks(EXAMPLES / "csv-sum")
    (check,) = csv_sum.runtime.prepare
    assert isinstance(check, CommandAction) and "test -s /workspace/sales.csv" in check.command
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_root / "hello-file"))
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text()
        + '\n[environment.healthcheck]\ncommand = "test -f /workspace/never"\n'
        + "interval_sec = 0.2\nretries = 2\n"
    )
    spec = _task(task)
    with pytest.raises(PrepareFailed, match="healthcheck failed after 2 consecutive retries"):
        await prepare_session(runtime, spec.runtime, None, "hb-healthcheck-never")


async def test_a_reward_the_agent_plants_never_counts(runtime: DockerRuntime) -> None:
    spec = _task(EXAMPLES / "hello-file")
    plant = (
        "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
        "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && "
        "echo 'Hello, world?' > hello.txt"
    )
    e = await _session(runtime, spec, plant, "hb-plant")
    assert e.reward == 0.0, e.detail


async def test_no_reward_or_a_bad_one_is_an_evaluator_error(
    runtime: DockerRuntime, tmp_root: Path
) -> None:
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_root / "hello-file"))
    spec = _task(task)
    script = task / "tests" / "test.sh"
    for body, why in (
        ("true", "wrote no reward"),
        ("echo maybe > /logs/verifier/reward.txt", "not a number"),
        ("echo '{}' > /logs/verifier/reward.json", "holds no reward"),
        ("ln -s /etc/hostname /logs/verifier/reward.txt", "is a link"),
    ):
        script.write_text(f"#!/bin/bash\n{body}\n")
        with pytest.raises(EvaluatorError, match=why):
            await _session(runtime, spec, "true", "hb-bad")


def _hello_with_test_sh(where: Path, body: str) -> Path:
    """hello-file copied to `where` with `body` as its tests/test.sh."""
    task = Path(shutil.copytree(EXAMPLES / "hello-file", where))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + body)
    return task


async def test_named_rewards_are_graded_as_harbor_reads_them(
    runtime: DockerRuntime, tmp_root: Path
) -> None:
    """A multi-reward verifier (named rewards, no `reward`, as Harbor's recipe writes them):
    the session's reward is their mean, every one kept; the oracle 1, doing nothing 0."""
    task = _hello_with_test_sh(
        tmp_root / "hello-named",
        "exists=0; exact=0\n"
        "[ -f /workspace/hello.txt ] && exists=1\n"
        '[ "$(cat /workspace/hello.txt 2>/dev/null)" = "Hello, world!" ] && exact=1\n'
        'echo "{\\"exists\\": $exists, \\"exact\\": $exact}" > /logs/verifier/reward.json\n',
    )
    spec = _task(task)
    solve = (task / "solution" / "solve.sh").read_text()
    oracle = await _session(runtime, spec, solve, "hb-named-oracle")
    assert oracle.reward == 1.0, oracle.detail
    assert isinstance(oracle.report, HarborReport)
    assert oracle.report.components == {"exists": 1.0, "exact": 1.0}
    half = await _session(runtime, spec, "echo hi > hello.txt", "hb-named-half")
    assert half.reward == 0.5, half.detail
    noop = await _session(runtime, spec, "true", "hb-named-noop")
    assert noop.reward == 0.0, noop.detail


async def test_the_verifier_has_its_users_home_as_harbor_gives_it(
    runtime: DockerRuntime, tmp_root: Path
) -> None:
    """test.sh runs with the image user's HOME (a test.sh may source a tool the image put
    there), as the task's verifier user too; a HOME in the verifier env wins."""
    task = _hello_with_test_sh(
        tmp_root / "hello-home",
        'want=$(getent passwd "$(id -un)" | cut -d: -f6)\n'
        'echo "$(id -un) HOME=$HOME want=$want"\n'
        '[ "$HOME" = "$want" ] && echo 1 > /logs/verifier/reward.txt || '
        "echo 0 > /logs/verifier/reward.txt\n",
    )
    spec = _task(task)
    root = await _session(runtime, spec, "true", "hb-home-root")
    assert root.reward == 1.0, root.detail

    def verifier(**change: object) -> TaskSpec:
        evaluator = spec.evaluator.model_dump()
        evaluator["harbor"] = {**evaluator["harbor"], **change}
        return spec.model_copy(update={"evaluator": EvaluatorSpec.model_validate(evaluator)})

    nobody = await _session(runtime, verifier(user="nobody"), "true", "hb-home-nobody")
    assert nobody.reward == 1.0, nobody.detail  # /nonexistent, as getent has it
    set_home = await _session(runtime, verifier(env={"HOME": "/tmp"}), "true", "hb-home-env")
    assert set_home.reward == 0.0, set_home.detail


async def test_tests_outside_the_source_roots_are_never_read(
    runtime: DockerRuntime, tmp_path: Path
) -> None:
    """A task naming a tests dir outside POLAR_SOURCE_ROOTS (here: only the checkout) is an
    evaluator error: the worker copies nothing of it into the runtime."""
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "hello-file"))
    get_settings.cache_clear()
    spec = _task(task)
    with pytest.raises(EvaluatorError, match="outside the source roots"):
        await _session(runtime, spec, "true", "hb-roots")


def test_a_missing_image_is_named_with_the_map_and_a_mapped_one_builds(
    docker_image: str, tmp_path: Path
) -> None:
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "hello-file"))
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim-polar-absent\nWORKDIR /workspace\n"
    )
    with pytest.raises(HarborTaskError) as info:
        ensure_images(task)
    message = str(info.value)
    assert info.value.field == "environment/Dockerfile FROM/COPY --from"
    assert "'python:3.12-slim-polar-absent' is not on this host's engine" in message
    assert "[metadata.polar.image_map]" in message and "POLAR_HARBOR_IMAGE_MAP" in message
    image_map = {"python:3.12-slim-polar-absent": docker_image}
    (built,) = ensure_images(task, image_map=image_map)
    assert built.how in ("built", "cached")
    (spec,) = load_harbor_tasks(task, image_map=image_map)
    assert spec.runtime.image == built.image
    assert (
        docker.from_env().images.get(built.image).labels["polar.harbor.task"] == "polar/hello-file"
    )
    # a prebuilt docker_image: used as is when present, named when not
    toml = task / "task.toml"
    text = toml.read_text()
    toml.write_text(
        text.replace("[environment]\n", '[environment]\ndocker_image = "polar/absent:1"\n')
    )
    with pytest.raises(HarborTaskError, match="'polar/absent:1' is not on this host's engine"):
        ensure_images(task)
    toml.write_text(
        text.replace("[environment]\n", f'[environment]\ndocker_image = "{docker_image}"\n')
    )
    (prebuilt,) = ensure_images(task)
    assert (prebuilt.how, prebuilt.image) == ("prebuilt", docker_image)


def test_copy_from_an_image_is_mapped_and_a_step_needing_the_network_is_named(
    docker_image: str, tmp_path: Path
) -> None:
    """`COPY --from=<image>` goes through the image map like FROM (a missing one named, a
    mapped one built); a step that tries the network fails saying builds have none."""
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "hello-file"))
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(
        f"FROM {docker_image}\n"
        "COPY --from=ghcr.io/polar-absent/uv:0.9 /etc/os-release /opt/uv-os-release\n"
        "WORKDIR /workspace\n"
    )
    with pytest.raises(HarborTaskError, match="'ghcr.io/polar-absent/uv:0.9' is not on"):
        ensure_images(task)
    (built,) = ensure_images(task, image_map={"ghcr.io/polar-absent/uv:0.9": docker_image})
    assert built.how in ("built", "cached")
    dockerfile.write_text(
        f"FROM {docker_image}\n"
        "RUN python3 -c \"import urllib.request; urllib.request.urlopen('https://pypi.org')\"\n"
    )
    with pytest.raises(HarborTaskError) as info:
        ensure_images(task)
    message = str(info.value)
    assert "builds have no network" in message, message
    assert "RUN python3 -c" in message, message


def test_a_prebuilt_images_workdir_is_the_workspace(docker_image: str, tmp_path: Path) -> None:
    """A `docker_image` task runs in the image's own WORKDIR, read offline from the engine."""
    (app_image,) = ensure_images(EXAMPLES / "app-workdir")
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "hello-file"))
    toml = task / "task.toml"
    text = toml.read_text()
    for image, workdir in ((app_image.image, "/app"), (docker_image, "/workspace")):
        toml.write_text(
            text.replace("[environment]\n", f'[environment]\ndocker_image = "{image}"\n')
        )
        (spec,) = load_harbor_tasks(task)
        assert (spec.runtime.image, spec.runtime.workdir) == (image, workdir)


# ------------------------------------------------------------ the code under test writes it

NAIVE_CHECK = """import sys

sys.path.insert(0, "/app")
sys.dont_write_bytecode = True
CASES = {"  Hello, World!  ": "hello-world", "a_b.c": "a-b-c", "!!!": ""}


def main():
    try:
        from slug import slugify

        passed = all(slugify(text) == want for text, want in CASES.items())
    except Exception:
        passed = False
    with open("/logs/verifier/reward.txt", "w") as out:
        out.write("1\\n" if passed else "0\\n")


main()
"""
"""app-workdir's check as it was (and as many real verifiers are): slug.py imported into the
process that writes the reward, run as `nobody`, who owns /logs/verifier."""

ATTACKS = {
    # the verifier writes reward.txt 0; Polar read reward.json first
    "json-beside-txt": """
try:
    with open("/logs/verifier/reward.json", "w") as _f:
        _f.write('{"reward": 1.0}')
except OSError:
    pass
""",
    # the forged reward, then the verifier never writes its own
    "exit-early": """
import os as _os
try:
    with open("/logs/verifier/reward.json", "w") as _f:
        _f.write('{"reward": 1.0}')
except OSError:
    pass
_os._exit(0)
""",
    # a writer forked at import rewrites reward.txt as soon as the verifier wrote it
    "forked-writer": """
import os as _os, time as _t
if _os.fork() == 0:
    _os.setsid()
    _null = _os.open(_os.devnull, _os.O_RDWR)
    for _fd in (0, 1, 2):
        _os.dup2(_null, _fd)
    _end = _t.monotonic() + 300
    while _t.monotonic() < _end:
        try:
            with open("/logs/verifier/reward.txt") as _f:
                _seen = _f.read()
            if _seen != "1\\n":
                with open("/logs/verifier/reward.txt", "w") as _f:
                    _f.write("1\\n")
        except OSError:
            pass
        _t.sleep(0.0005)
    _os._exit(0)
""",
    # reward.txt planted as a link: the verifier writes through it (was: task_error)
    "symlink": """
import os as _os
try:
    _os.symlink("/tmp/elsewhere", "/logs/verifier/reward.txt")
except OSError:
    pass
""",
    # the code under test sleeps past the verifier's timeout (was: task_error)
    "sleep": """
import time as _t
_t.sleep(100000)
""",
}
"""Code appended to slug.py by the harness, run by the verifier when it imports slug."""


def _plant(code: str) -> str:
    return f"cat >> slug.py <<'POLAR_ATTACK'\n{code}\nPOLAR_ATTACK\n"


def _naive_app_workdir(tmp_root: Path) -> TaskSpec:
    """app-workdir with its check as it was: the code under test imported by the process
    that writes the reward, as the verifier user `nobody` (a 20 s verifier timeout)."""
    task = Path(shutil.copytree(EXAMPLES / "app-workdir", tmp_root / "naive-app-workdir"))
    (task / "tests" / "test_slug.py").write_text(NAIVE_CHECK)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\ncd /tmp && python3 /tests/test_slug.py\n")
    toml = task / "task.toml"
    text = toml.read_text().replace(
        "timeout_sec = 120.0\n", 'timeout_sec = 20.0\nuser = "nobody"\n'
    )
    toml.write_text(text)
    return _task(task)


async def _outcome(runtime: DockerRuntime, spec: TaskSpec, script: str, sid: str) -> tuple:
    """(reward, outcome class, detail) of one session, as the Session workflow classifies
    it: an EvaluatorError is task_error, a reward of 0 policy_failure."""
    try:
        e = await _session(runtime, spec, script, sid)
    except EvaluatorError as exc:
        return None, error_outcome("EvaluatorError", "evaluate").outcome.value, str(exc)
    outcome = classify(SessionStatus.COMPLETED, reward=e.reward, harness_started=True)
    assert outcome is not None
    return e.reward, outcome.outcome.value, e.detail


async def test_what_polar_sees_of_code_under_test_that_writes_the_reward(
    runtime: DockerRuntime, tmp_root: Path
) -> None:
    """A verifier that imports the agent's code as the user owning /logs/verifier: two
    writers that disagree, a link and a sleep past the timeout are the session's, reward 0
    (policy_failure, never task_error). A forged reward with no second writer to
    contradict it cannot be told from the verifier's: the residual, which the loader warns
    about and the audit's code-writes-reward adversary shows."""
    spec = _naive_app_workdir(tmp_root)
    assert "sys.path.insert(0" in spec.metadata["harbor"]["verifier_runs_agent_code"]
    seen = {}
    for name in ("json-beside-txt", "symlink", "sleep", "exit-early", "forked-writer"):
        seen[name] = await _outcome(runtime, spec, _plant(ATTACKS[name]), f"hb-naive-{name}")
    seen["code-writes-reward"] = await _outcome(
        runtime, spec, adversary_command("code-writes-reward"), "hb-naive-adversary"
    )
    print({name: got[:2] for name, got in seen.items()})
    for name, why in (
        ("json-beside-txt", "tampering: /logs/verifier/reward.json says 1 and reward.txt says 0"),
        ("symlink", "tampering: /logs/verifier/reward.txt is a link"),
        ("sleep", "ran past its 20 s timeout with the session's changes (or the files it left)"),
    ):
        reward, outcome, detail = seen[name]
        assert (reward, outcome) == (0.0, "policy_failure"), (name, detail)
        assert why in detail, (name, detail)
    for name in ("exit-early", "forked-writer", "code-writes-reward"):  # the residual
        assert seen[name][:2] == (1.0, "ok"), (name, seen[name])
    oracle = (EXAMPLES / "app-workdir" / "solution" / "solve.sh").read_text()
    assert (await _outcome(runtime, spec, oracle, "hb-naive-oracle"))[:2] == (1.0, "ok")


async def test_a_verifier_running_the_code_as_another_user_resists_every_forgery(
    runtime: DockerRuntime,
) -> None:
    """The bundled app-workdir and fix-add: test.sh runs as root, the code under test as
    `nobody` in a child process that cannot write /logs/verifier. Every forgery scores
    the honest 0 (policy_failure), the loader has nothing to warn about, and the oracle
    still scores 1 (test_the_oracle_scores_1_and_doing_nothing_0)."""
    spec = _task(EXAMPLES / "app-workdir")
    assert spec.evaluator.harbor is not None and spec.evaluator.harbor["user"] is None
    assert "verifier_runs_agent_code" not in spec.metadata["harbor"]
    seen = {
        name: await _outcome(runtime, spec, _plant(code), f"hb-robust-{name}")
        for name, code in ATTACKS.items()
    }
    seen["code-writes-reward"] = await _outcome(
        runtime, spec, adversary_command("code-writes-reward"), "hb-robust-adversary"
    )
    fix_add = _task(EXAMPLES / "fix-add")
    seen["fix-add code-writes-reward"] = await _outcome(
        runtime, fix_add, adversary_command("code-writes-reward"), "hb-robust-fix-add"
    )
    print({name: got[:2] for name, got in seen.items()})
    for name, (reward, outcome, detail) in seen.items():
        assert (reward, outcome) == (0.0, "policy_failure"), (name, detail)
