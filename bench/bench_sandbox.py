"""What the sealed session costs: container start, channel, reap and the fresh evaluation runtime.

    .venv/bin/python bench/bench_sandbox.py              # about 2 min on 2 cores
    .venv/bin/python bench/bench_sandbox.py --runs 10    # more repetitions of each part

Two parts, one run, on the local Docker engine (`polar/runtime:py311`), and part (a) again
for the `local` runtime (a root worker's sealed sandbox) and `bwrap` (the sandbox of a
worker that is not root), side by side. `bwrap` runs as an ordinary user (`--bwrap-user`,
default `polar-hpc`, the tests' HPC user: a child process of this bench, the system
python3 with the venv's packages, the local runtime detecting its mode as a worker of that
user does); where there is no such user or this bench is not root, the bwrap sandbox is
forced in this process (the same command lines, made by root):

(a) Components, timed through the runtime API (median of `--runs`): preparing a
    container session (create, start, copy a small repo in), a no-op command,
    the same command behind the gateway channel (relay up, forwarder started in
    the container and ready, relay down), a reap (SIGKILL the container's init,
    start it again), and preparing the evaluator's fresh runtime.
(b) Whole sessions through Temporal (the `bench_scheduling` stack: dev server,
    SeaweedFS, gateway, a `polar worker` process, a fake backend answering in
    about 1 ms): one-session tasks on Docker whose harness makes 4 model calls
    through the channel and whose command evaluator grades in the fresh runtime;
    submit → result latency and stage seconds.

The sandbox's added cost per session is channel + reap on the critical path;
the fresh evaluation runtime is prepared while the harness runs (prewarm), so
it is off the critical path unless the harness is faster than it. Both are
reported as a share of the session's latency. Writes bench/results/sandbox.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from activities.runtimes.base import Runtime  # noqa: E402
from activities.runtimes.kinds.docker import DockerRuntime  # noqa: E402
from activities.runtimes.kinds.local import LocalRuntime  # noqa: E402
from activities.runtimes.network.channel import SANDBOX_DIR, GatewayRelay, with_forwarder  # noqa: E402
from activities.runtimes.sandboxes import bwrap  # noqa: E402
from activities.runtimes.sandboxes.local_sandbox import Sandbox  # noqa: E402
from app.devstack import DevStack  # noqa: E402
from bench.bench_scheduling import MODEL, Bench, run_sessions  # noqa: E402
from polar.contracts import PrepareRequest
from polar.tasks.spec import DirSource, RuntimeSpec, TaskSpec  # noqa: E402

IMAGE = "polar/runtime:py311"
RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"
REPO = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
BWRAP_USER = "polar-hpc"


def small_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "hello.txt").write_text("hello\n")
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    return repo


def harness(calls: int) -> str:
    """`calls` sequential Chat Completions calls through the session's gateway URL."""
    body = json.dumps(
        {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Fix it."}]}
    )
    code = (
        "import os, urllib.request as u\n"
        f"for _ in range({calls}):\n"
        "    r = u.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
        f"data={body.encode()!r}, headers={{'content-type': 'application/json', "
        "'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
        "    u.urlopen(r, timeout=60).read()\n"
        "open('hello.txt', 'a').write('fixed\\n')\n"
    )
    return f"python3 -c {shlex.quote(code)}"


def make_runtime(kind: str, root: Path) -> tuple[Runtime, RuntimeSpec]:
    """The runtime of `kind` as a worker makes it: `local` (the root worker's sealed
    sandbox), `bwrap` (the sandbox of a worker that is not root, forced here in the bench's
    process: the same command lines), `docker`."""
    if kind == "docker":
        return DockerRuntime(root / "runtimes"), RuntimeSpec(kind="docker", image=IMAGE)
    if kind == "bwrap" and os.geteuid() != 0:  # as a worker of this user: detected
        runtime = LocalRuntime(root / "runtimes")
        if runtime.sandbox.mode != bwrap.MODE:
            raise RuntimeError(f"this user's sandbox is {runtime.sandbox.mode}, not bwrap")
        return runtime, RuntimeSpec(kind="local")
    if kind == "bwrap":
        tool = bwrap.tool("bwrap")
        if tool is None or bwrap.probe(tool):
            raise RuntimeError(f"no bwrap sandbox here: {bwrap.probe(tool)}")
        sandbox = Sandbox(bwrap.MODE, (tool,))
        return LocalRuntime(root / "runtimes", sandbox=sandbox), RuntimeSpec(kind="local")
    return LocalRuntime(root / "runtimes"), RuntimeSpec(kind="local")


async def components(tmp: Path, gateway: str, runs: int, kind: str = "docker") -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    tmp.chmod(0o711)
    runtime, spec = make_runtime(kind, tmp)
    repo = small_repo(tmp)
    laps: dict[str, list[float]] = {
        k: []
        for k in ("prepare", "command", "command_via_channel", "reap", "eval_prepare", "teardown")
    }
    for i in range(runs):
        request = PrepareRequest(
            session_id=f"bench-{i}-{uuid.uuid4().hex[:6]}",
            task_id="bench",
            runtime=spec,
            source=DirSource(path=str(repo)),
        )
        t = time.perf_counter()
        handle = await runtime.prepare(request)
        laps["prepare"].append(time.perf_counter() - t)
        try:
            t = time.perf_counter()
            await runtime.run(handle, "true", env={}, log_name="plain", timeout_s=60)
            laps["command"].append(time.perf_counter() - t)
            t = time.perf_counter()
            # as run_harness does it: the worker's listener in the sandbox's network, or the
            # relay's socket behind the in-sandbox forwarder
            inside = runtime.channel_in_sandbox(handle) or SANDBOX_DIR
            async with runtime.open_channel(handle) as listener:
                command = "true" if listener is not None else with_forwarder("true", inside)
                relay = GatewayRelay(
                    runtime.channel_dir(handle), gateway, "pk-bench", listener=listener
                )
                async with relay:
                    await runtime.run(handle, command, env={}, log_name="channel", timeout_s=60)
            laps["command_via_channel"].append(time.perf_counter() - t)
            t = time.perf_counter()
            await runtime.reap(handle)
            laps["reap"].append(time.perf_counter() - t)
            eval_request = request.model_copy(update={"session_id": f"{request.session_id}-eval"})
            t = time.perf_counter()
            eval_handle = await runtime.prepare(eval_request)
            laps["eval_prepare"].append(time.perf_counter() - t)
            await runtime.teardown(eval_handle)
        finally:
            t = time.perf_counter()
            await runtime.teardown(handle)
            laps["teardown"].append(time.perf_counter() - t)
    medians = {k: round(statistics.median(v), 3) for k, v in laps.items()}
    medians["channel"] = round(medians["command_via_channel"] - medians["command"], 3)
    medians["per_session"] = round(
        medians["prepare"]
        + medians["command_via_channel"]
        + medians["reap"]
        + medians["eval_prepare"]
        + 2 * medians["teardown"],
        3,
    )
    return {"median_s": medians, "runs": runs}


def components_as_user(user: str, tmp: Path, gateway: str, runs: int) -> dict[str, Any]:
    """`components(..., "bwrap")` in a child process of `user` (an ordinary user: its local
    runtime detects bwrap), as tests/support/unprivileged.py runs the HPC worker."""
    entry = pwd.getpwnam(user)
    work = tmp / "bwrap-user"
    work.mkdir(parents=True)
    os.chown(work, entry.pw_uid, entry.pw_gid)
    work.chmod(0o755)
    out = work / "result.json"
    paths = sysconfig.get_paths()
    env = {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "LANG": "C.UTF-8",
        "HOME": str(work),
        "PYTHONPATH": ":".join(dict.fromkeys([str(REPO), paths["purelib"], paths["platlib"]])),
        "POLAR_DATA_DIR": str(work / "data"),
    }
    argv = [
        *("setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"),
        *("--inh-caps=-all", "--", SYSTEM_PYTHON, str(Path(__file__).resolve())),
        *("--components-only", str(work), "--gateway", gateway, "--runs", str(runs)),
    ]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"as {user}: exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["as_user"] = user
    return result


async def sessions(bench: Bench, n: int, calls: int) -> dict[str, Any]:
    def make(i: int) -> TaskSpec:
        return TaskSpec.model_validate(
            {
                "task_id": f"sandbox-{i}-{uuid.uuid4().hex[:6]}",
                "source": {"type": "dir", "path": str(small_repo(Path(tempfile.mkdtemp())))},
                "runtime": {"kind": "docker", "image": IMAGE},
                "harness": {"kind": "command", "command": harness(calls)},
                "evaluator": {"kind": "command", "command": "grep -q fixed hello.txt"},
                "builder": {"name": "per_request"},
            }
        )

    with bench.worker(f"sandbox-{uuid.uuid4().hex[:6]}", 4, 4, 4) as settings:
        out = await run_sessions(settings, make, n, in_flight=1, limit_s=900)
    done = out["sessions"]
    stages: dict[str, list[float]] = {}
    for s in done:
        for k, v in s.stage_seconds.items():
            stages.setdefault(k, []).append(v)
    return {
        "sessions": len(done),
        "rewards": [s.reward for s in done],
        "calls": [s.num_completions for s in done],
        "latency_median_s": round(statistics.median(out["latencies"]), 3) if done else None,
        "stage_median_s": {k: round(statistics.median(v), 3) for k, v in stages.items()},
        "errors": out["errors"],
        "all_graded_with_their_calls": all(
            s.reward == 1.0 and s.num_completions == calls for s in done
        ),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="polar-bench-sandbox-"))
    tmp.chmod(0o711)
    bench = Bench(tmp, slots=64, latency_s=0.001)
    DevStack(bench.settings, with_model=False).ensure_docker(log=bench.log)
    bench.start()
    try:
        gateway = bench.settings.gateway_base_url
        parts = await components(tmp / "components", gateway, args.runs)
        by_runtime = {"docker": parts}
        for kind in args.compare.split(","):
            if kind and kind != "docker":
                try:
                    if kind == "bwrap" and os.geteuid() == 0 and _user_exists(args.bwrap_user):
                        by_runtime[kind] = await asyncio.to_thread(
                            components_as_user, args.bwrap_user, tmp, gateway, args.runs
                        )
                    else:
                        by_runtime[kind] = await components(tmp / kind, gateway, args.runs, kind)
                        by_runtime[kind]["as_user"] = pwd.getpwuid(os.geteuid()).pw_name
                except RuntimeError as exc:
                    by_runtime[kind] = {"skipped": str(exc)}
        whole = await sessions(bench, args.sessions, args.calls)
    finally:
        bench.stop()
    latency = whole["latency_median_s"] or float("nan")
    m = parts["median_s"]
    on_path = m["channel"] + m["reap"]
    return {
        "components": parts,
        "by_runtime": by_runtime,
        "sessions": whole,
        "share_of_session": {
            "channel_and_reap": round(on_path / latency, 3),
            "eval_runtime_prepare_if_not_prewarmed": round(m["eval_prepare"] / latency, 3),
        },
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "commit": _commit(),
    }


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _commit() -> str | None:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True)
    return proc.stdout.decode().strip() or None


