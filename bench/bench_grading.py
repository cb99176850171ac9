"""Grading time of the `swebench` and `command` evaluators in a Docker container.

    .venv/bin/python bench/bench_grading.py                  # polar/runtime:py311, 4 rounds
    .venv/bin/python bench/bench_grading.py --no-git         # that image with git removed

The bundled `polar-tasks__textkit-1` instance (infra/tasks/build_swe_tasks.py, built into
a temp dir): one session container gets the gold fix, another stays untouched (a no-op);
each is graded `--rounds` times by each evaluator (swebench: the instance's tests under
Polar's runner; command: `pytest tests/test_slug.py`), each time in a fresh evaluator
container prepared beforehand (its prepare and baseline not timed, as the prewarm does
them while the harness runs). Prints the seconds of each grading (`evaluate` alone: the
session's patch read and carried, the evaluator's git work, the tests) as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from activities.evaluators import EvaluationJob, get_evaluator  # noqa: E402
from activities.evaluators.baseline import record_baseline  # noqa: E402
from activities.evaluators.fresh import eval_prepare_request  # noqa: E402
from activities.runtimes.kinds.docker import DockerRuntime  # noqa: E402
from polar.contracts import PrepareRequest  # noqa: E402
from polar.tasks.spec import EvaluatorSpec, GitSource, RuntimeSpec  # noqa: E402
from polar.tasks.swe import evaluator_fields, load_instances  # noqa: E402
from tests.support.stock_images import python_without_git  # noqa: E402
from tests.support.swe_tasks import load_task_builder  # noqa: E402

IMAGE = "polar/runtime:py311"
INSTANCE = "polar-tasks__textkit-1"


async def bench(image: str, rounds: int, work: Path) -> dict[str, object]:
    builder = load_task_builder()
    builder.build(work / "swe")
    (inst,) = load_instances(work / "swe" / "instances.jsonl", ids=[INSTANCE])
    recipe = next(t for t in builder.TASKS if t["name"] == "textkit")
    fixed = recipe["gold"]["textkit/slug.py"]
    source = GitSource(
        url=str(work / "swe" / "repos" / "polar-tasks__textkit"), ref=inst.base_commit
    )
    spec = RuntimeSpec(kind="docker", image=image, cpus=1, memory="1g")
    evaluators = {
        "swebench": EvaluatorSpec(kind="swebench", swebench=evaluator_fields(inst)),
        "command": EvaluatorSpec(
            kind="command", command="python -m pytest -q -p no:cacheprovider tests/test_slug.py"
        ),
    }
    runtime = DockerRuntime(work / "runtimes")
    out: dict[str, object] = {"image": image}
    sessions = {"gold": f"cat > textkit/slug.py <<'EOF_'\n{fixed}EOF_\n", "noop": "true"}
    for name, script in sessions.items():
        request = PrepareRequest(
            session_id=f"bench-{name}", task_id="t", runtime=spec, source=source
        )
        session = await record_baseline(runtime, await runtime.prepare(request))
        try:
            await runtime.run(session, script, env={}, log_name="harness", timeout_s=60)
            for kind, evaluator in evaluators.items():
                times = []
                for _ in range(rounds):
                    prep = eval_prepare_request(
                        session.session_id, "t", source, spec, "docker", evaluator
                    )
                    fresh = await record_baseline(runtime, await runtime.prepare(prep))
                    try:
                        job = EvaluationJob(
                            runtime, session, runtime, fresh, evaluator, 120, prepare=prep
                        )
                        started = time.monotonic()
                        graded = await get_evaluator(kind).evaluate(job)
                        times.append(round(time.monotonic() - started, 3))
                    finally:
                        await runtime.teardown(fresh)
                out[f"{kind} {name}"] = {"seconds": times, "reward": graded.reward}
        finally:
            await runtime.teardown(session)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--no-git", action="store_true", help=f"{IMAGE} with git removed")
    args = parser.parse_args()
    image = python_without_git(IMAGE) if args.no_git else IMAGE
    with tempfile.TemporaryDirectory(prefix="polar-bench-grading-") as tmp:
        print(json.dumps(asyncio.run(bench(image, args.rounds, Path(tmp))), indent=1))


if __name__ == "__main__":
    main()
