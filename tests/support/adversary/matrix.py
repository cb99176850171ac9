"""Each attack alone, as its own session, on a real stack: the attack → runtime → reward table.

    .venv/bin/python -m tests.support.adversary.matrix              # docker and local
    .venv/bin/python -m tests.support.adversary.matrix --runtimes docker

The stack is bench_scheduling's (Temporal dev server, SeaweedFS, gateway,
fake backend, a `polar worker` process). Every session's harness is
attack.py with a WRONG fix (`add` still subtracts) plus one attack, so the
honest reward is 0; `honest fix` is the control (1). Run from an older
checkout (PYTHONPATH pointing at it) to get the "before" column: fields the
older TaskSpec lacks (`disk`, `pids`) are left out there. Prints a markdown
table and writes JSON beside it (`--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from polar.client.sdk import PolarClient
from polar.session_keys import SessionIdentity, mint_session_key
from polar.storage import Storage, artifact_key
from polar.tasks.spec import RuntimeSpec, TaskSpec

HERE = Path(__file__).resolve().parent
CALC = "def add(a, b):\n    return a - b  # BUG\n\n\ndef sub(a, b):\n    return a - b\n"
TEST_SUB = "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
TEST_PATCH = """diff --git a/tests/test_calc.py b/tests/test_calc.py
--- a/tests/test_calc.py
+++ b/tests/test_calc.py
@@ -3,3 +3,8 @@ from calc import sub
 
 def test_sub():
     assert sub(3, 1) == 2
+
+
+def test_add():
+    from calc import add
+    assert add(2, 2) == 4
"""
GRADING = ("edit_tests", "conftest", "fake_passed", "late_fix")
ROUTES = ("/admin/status", "/metrics", "/docs", "/health")


def make_repo(root: Path) -> tuple[Path, str]:
    repo = root / "calc-repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tools").mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TEST_SUB)
    for script in sorted(HERE.glob("attack*.py")):  # attack.py and each area's attacks_*.py
        (repo / "tools" / script.name).write_text(script.read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    return repo, sha


def swebench_evaluator(sha: str) -> dict[str, Any]:
    """The calc repo's SWE-bench-style grading: test_add fails before the fix."""
    return {
        "kind": "swebench",
        "swebench": {
            "instance_id": "calc-1",
            "base_commit": sha,
            "test_patch": TEST_PATCH,
            "fail_to_pass": ["tests/test_calc.py::test_add"],
            "pass_to_pass": ["tests/test_calc.py::test_sub"],
        },
    }


