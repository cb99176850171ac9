"""`[environment.healthcheck]` as the prepare command that runs it as Harbor does
(polar/tasks/harbor_healthcheck.py): the loop run for real with bash, on a check that passes
at its third try, one that never passes, and a start period whose failures do not count.
The loader puts it last in the runtime's prepare steps; tests/system/test_harbor_grading.py
grades a bundled task that has one (csv-sum)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_healthcheck import healthcheck_action
from polar.tasks.harbor_toml import HarborTask, HarborTaskError
from polar.tasks.sources import CommandAction
from tests.support.paths import REPO

TASK = HarborTask(name="t", dir=Path("/nonexistent"), config={}, instruction="")


def run(action: CommandAction, cwd: Path) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-c", action.command], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    return proc.returncode, proc.stderr, time.monotonic() - started


def test_a_check_that_passes_at_its_third_try_lets_the_session_start(tmp_path: Path) -> None:
    check = "echo x >> tries; [ $(wc -l < tries) -ge 3 ]"
    action = healthcheck_action(TASK, {"command": check, "interval_sec": 0.1, "retries": 3})
    code, _, _ = run(action, tmp_path)
    assert code == 0 and (tmp_path / "tries").read_text().count("x") == 3


def test_a_check_that_never_passes_fails_after_its_retries(tmp_path: Path) -> None:
    action = healthcheck_action(TASK, {"command": "echo x >> tries; false", "interval_sec": 0.1})
    code, err, _ = run(action, tmp_path)
    assert code == 1 and "healthcheck failed after 3 consecutive retries" in err
    assert (tmp_path / "tries").read_text().count("x") == 3  # Harbor's default retries


def test_failures_in_the_start_period_do_not_count(tmp_path: Path) -> None:
    config = {
        "command": "echo x >> tries; false",
        "start_period_sec": 1.5,
        "start_interval_sec": 0.2,
        "interval_sec": 0.1,
        "retries": 2,
    }
    code, _, seconds = run(healthcheck_action(TASK, config), tmp_path)
    tries = (tmp_path / "tries").read_text().count("x")
    assert code == 1 and seconds >= 1.0 and tries > 2 + 3  # the start period's, then 2


def test_a_try_is_cut_at_its_timeout(tmp_path: Path) -> None:
    if shutil.which("timeout") is None:
        pytest.skip("no timeout(1) on this host")
    action = healthcheck_action(
        TASK, {"command": "sleep 30", "timeout_sec": 0.3, "interval_sec": 0.1, "retries": 1}
    )
    code, _, seconds = run(action, tmp_path)
    assert code == 1 and seconds < 10
    assert action.timeout_s > 0.3 + 0.1  # the prepare step's own budget covers the loop


def test_the_loader_runs_it_last_before_the_agent(tmp_path: Path) -> None:
    task = Path(shutil.copytree(REPO / "examples" / "harbor" / "hello-file", tmp_path / "t"))
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + '\n[environment.healthcheck]\ncommand = "test -d ."\n')
    (spec,) = load_harbor_tasks(task)
    (action,) = spec.runtime.prepare
    assert isinstance(action, CommandAction) and "'test -d .'" in action.command
    with pytest.raises(HarborTaskError, match=r"healthcheck\.timeout_sec"):
        healthcheck_action(TASK, {"command": "true", "timeout_sec": "soon"})