def markdown(result: dict[str, Any]) -> str:
    m = result["components"]["median_s"]
    s = result["sessions"]
    share = result["share_of_session"]
    rows = [
        "| part | median |",
        "|---|---|",
        f"| prepare a container session (create, start, copy the repo) | {m['prepare']:.3f} s |",
        f"| a no-op command (`docker exec`) | {m['command']:.3f} s |",
        f"| the gateway channel (relay up, forwarder ready, relay down) | {m['channel']:+.3f} s |",
        f"| reap (SIGKILL init, start again) | {m['reap']:.3f} s |",
        f"| prepare the fresh evaluation runtime (prewarmed beside the harness) | "
        f"{m['eval_prepare']:.3f} s |",
        f"| teardown | {m['teardown']:.3f} s |",
        f"| whole session, submit → result ({s['sessions']} sessions, 4 calls each) | "
        f"{s['latency_median_s']} s; stages {s['stage_median_s']} |",
        f"| channel + reap ÷ session | {share['channel_and_reap']:.1%} |",
        f"| fresh evaluation runtime ÷ session, were it not prewarmed | "
        f"{share['eval_runtime_prepare_if_not_prewarmed']:.1%} |",
    ]
    rows += [
        "",
        "Sandbox cost per session by runtime (medians, s; per session = prepare + command "
        "via channel + reap + eval prepare + 2 teardowns):",
        "",
        "| runtime | prepare | command | channel | reap | eval prepare | teardown | per session |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, part in result["by_runtime"].items():
        if "skipped" in part:
            rows.append(f"| {kind} | skipped: {part['skipped']} |")
            continue
        r = part["median_s"]
        who = f" (as {part['as_user']})" if part.get("as_user") else ""
        rows.append(
            f"| {kind}{who} | {r['prepare']:.3f} | {r['command']:.3f} | {r['channel']:+.3f} | "
            f"{r['reap']:.3f} | {r['eval_prepare']:.3f} | {r['teardown']:.3f} | "
            f"{r['per_session']:.3f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument(
        "--compare", default="docker,local,bwrap", help="runtimes whose components are timed"
    )
    parser.add_argument(
        "--bwrap-user", default=BWRAP_USER, help="the ordinary user bwrap is timed as (root)"
    )
    parser.add_argument("--components-only", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--gateway", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.components_only:  # the child of components_as_user
        work = Path(args.components_only)
        part = asyncio.run(components(work / "c", args.gateway, args.runs, "bwrap"))
        (work / "result.json").write_text(json.dumps(part))
        return
    result = asyncio.run(main_async(args))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