def rows(kind: str, repo: Path, sha: str, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Attack name → TaskSpec fields of its one session."""
    limits = set(RuntimeSpec.model_fields)
    runtime: dict[str, Any] = {"kind": kind}
    swebench = swebench_evaluator(sha)
    command = {
        "kind": "command",
        "command": 'python3 -c "from calc import add; assert add(2, 2) == 4"',
    }
    none = "none_of_them"
    out: dict[str, dict[str, Any]] = {
        "honest fix (control)": {
            "evaluator": swebench,
            "env": {"ATTACK_FIX": "1", "ATTACK_ONLY": none},
        },
        "wrong fix, no attack": {"evaluator": swebench, "env": {"ATTACK_ONLY": none}},
    }
    for attack in GRADING:
        out[f"{attack} (swebench)"] = {"evaluator": swebench, "env": {"ATTACK_ONLY": attack}}
    out["plant_reward (command)"] = {"evaluator": command, "env": {"ATTACK_ONLY": "plant_reward"}}
    if kind != "local":
        disk = {"disk": "64m"} if "disk" in limits else {}
        pids = {"pids": 128} if "pids" in limits else {}
        out["fill_disk 400 MB"] = {
            "evaluator": command,
            "runtime": disk,
            "env": {"ATTACK_FILL_MB": "400", "ATTACK_ONLY": none},
        }
        out["fork_bomb"] = {
            "evaluator": command,
            "runtime": pids,
            "env": {"ATTACK_FORK_BOMB": "1"},
            "harness_s": 15,
        }
    for row in out.values():
        row["runtime"] = runtime | row.get("runtime", {})
        row["env"] = env | row["env"]
    return out


async def run(bench: Any, kinds: list[str], root: Path) -> list[dict[str, Any]]:
    s = bench.settings
    temporal = int(s.temporal_address.rsplit(":", 1)[1])
    s3 = int(str(s.s3_endpoint).rsplit(":", 1)[1])
    ports = {
        "temporal-grpc": temporal,
        "temporal-ui": s.temporal_ui_port,
        "temporal-http": temporal + 10,
        "s3": s3,
        "seaweed-master": s3 + 1,
        "seaweed-volume": s3 + 2,
        "seaweed-filer": s3 + 3,
        "gateway": s.gateway_port,
        "upstream": bench.backend_port,
    }
    results: list[dict[str, Any]] = []
    with bench.worker(f"matrix-{uuid.uuid4().hex[:6]}", 8, 8, 8) as settings:
        polar = await PolarClient.connect(settings)
        storage = Storage(settings)
        for kind in kinds:
            repo, sha = make_repo(root / kind)
            victim = SessionIdentity(f"victim-{uuid.uuid4().hex[:8]}", "victim")
            env = {
                "ATTACK_PORTS": ",".join(f"{k}={v}" for k, v in ports.items()),
                "ATTACK_UPSTREAM": f"{bench.backend}/v1",
                "ATTACK_VICTIM_KEY": mint_session_key(victim, settings.session_secret),
            }
            specs = rows(kind, repo, sha, env)

            done = await asyncio.gather(
                *(one(polar, storage, kind, repo, sha, n, r) for n, r in specs.items())
            )
            victim_records = storage.count_completions(victim.session_id)
            for row in done:
                row["victim_records"] = victim_records
            results.extend(done)
    return results


async def one(
    polar: PolarClient,
    storage: Storage,
    kind: str,
    repo: Path,
    sha: str,
    name: str,
    row: dict[str, Any],
) -> dict[str, Any]:
    """Run one row's session; its status, reward, detail and the harness's attack report."""
    spec = TaskSpec.model_validate(
        {
            "task_id": f"matrix-{kind}-{uuid.uuid4().hex[:8]}",
            "instruction": "make add() add",
            "source": {"type": "git", "url": str(repo), "ref": sha},
            "runtime": row["runtime"],
            "harness": {
                "kind": "command",
                "command": "python3 tools/attack.py",
                "env": row["env"],
            },
            "evaluator": row["evaluator"],
            "timeouts": {
                "harness_s": row.get("harness_s", 120),
                "heartbeat_s": 20,
                "max_attempts": 1,
            },
        }
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=900)
    [session] = result.sessions
    report: dict[str, Any] = {}
    try:
        out = storage.get_bytes(
            artifact_key(session.session_id, "harness-attempt1.stdout")
        ).decode()
        lines = [x for x in out.splitlines() if x.startswith("ATTACK-REPORT ")]
        report = json.loads(lines[-1].removeprefix("ATTACK-REPORT ")) if lines else {}
    except Exception:  # noqa: BLE001 - a harness that left no log
        pass
    return {
        "attack": name,
        "runtime": kind,
        "status": str(session.status.value),
        "reward": session.reward,
        "detail": (session.evaluation or session.error or "")[:160],
        "report": report,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["| attack | runtime | status | reward | detail |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['attack']} | {r['runtime']} | {r['status']} | {r['reward']} | "
            f"{r['detail'].replace('|', '/')} |"
        )
    lines += [
        "",
        "| runtime | stack ports reached | backend direct | victim-key records | "
        "admin / metrics / docs / health via the harness's gateway URL |",
        "|---|---|---|---|---|",
    ]
    seen = set()
    for r in results:
        rep = r["report"]
        if r["runtime"] in seen or "reached_ports" not in rep:
            continue
        seen.add(r["runtime"])
        routes = rep.get("routes", {})
        lines.append(
            f"| {r['runtime']} | {len(rep['reached_ports'])}/9 {rep['reached_ports']} | "
            f"{rep.get('upstream_direct')} | {r['victim_records']} | "
            f"{', '.join(str(routes.get(p)) for p in ROUTES)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtimes", default="docker,local")
    parser.add_argument("--out", type=Path, default=Path("attack-matrix.json"))
    args = parser.parse_args()
    from bench.bench_scheduling import Bench  # the benchmarks' stack, only for this script

    tmp = Path(tempfile.mkdtemp(prefix="polar-matrix-"))
    tmp.chmod(0o711)
    bench = Bench(tmp, slots=64, latency_s=0.001)
    bench.start()
    try:
        results = asyncio.run(run(bench, args.runtimes.split(","), tmp))
    finally:
        bench.stop()
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(markdown(results))


if __name__ == "__main__":
    sys.exit(main())
