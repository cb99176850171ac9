"""Harbor tasks: build and grading time per bundled task, on the local Docker engine.

    .venv/bin/python bench/bench_harbor.py        # the sound tasks of examples/harbor, ~2 min

For each task: its environment image removed, built (`ensure_images`: no network,
no pull) and timed, then found again (the cache, timed); a session container of
the image runs the task's solution/solve.sh as a scripted agent, and the `harbor`
evaluator grades it in a fresh container (timed: prepare of the fresh runtime,
the changes carried, /tests copied in, test.sh, the reward read). Uses the Docker
engine that answers, else starts dockerd as the tests do (and stops it after); needs
polar/runtime:py311 (infra/images/build.py). Prints a markdown table; writes
bench/results/harbor.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from activities.evaluators import EvaluationJob, get_evaluator  # noqa: E402
from activities.evaluators.base import reap  # noqa: E402
from activities.evaluators.baseline import record_baseline  # noqa: E402
from activities.evaluators.fresh import eval_prepare_request, fresh_runtime  # noqa: E402
from activities.runtimes.kinds.docker import DockerRuntime  # noqa: E402
from app.devstack import DevStack  # noqa: E402
from polar.contracts import PrepareRequest  # noqa: E402
from polar.settings import get_settings  # noqa: E402
from polar.tasks.harbor import load_harbor_tasks  # noqa: E402
from polar.tasks.harbor_images import ensure_image  # noqa: E402
from polar.tasks.harbor_toml import read_harbor_task  # noqa: E402

EXAMPLES = REPO / "examples" / "harbor"
SOUND = ("hello-file", "fix-add", "csv-sum")


async def one(name: str, runtime: DockerRuntime, client: docker.DockerClient) -> dict[str, object]:
    task = read_harbor_task(EXAMPLES / name)
    (spec,) = load_harbor_tasks(EXAMPLES / name)
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(spec.runtime.image, force=True)
    started = time.monotonic()
    built = ensure_image(task, client)
    build_s = time.monotonic() - started
    started = time.monotonic()
    cached = ensure_image(task, client)
    cached_s = time.monotonic() - started
    sid = f"bench-{name}"
    prepare = PrepareRequest(session_id=sid, task_id=sid, runtime=spec.runtime)
    handle = await record_baseline(runtime, await runtime.prepare(prepare))
    try:
        solve = (EXAMPLES / name / "solution" / "solve.sh").read_text()
        await runtime.run(handle, solve, env={}, log_name="oracle", timeout_s=120)
        await reap(runtime, handle)
        started = time.monotonic()  # as `evaluate` without a prewarm: a cold fresh runtime
        request = eval_prepare_request(sid, sid, None, spec.runtime, "docker", spec.evaluator)
        async with fresh_runtime(runtime, request) as eval_handle:
            job = EvaluationJob(runtime, handle, runtime, eval_handle, spec.evaluator, 300)
            evaluation = await get_evaluator("harbor").evaluate(job)
        grade_s = time.monotonic() - started
    finally:
        await runtime.teardown(handle)
    return {
        "task": name,
        "build": built.how,
        "build_s": round(build_s, 2),
        "cached": cached.how,
        "cached_s": round(cached_s, 3),
        "oracle_reward": evaluation.reward,
        "grade_s": round(grade_s, 2),
    }


async def main() -> None:
    stack = DevStack(get_settings(), with_model=False, workers=0, die_with_parent=True)
    started = stack.ensure_docker(log=lambda _: None)
    try:
        client = docker.from_env()
        with tempfile.TemporaryDirectory(prefix="polar-bench-harbor-") as tmp:
            runtime = DockerRuntime(Path(tmp) / "runtimes")
            rows = [await one(name, runtime, client) for name in SOUND]
    finally:
        if started:
            stack.stop("docker", quiet=True)
    print("| task | build | cache hit | oracle reward | grading (fresh runtime + test.sh) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['task']} | {r['build_s']} s ({r['build']}) | {r['cached_s']} s ({r['cached']}) "
            f"| {r['oracle_reward']} | {r['grade_s']} s |"
        )
    out = REPO / "bench" / "results" / "harbor.json"
    out.write_text(
        json.dumps({"machine": platform.node(), "cpus": os.cpu_count(), "rows": rows}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    asyncio.run(main())
