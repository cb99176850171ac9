"""`polar tasks audit` on the real stack: the bundled Harbor dataset (examples/harbor), where
exactly the deliberately hackable tasks are flagged, each by the hack it was made for, and
the bundled SWE-bench instances (gold patch 1, empty patch 0, test-edit patch 0); `polar
submit` of a flagged task warns, and refuses it with --strict."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from polar.app.cli import app
from polar.client.sdk import PolarClient
from polar.settings import get_settings
from polar.tasks.audit import AUDIT_FILE, NOOP, ORACLE, TaskAudit
from tests.support.paths import REPO
from tests.support.unprivileged import settings_env

HARBOR = REPO / "examples" / "harbor"
HACKS = {
    "polar__hackable-self-report": {"reward-files"},
    "polar__hackable-filename-only": {"empty-files", "wrong-outputs"},
    "polar__hackable-workspace-tests": {"tamper-tests"},
}
"""Each deliberately hackable task and the adversaries that must break it (and no other)."""


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


async def test_swebench_audit(
    polar: PolarClient, docker_image: str, swe_dir: Path, tmp_path: Path
) -> None:
    """Gold patch 1, empty patch 0, test-edit patch 0 on every bundled instance."""
    env = settings_env(polar.settings)
    report_file = tmp_path / "swe-audit.json"
    dataset = swe_dir / "instances.jsonl"  # its sibling repos/ is the default source root
    args = ["tasks", "audit", str(dataset), "--image", docker_image, "--json", str(report_file)]
    result = await asyncio.to_thread(invoke, args, env)
    print(result.output)  # the audit table, in the CI log
    assert result.exit_code == 0, result.output
    by_task = audits(report_file)
    assert len(by_task) == 3
    for task_id, audit in by_task.items():
        assert rewards(audit) == {ORACLE: 1.0, NOOP: 0.0, "tamper-tests": 0.0}, (task_id, audit)
        assert audit.verdict == "sound"
    assert (swe_dir / AUDIT_FILE).is_file()
