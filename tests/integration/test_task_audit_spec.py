"""`polar tasks audit TASK.json` on the dev stack (local runtime): the README's demo task,
graded by `test -s answer.txt`, is flagged by the adversary that writes a plausible but
wrong answer.txt, and its oracle (given with --oracle) scores 1."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.adversaries import ADVERSARIES
from app.cli import app
from app.task_audit import AUDIT_FILE, NOOP, ORACLE, TaskAudit
from polar.client.sdk import PolarClient
from polar.settings import get_settings
from tests.support.paths import REPO


def invoke(args: list[str], env: dict[str, str]) -> Any:
    try:
        return CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    finally:
        get_settings.cache_clear()


def demo_task_file(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """The README's demo task on a copy of its repo under `tmp_path`: its JSON and its file."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "examples" / "demo" / "repo", repo)
    spec = json.loads((REPO / "examples" / "demo" / "task.json").read_text())
    spec["source"]["path"] = str(repo)
    task_file = tmp_path / "demo.json"
    task_file.write_text(json.dumps(spec))
    return spec, task_file


async def test_demo_task_is_flagged_by_a_wrong_answer(polar: PolarClient, tmp_path: Path) -> None:
    spec, task_file = demo_task_file(tmp_path)
    report_file = tmp_path / "audit.json"
    env = polar.settings.as_env()
    oracle = (
        "printf 'rollouts run\\nmany agents try at once\\nrewards come back home\\n' > answer.txt"
    )
    args = ["tasks", "audit", str(task_file), "--oracle", oracle, "--json", str(report_file)]
    result = await asyncio.to_thread(invoke, args, env)
    assert result.exit_code == 1, result.output
    (audit,) = (TaskAudit.model_validate(t) for t in json.loads(report_file.read_text())["tasks"])
    rewards = {p.probe: p.reward for p in audit.probes}
    assert rewards == {
        ORACLE: 1.0,
        NOOP: 0.0,
        **{a: 0.0 for a in ADVERSARIES},
        "wrong-outputs": 1.0,
    }
    assert audit.verdict == "flagged" and audit.hacks == ["wrong-outputs"]
    assert "demo-haiku: flagged: wrong-outputs scored 1" in result.output
    # progress as each session ends, then the task's wall time beside its session time
    probes = len(audit.probes)
    assert f"auditing 1 task(s): {probes} sessions" in result.output
    assert f"[{probes}/{probes}] demo-haiku:" in result.output
    assert "demo-haiku: oracle scored 1 (" in result.output
    assert audit.wall_seconds is not None and 0 < audit.wall_seconds < audit.seconds
    assert f"demo-haiku: flagged (wall {audit.wall_seconds:g} s," in result.output
    assert (tmp_path / AUDIT_FILE).is_file()
    refused = await asyncio.to_thread(invoke, ["submit", "--strict", str(task_file)], env)
    assert refused.exit_code == 3 and "refused (--strict)" in refused.output, refused.output

    bad = tmp_path / "bad.json"
    bad.write_text('{"task_id": "x"}')
    invalid = await asyncio.to_thread(invoke, ["tasks", "audit", str(bad)], env)
    assert invalid.exit_code == 2 and "invalid TaskSpec" in invalid.output, invalid.output


async def test_an_oracle_that_fails_is_reported_with_its_stderr(
    polar: PolarClient, tmp_path: Path
) -> None:
    """An oracle that scores 0 (its tool missing) and a task whose sessions end without a
    reward (its source outside the source roots): both reported, with the outcome class and
    the first lines of the oracle's stderr; nothing crashes."""
    spec, task_file = demo_task_file(tmp_path)
    env = polar.settings.as_env()
    oracle = "echo 'uvx: command not found' >&2; exit 127"
    report_file = tmp_path / "audit.json"
    args = ["tasks", "audit", str(task_file), "--oracle", oracle, "--json", str(report_file)]
    result = await asyncio.to_thread(invoke, args, env)
    assert result.exit_code == 1, result.output
    (audit,) = (TaskAudit.model_validate(t) for t in json.loads(report_file.read_text())["tasks"])
    (probe,) = (p for p in audit.probes if p.probe == ORACLE)
    assert probe.reward == 0.0 and probe.stderr == ["uvx: command not found"], probe
    assert "oracle scored 0: stderr: uvx: command not found" in result.output, result.output

    outside = tmp_path / "outside.json"
    spec["source"]["path"] = "/var/tmp/polar-audit-nowhere"
    outside.write_text(json.dumps(spec))
    args = ["tasks", "audit", str(outside), "--oracle", "true", "--json", str(report_file)]
    result = await asyncio.to_thread(invoke, args, env)
    assert result.exit_code == 1, result.output
    (audit,) = (TaskAudit.model_validate(t) for t in json.loads(report_file.read_text())["tasks"])
    assert audit.verdict == "broken", audit
    (probe,) = (p for p in audit.probes if p.probe == ORACLE)
    assert probe.reward is None and probe.outcome and probe.outcome.startswith("task_error")
    assert f"oracle got no reward ({probe.outcome})" in result.output, result.output
