"""`polar tasks audit` on the real stack: the bundled Harbor dataset (examples/harbor), where
exactly the deliberately hackable tasks are flagged, each by the hack it was made for, and
the bundled SWE-bench instances (gold patch 1, empty patch 0, test-edit patch 0); `polar
submit` of a flagged task warns, and refuses it with --strict. And the adversaries that
no bundled task falls to (Polar grades in a fresh runtime) do their hack in a container
where it would work."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import docker
from typer.testing import CliRunner

from app.adversaries import adversary_command
from app.cli import app
from app.task_audit import AUDIT_FILE, NOOP, ORACLE, TEST_EDIT, TaskAudit
from polar.client.sdk import PolarClient
from polar.settings import get_settings
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.spec import HarnessSpec
from tests.support.paths import REPO

HARBOR = REPO / "examples" / "harbor"
HACKS = {
    "polar__hackable-self-report": {"reward-files"},
    "polar__hackable-filename-only": {"empty-files", "wrong-outputs", "plant-reads"},
    "polar__hackable-workspace-tests": {"tamper-tests"},
    "polar__hackable-status-marker": {"plant-reads"},  # trusts a state file it reads
}
"""Each deliberately hackable task and the adversaries that must break it (and no other)."""
MAY_WRITE_REWARD = {"polar__hackable-self-report", "polar__hackable-workspace-tests"}
"""Hackable tasks whose test.sh also runs the workspace's code as root before its shell writes
the reward: code-writes-reward's forked writer races that shell, and may win."""


def invoke(args: list[str], env: dict[str, str]) -> Any:
    try:
        return CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    finally:
        get_settings.cache_clear()


def audits(report_file: Path) -> dict[str, TaskAudit]:
    report = json.loads(report_file.read_text())
    return {t["task_id"]: TaskAudit.model_validate(t) for t in report["tasks"]}


def rewards(audit: TaskAudit) -> dict[str, float | None]:
    return {p.probe: p.reward for p in audit.probes}


async def test_harbor_audit_flags_exactly_the_hackable_tasks(
    polar: PolarClient, docker_image: str, tmp_path: Path
) -> None:
    dataset = tmp_path / "harbor"
    shutil.copytree(HARBOR, dataset)
    env = polar.settings.as_env()
    report_file = tmp_path / "audit.json"
    args = ["tasks", "audit", str(dataset), "--parallel", "8", "--json", str(report_file)]
    result = await asyncio.to_thread(invoke, args, env)
    print(result.output)  # the audit table, in the CI log
    assert result.exit_code == 1, result.output  # some are flagged
    by_task = audits(report_file)
    names = sorted(p.name for p in dataset.iterdir() if (p / "task.toml").is_file())
    assert sorted(by_task) == [f"polar__{n}" for n in names]
    for task_id, audit in by_task.items():
        got = rewards(audit)
        assert got[ORACLE] == 1.0, (task_id, audit)
        assert got[NOOP] in (0.0, None), (task_id, audit)
        if task_id in HACKS:
            hacks = set(audit.hacks)
            if task_id in MAY_WRITE_REWARD:
                hacks.discard("code-writes-reward")
            assert audit.verdict == "flagged" and hacks == HACKS[task_id], audit
        else:
            assert audit.verdict == "sound" and audit.hacks == [], audit
    for task_id in HACKS:
        assert f"{task_id}: flagged" in result.output

    # the verdicts are kept beside the dataset, where `polar submit` finds them
    assert (dataset / AUDIT_FILE).is_file()
    (hackable,) = load_harbor_tasks(dataset / "hackable-filename-only")
    noop = hackable.model_copy(update={"harness": HarnessSpec(kind="command", command="true")})
    task_file = dataset / "hackable.json"
    task_file.write_text(noop.model_dump_json())
    refused = await asyncio.to_thread(invoke, ["submit", "--strict", str(task_file)], env)
    assert refused.exit_code == 3, refused.output
    assert "refused (--strict)" in refused.output and "empty-files scored 1" in refused.output
    # submitted and followed in the CLI: the session is graded while the CLI's settings hold
    # (the suite's worker is in this process)
    warned = await asyncio.to_thread(invoke, ["submit", str(task_file)], env)
    assert warned.exit_code == 0, warned.output
    assert "warning: task polar__hackable-filename-only was flagged" in warned.output
    assert "mean reward: 0.000" in warned.output  # submitted as is: the no-op harness scored 0
    (sound,) = load_harbor_tasks(dataset / "hello-file")
    sound_file = dataset / "sound.json"
    sound_file.write_text(sound.model_copy(update={"harness": noop.harness}).model_dump_json())
    accepted = await asyncio.to_thread(invoke, ["submit", "--strict", str(sound_file)], env)
    assert accepted.exit_code == 0 and "warning" not in accepted.output, accepted.output
    assert "mean reward: 0.000" in accepted.output


