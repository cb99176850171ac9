"""A real harness session on a Harbor task, end to end, graded by the task's test.sh.

The bundled `fix-add` task (examples/harbor) is loaded by Polar's loader with the
Pi harness; its environment is built offline on the harness image, named through
the image map (`polar/runtime:py311` -> `polar/harness:node20`, so the Pi CLI is in
the task's image). The Pi CLI runs in the sealed container against the agent
backend (through the gateway, token ids from the tiny model's tokenizer), whose
plan lists, reads, edits calc.py and runs a check. The `harbor` evaluator grades
in a fresh container: /tests copied in, test.sh run as root (calc.py run as
`nobody` in a child process of the tests), the reward and its components read
from /logs/verifier. The gold edit scores 1, a wrong one 0
with its components saying which cases failed.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from activities.harnesses import CLI_ADAPTERS
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, Timeouts
from tests.support.agent_backend import RepoTask
from tests.support.harness_stack import HarnessStack
from tests.support.paths import REPO
from tests.system.test_harness_clis import CLI_BUDGET_S, PLAN

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor" / "fix-add"
CHECK = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"
FIXES = {"gold": "    return a + b", "wrong": "    return a * b"}


@pytest.mark.parametrize("variant", ["gold", "wrong"])
async def test_pi_on_a_harbor_task_graded_by_its_test_sh(
    variant: str, harness_stack: HarnessStack, harness_image: str, storage: Storage
) -> None:
    adapter = CLI_ADAPTERS["pi"]
    polar, backend = harness_stack.polar, harness_stack.backend
    if adapter.installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip(f"{adapter.package} is not installed: run infra/harnesses/install.sh")
    image_map = {"polar/runtime:py311": harness_image}
    (built,) = ensure_images(TASK, image_map=image_map)
    (spec,) = load_harbor_tasks(TASK, harness=HarnessSpec(kind="pi"), image_map=image_map)
    assert spec.runtime.image == built.image and spec.evaluator.kind == "harbor"
    spec = spec.model_copy(
        update={
            "task_id": f"hb-pi-{variant}-{uuid.uuid4().hex[:6]}",
            "timeouts": Timeouts(
                harness_s=CLI_BUDGET_S, evaluate_s=300, heartbeat_s=20, max_attempts=1
            ),
        }
    )
    before = (TASK / "environment" / "calc.py").read_text()
    after = before.replace("    return a - b", FIXES[variant])
    backend.reset()
    backend.assign(RepoTask.from_texts(Path("/workspace"), "calc.py", before, after, CHECK))
    started = time.monotonic()
    result = await polar.wait(await polar.submit(spec), timeout_s=CLI_BUDGET_S + 400)
    (session,) = result.sessions
    sid = session.session_id
    print(
        f"harbor pi {variant}: {session.status} reward={session.reward} in "
        f"{time.monotonic() - started:.1f}s (stages {session.stage_seconds}), build {built.how} "
        f"{built.seconds}s, {session.num_completions} calls"
    )
    assert session.status == SessionStatus.COMPLETED, session.error
    assert backend.steps() == PLAN
    report = json.loads(storage.get_bytes(artifact_key(sid, "harbor-report.json")))
    # the evaluator's fresh runtime was prepared while Pi ran (the registry declares it)
    assert report["patch_files"] == ["calc.py"] and report["eval_runtime"] == "prewarmed"
    assert report["verifier_user"] is None and report["reward_file"] == "reward.json"
    if variant == "gold":
        assert session.reward == 1.0, session.evaluation
        assert report["components"]["passed"] == 4.0
    else:
        assert session.reward == 0.0, session.evaluation
        # a * b: only mul_kept holds; every case is a component of the report
        assert report["components"] == {
            "reward": 0.0,
            "passed": 1.0,
            "add_small": 0.0,
            "add_negative": 0.0,
            "add_float": 0.0,
            "mul_kept": 1.0,
        }
    # every call of the harness went through the gateway, with its token ids
    records = storage.list_completions(sid)
    assert len(records) == session.num_completions > 0
    assert all(r.has_token_ids for r in records)
