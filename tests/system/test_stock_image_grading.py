"""The `swebench` and `command` evaluators grade on task images without git, as real sessions.

Their git work in the fresh runtime (the base commit checked, files listed at base, test
files and pytest sections restored, the session's patch and the test patch applied) is the
worker's own git on one copy of that runtime's workspace, the result put back as data
(activities/evaluators/workspace_git.py), and the fresh runtime's checkout of `base_commit`
reads HEAD with sh alone where the image has no git (polar/tasks/evaluator_spec.py). So:

* a SWE-bench-style task whose tests are a shell script (its log read by swebench's
  `parse_log_pytest`, the trusting mode) and a `command` task grade on the debootstrapped
  Debian without git or python3 and on the busybox-only image (tests/support/
  stock_images.py), on docker (and the Debian on podman): the oracle 1, a no-op 0;
* a bundled SWE-style instance with Polar's pytest runner grades on the suite's runtime
  image with git removed (python3 and pytest are the repository's tests' own needs, not
  Polar's): the gold fix 1, a no-op 0.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from polar.tasks.swe import SweInstance, instance_to_task
from tests.support.git import git
from tests.support.stock_images import in_podman, python_without_git, stock_images
from tests.support.swe_tasks import load_task_builder

pytestmark = pytest.mark.slow

CALC = "add() {{ echo $(($1 + $2)); }}\nsub() {{ echo $(($1 {op} $2)); }}\n"
RUN_TESTS = (  # prints pytest-like lines: swebench's parse_log_pytest reads them
    ". ./calc.sh\n"
    't() { if [ "$2" = "$3" ]; then echo "PASSED $1"; else echo "FAILED $1"; fi; }\n'
    't tests/run.sh::test_add "$(add 2 3)" 5\n'
)
TEST_PATCH = """diff --git a/tests/run.sh b/tests/run.sh
--- a/tests/run.sh
+++ b/tests/run.sh
@@ -3 +3,2 @@ t() { if [ "$2" = "$3" ]; then echo "PASSED $1"; else echo "FAILED $1"; fi; }
 t tests/run.sh::test_add "$(add 2 3)" 5
+t tests/run.sh::test_sub "$(sub 5 3)" 2
"""
CHECK = '. ./calc.sh\n[ "$(add 2 3)" = 5 ] && [ "$(sub 5 3)" = 2 ]\n'
ORACLE = f"cat > calc.sh <<'POLAR_EOF'\n{CALC.format(op='-')}POLAR_EOF\n"


def _sh_repo(folder: Path) -> tuple[Path, str]:
    """A repository whose `sub` adds (the bug), its tests shell scripts; (path, base)."""
    repo = folder / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.sh").write_text(CALC.format(op="+"))
    (repo / "tests" / "run.sh").write_text(RUN_TESTS)
    (repo / "tests" / "check.sh").write_text(CHECK)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        git(repo, *args)
    return repo, git(repo, "rev-parse", "HEAD")


def _evaluators(base: str) -> dict[str, dict[str, Any]]:
    swebench = {
        "instance_id": "calc-1",
        "base_commit": base,
        "test_patch": TEST_PATCH,
        "fail_to_pass": ["tests/run.sh::test_sub"],
        "pass_to_pass": ["tests/run.sh::test_add"],
        "test_cmd": "sh tests/run.sh",
        "test_files": [],
        "log_parser": "parse_log_pytest",
    }
    return {
        "swebench": {"kind": "swebench", "swebench": swebench},
        "command": {"kind": "command", "command": "sh tests/check.sh"},
    }


async def _rewards(polar: PolarClient, tasks: dict[str, TaskSpec]) -> dict[str, float | None]:
    results = await asyncio.gather(
        *[polar.wait(await polar.submit(t), timeout_s=300) for t in tasks.values()]
    )
    rewards = {}
    for name, result in zip(tasks, results, strict=True):
        (session,) = result.sessions
        assert session.status == SessionStatus.COMPLETED, (name, session.error)
        rewards[name] = session.reward
    return rewards


@pytest.mark.parametrize(
    ("image", "kind"), [("debian", "docker"), ("busybox", "docker"), ("debian", "podman")]
)
async def test_swebench_and_command_tasks_grade_on_an_image_without_git(
    image: str, kind: str, polar: PolarClient, docker_image: str, tmp_path: Path
) -> None:
    built = stock_images()[image]
    if kind == "podman":
        in_podman(built)
    repo, base = _sh_repo(tmp_path)
    tasks = {
        f"{evaluator}-{name}": TaskSpec.model_validate(
            {
                "task_id": f"nogit-{image}-{kind}-{evaluator}-{name}",
                "source": {"type": "git", "url": str(repo), "ref": base},
                "runtime": {"kind": kind, "image": built},
                "harness": {"kind": "command", "command": command},
                "evaluator": spec,
            }
        )
        for evaluator, spec in _evaluators(base).items()
        for name, command in (("oracle", ORACLE), ("noop", "true"))
    }
    started = time.monotonic()
    rewards = await _rewards(polar, tasks)
    print(f"{image} on {kind}: {rewards} in {time.monotonic() - started:.1f}s")
    assert rewards == {
        "swebench-oracle": 1.0,
        "swebench-noop": 0.0,
        "command-oracle": 1.0,
        "command-noop": 0.0,
    }


async def test_a_pytest_instance_grades_on_an_image_without_git(
    polar: PolarClient, docker_image: str, swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    """Polar's pytest runner, the module probe and the test patch, with git only on the
    worker; the fix written by the harness without git (the image has none)."""
    image = python_without_git(docker_image)
    inst = instances["polar-tasks__textkit-1"]
    recipe = next(t for t in load_task_builder().TASKS if t["name"] == "textkit")
    fixed = recipe["gold"]["textkit/slug.py"]
    gold = f"cat > textkit/slug.py <<'POLAR_EOF'\n{fixed}POLAR_EOF\n"
    tasks = {
        name: instance_to_task(
            inst,
            harness={"kind": "command", "command": command},
            source_root=swe_dir / "repos",
            task_id=f"nogit-pytest-{name}",
            runtime={"kind": "docker", "image": image, "cpus": 1, "memory": "1g"},
            timeouts={"evaluate_s": 180, "heartbeat_s": 20},
        )
        for name, command in (("gold", gold), ("noop", "true"))
    }
    assert await _rewards(polar, tasks) == {"gold": 1.0, "noop": 0.0}
