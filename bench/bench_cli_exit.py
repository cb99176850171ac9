"""CLI exit codes: `polar result --json` (and optionally `polar submit`) run many times.

    .venv/bin/python bench/bench_cli_exit.py                     # 200 runs, ~4 min on 2 cores
    .venv/bin/python bench/bench_cli_exit.py --runs 50 --jobs 2 --submit 10
    .venv/bin/python bench/bench_cli_exit.py --workflow-id ID    # a finished task of the
                                                                 # stack POLAR_* names

Without `--workflow-id` it starts its own stack on free loopback ports, state
in a temp dir (the Temporal dev server, SeaweedFS and one `polar worker`
process, all stopped at the end), submits one one-session task (harness
`true`, no source, no evaluator) and waits for it. Then it runs `polar result
--json <workflow id>` `--runs` times as separate processes (`--jobs` at a
time) and counts their exit codes; a run counts as clean only with exit 0 and a
complete JSON TaskResult on stdout. `--submit N` also runs `polar submit` of a
one-session task file N times. Exit 134 with `Fatal Python error:
PyGILState_Release` on stderr is the crash at interpreter shutdown that
temporalio/sdk-python#300 describes (the SDK's Rust threads calling into a
finalising interpreter). Prints a table; keeps the figures in
bench/results/cli_exit.json under `--label` (other labels stay). Exits 1 if
any run was not clean.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.devstack import DevStack  # noqa: E402
from polar.contracts import TaskResult  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage  # noqa: E402
from polar.tasks.spec import TaskSpec  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results" / "cli_exit.json"
POLAR = [sys.executable, "-m", "app.cli"]
CRASH = "PyGILState_Release"


def one_session_task(task_id: str) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "runtime": {"kind": "local"},
        "harness": {"kind": "command", "command": "true"},
        "evaluator": {"kind": "none"},
        "builder": {"name": "per_request"},
    }


@contextlib.contextmanager
def own_stack(tmp: Path) -> Iterator[tuple[Settings, dict[str, str]]]:
    """Temporal, SeaweedFS and one worker on free ports; yields its settings and POLAR_* env."""
    base = free_port(span=48)
    settings = Settings(
        data_dir=tmp,
        temporal_address=f"127.0.0.1:{base}",
        temporal_ui_port=base + 1,
        s3_endpoint=f"http://127.0.0.1:{base + 30}",
        s3_bucket="polar-bench",
        gateway_port=base + 40,
        session_secret=secrets.token_hex(16),
        model_dir=None,
        task_queue=f"bench-exit-{uuid.uuid4().hex[:6]}",
    )
    stack = DevStack(settings, with_model=False, die_with_parent=True)
    settings = stack.settings  # with the stack's own S3 keys, where it makes them
    started: list[str] = []

    def log(line: str) -> None:
        print(f"  {line}", file=sys.stderr)

    try:
        for service in (stack.temporal(), stack.seaweedfs(), stack.worker(1)):
            stack.start(service, log=log)
            started.append(service.name)
            if service.name == "seaweedfs":
                Storage(settings).ensure_bucket()
        yield settings, stack.env()
    finally:
        for name in reversed(started):
            stack.stop(name, quiet=True, log=log)


async def finished_task(settings: Settings) -> str:
    """Submit a one-session task to the stack; its workflow id once it finished."""
    from polar.client.sdk import PolarClient

    polar = await PolarClient.connect(settings)
    spec = TaskSpec.model_validate(one_session_task(f"bench-exit-{uuid.uuid4().hex[:6]}"))
    run = await polar.submit(spec)
    await polar.wait(run, timeout_s=300)
    return run.workflow_id


def run_cli(argv: list[str], env: dict[str, str], want_json: bool) -> tuple[int, str, float]:
    """(exit code, kind of outcome, seconds) of one CLI process."""
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    if proc.returncode != 0:
        kind = "crash at exit" if CRASH in proc.stderr else "failed"
        return proc.returncode, kind, took
    if want_json:
        try:
            TaskResult.model_validate(json.loads(proc.stdout))
        except ValueError:
            return 0, "exit 0, incomplete output", took
    return 0, "clean", took


def count(
    label: str, argv: list[str], env: dict[str, str], runs: int, jobs: int, want_json: bool
) -> dict[str, Any]:
    with ThreadPoolExecutor(jobs) as pool:
        outcomes = list(pool.map(lambda _: run_cli(argv, env, want_json), range(runs)))
    codes = collections.Counter(code for code, _, _ in outcomes)
    kinds = collections.Counter(kind for _, kind, _ in outcomes)
    seconds = sorted(t for _, _, t in outcomes)
    return {
        "command": label,
        "runs": runs,
        "exit_codes": {str(k): v for k, v in sorted(codes.items())},
        "outcomes": dict(kinds),
        "clean": kinds.get("clean", 0),
        "median_s": round(seconds[len(seconds) // 2], 2) if seconds else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="`polar result --json` runs")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--submit", type=int, default=0, help="`polar submit` runs")
    parser.add_argument("--workflow-id", help="a finished task on the stack POLAR_* names")
    parser.add_argument("--label", default="latest", help="the figures' name in the results")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if args.workflow_id:
            env = {k: v for k, v in os.environ.items() if k.startswith("POLAR_")}
            workflow_id = args.workflow_id
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="polar-exit-")))
            settings, env = stack.enter_context(own_stack(tmp))
            workflow_id = asyncio.run(finished_task(settings))
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")} | env
        print(f"polar result --json {workflow_id} × {args.runs} ({args.jobs} at a time)")
        rows = [
            count(
                "polar result --json",
                [*POLAR, "result", "--json", workflow_id],
                child_env,
                args.runs,
                args.jobs,
                want_json=True,
            )
        ]
        if args.submit:
            task_file = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "task.json"
            task_file.write_text(json.dumps(one_session_task("bench-exit-submit")))
            print(f"polar submit × {args.submit}")
            rows.append(
                count(
                    "polar submit",
                    [*POLAR, "submit", str(task_file)],
                    child_env,
                    args.submit,
                    args.jobs,
                    want_json=False,
                )
            )

    print("\n| command | runs | exit codes | clean | median s |")
    print("|---|---|---|---|---|")
    for row in rows:
        codes = ", ".join(f"{code}: {n}" for code, n in row["exit_codes"].items())
        print(
            f"| {row['command']} | {row['runs']} | {codes} | {row['clean']} | {row['median_s']} |"
        )
    runs = json.loads(RESULTS.read_text()).get("runs", {}) if RESULTS.exists() else {}
    runs[args.label] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": f"{platform.node()} ({os.cpu_count()} cpus)",
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    return 0 if all(row["clean"] == row["runs"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