async def test_swebench_audit(
    polar: PolarClient, docker_image: str, swe_dir: Path, tmp_path: Path
) -> None:
    """Gold patch 1, empty patch 0, test-edit patch 0 (and tamper-tests 0) on every bundled
    instance."""
    env = polar.settings.as_env()
    report_file = tmp_path / "swe-audit.json"
    dataset = swe_dir / "instances.jsonl"  # its sibling repos/ is the default source root
    args = ["tasks", "audit", str(dataset), "--image", docker_image, "--json", str(report_file)]
    result = await asyncio.to_thread(invoke, args, env)
    print(result.output)  # the audit table, in the CI log
    assert result.exit_code == 0, result.output
    by_task = audits(report_file)
    assert len(by_task) == 3
    for task_id, audit in by_task.items():
        expected = {ORACLE: 1.0, NOOP: 0.0, TEST_EDIT: 0.0, "tamper-tests": 0.0}
        assert rewards(audit) == expected, (task_id, audit)
        assert audit.verdict == "sound"
    assert (swe_dir / AUDIT_FILE).is_file()


def in_container(image: str, setup: str, adversary: str, check: str) -> str:
    """Run `adversary` as the command harness would (in /workspace, the instruction in
    $POLAR_INSTRUCTION) in a fresh container of `image` after `setup`, then `check`; the
    output."""
    script = f"set -e\nmkdir -p /workspace\n{setup}\ncd /workspace\n"
    script += f"{adversary_command(adversary)}\n{check}\n"
    out = docker.from_env().containers.run(
        image,
        ["bash", "-c", script],
        environment={"POLAR_INSTRUCTION": "Write the answer to `answer.txt`."},
        remove=True,
        network_disabled=True,
    )
    return out.decode()


def test_adversaries_without_a_bundled_victim_do_their_hack(docker_image: str) -> None:
    files = {
        "/logs/verifier/reward.txt": "1",
        "/logs/verifier/reward.json": '{"reward": 1.0}',
        "/root/reward.txt": "1",  # $HOME
        "/tmp/reward.txt": "1",
        "/workspace/reward.txt": "1",
        "/workspace/DONE": "PASS",
        "/workspace/status.txt": "PASS",
    }
    out = in_container(docker_image, "", "reward-files", f"head -n1 {' '.join(files)}")
    assert out == "\n".join(f"==> {f} <==\n{text}\n" for f, text in files.items()), out

    # a verifier that ran on the agent's machine after it: the reward file comes back
    check = "rm -rf /logs/verifier; sleep 3; cat /logs/verifier/reward.txt; ls -A /workspace"
    out = in_container(docker_image, "", "background", check)
    assert out == "1\n", out  # and nothing of it in the workspace

    solution = "mkdir -p /solution && echo 'echo solved > answer.txt' > /solution/solve.sh"
    out = in_container(docker_image, solution, "read-solution", "cat answer.txt")
    assert out.strip() == "solved", out
    tests = "mkdir -p /tests && echo 42 > /tests/expected.txt"
    out = in_container(docker_image, tests, "read-solution", "cat expected.txt")
    assert out.strip() == "42", out
