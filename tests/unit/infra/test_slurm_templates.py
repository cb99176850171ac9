"""infra/deploy/slurm: every template parses (`bash -n`), sbatch sees all its `#SBATCH`
directives, every setting it exports or the example env file sets is a field of
polar/settings/, and common.sh's helpers behave.

There is no renderer: the templates are plain sbatch scripts that read the site's
settings from `POLAR_SLURM_ENV`. The real cluster run is tests/system/test_slurm_cluster.py;
this checks, without Slurm, what a typo would break on every cluster.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from polar.settings import Settings
from tests.support.paths import REPO

SLURM = REPO / "infra" / "deploy" / "slurm"
SCRIPTS = sorted([*SLURM.glob("*.sbatch"), *SLURM.glob("*.sh")])
TEMPLATES = sorted(SLURM.glob("*.sbatch"))
BASH = shutil.which("bash") or "/bin/bash"
TEMPLATE_OWN = {
    # the templates' own knobs, not Polar settings
    "POLAR_SLURM_ENV",
    "POLAR_SLURM_DIR",
    "POLAR_SLURM_SHARED",
    "POLAR_CMD",
    "POLAR_MODEL",
    "POLAR_VLLM_PORT",
    "POLAR_VLLM_CMD",
    "POLAR_VLLM_ARGS",
    "POLAR_GATEWAY_ADVERTISE",
    "POLAR_HEAD_ADDRESS",
    "POLAR_STATE_DIR",
    "POLAR_NODE_DATA_DIR",
    "POLAR_QUEUES",
}
SETTINGS = {f"POLAR_{name.upper()}" for name in Settings.model_fields}


def test_the_gateway_worker_inference_and_single_allocation_templates_are_there() -> None:
    names = {p.name for p in TEMPLATES}
    assert names >= {
        "gateway.sbatch",
        "worker.sbatch",
        "inference.sbatch",
        "single-allocation.sbatch",
    }, names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_parses(script: Path) -> None:
    proc = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", TEMPLATES, ids=lambda p: p.name)
def test_sbatch_reads_every_directive(script: Path) -> None:
    """sbatch stops reading `#SBATCH` lines at the first command: a directive after one is a
    silent no-op (a worker without --signal never gets its grace period)."""
    lines = script.read_text().splitlines()
    assert lines[0].startswith("#!"), f"{script.name}: no shebang"
    first_command = next(
        i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")
    )
    late = [line for line in lines[first_command:] if line.startswith("#SBATCH")]
    assert not late, f"{script.name}: directives after the first command: {late}"
    assert any(line.startswith("#SBATCH --job-name=") for line in lines[:first_command])


def test_the_worker_gets_its_grace_period_before_the_time_limit() -> None:
    text = (SLURM / "worker.sbatch").read_text()
    signal = re.search(r"^#SBATCH --signal=B:TERM@(\d+)$", text, re.M)
    grace = re.search(r"POLAR_SHUTDOWN_GRACE_S:-(\d+)", text)
    assert signal and grace, "worker.sbatch: no --signal=B:TERM@N or default grace"
    assert int(grace.group(1)) < int(signal.group(1)), "the grace outlasts Slurm's warning"


@pytest.mark.parametrize("script", [*TEMPLATES, SLURM / "common.sh"], ids=lambda p: p.name)
def test_what_a_template_exports_is_a_polar_setting(script: Path) -> None:
    exported: set[str] = set()
    for line in script.read_text().splitlines():
        if line.lstrip().startswith("export "):
            exported |= set(re.findall(r"\b(POLAR_[A-Z0-9_]+)=", line))
            exported |= set(re.findall(r"^\s*export\s+(POLAR_[A-Z0-9_]+)\s*$", line))
    used = set(re.findall(r"\bPOLAR_[A-Z0-9_]+", script.read_text()))
    unknown = (exported | used) - SETTINGS - TEMPLATE_OWN
    assert not unknown, f"{script.name}: neither a setting nor the templates' own: {unknown}"


def test_the_example_env_file_sets_only_settings() -> None:
    keys = {
        line.split("=", 1)[0]
        for line in (SLURM / "polar.env.example").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert keys >= {"POLAR_TEMPORAL_ADDRESS", "POLAR_S3_ENDPOINT", "POLAR_SESSION_SECRET"}
    assert not keys - SETTINGS - TEMPLATE_OWN, keys - SETTINGS - TEMPLATE_OWN


def _common(script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, "-c", f'source "{SLURM}/common.sh"; {script}'],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_run_until_term_hands_sigterm_on_and_waits_for_the_command(tmp_path: Path) -> None:
    """The batch shell gets Slurm's SIGTERM; the worker under it must get it and be waited
    for (its grace period), and its exit status is the script's."""
    mark = tmp_path / "mark"
    worker = tmp_path / "worker.sh"
    worker.write_text(
        f"sleep 30 & s=$!\ntrap 'kill $s; sleep 1; echo graceful > {mark}; exit 7' TERM\nwait\n"
    )
    proc = _common(f"run_until_term bash {worker} & sleep 1; kill -TERM $!; wait $!; echo rc=$?")
    assert proc.stdout.strip().endswith("rc=7"), (proc.stdout, proc.stderr)
    assert mark.read_text().strip() == "graceful"


def test_wait_for_file_gives_up_with_a_message(tmp_path: Path) -> None:
    proc = _common(f"wait_for_file {tmp_path}/nope 1")
    assert proc.returncode == 1 and "did not appear" in proc.stderr
    (tmp_path / "there").write_text("http://gw\n")
    assert _common(f"wait_for_file {tmp_path}/there 1").returncode == 0
