"""`polar tasks load DIR` on a dataset with tasks Polar refuses (issue 35, items 4 and 6):
every refused task is reported with every field it refuses and the rest are loaded
(`--strict` stops); a task outside the source roots is refused naming the setting; a task
with both a docker_image and a Dockerfile is warned about; the harness flags override the
agent of every task."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from tests.support.paths import REPO

EXAMPLES = REPO / "examples" / "harbor"


def _dataset(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    for name in ("hello-file", "csv-sum"):
        shutil.copytree(EXAMPLES / name, data / name)
    bad = Path(shutil.copytree(EXAMPLES / "hello-file", data / "two-refusals"))
    toml = bad / "task.toml"
    text = toml.read_text().replace('name = "polar/hello-file"', 'name = "polar/two-refusals"')
    tpu = '[environment]\ntpu = { type = "v6e", topology = "2x2" }\n'
    toml.write_text(text.replace("[environment]\n", tpu, 1) + "\nsurprise = 1\n")
    return data


def load(args: list[str], roots: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tasks", "load", *args], env={"POLAR_SOURCE_ROOTS": roots})
    return result.exit_code, result.output


def test_every_refused_task_and_field_is_reported_and_the_rest_load(tmp_path: Path) -> None:
    data, out = _dataset(tmp_path), tmp_path / "out"
    code, output = load([str(data), "--no-build", "--out", str(out)], str(tmp_path))
    assert code == 0, output
    refusal = "refused: harbor task polar/two-refusals: environment.surprise: 2 fields refused"
    assert refusal in output
    assert "environment.surprise: not a field of Harbor 0.25's task.toml" in output
    assert "environment.tpu: not supported" in output
    assert sorted(p.name for p in out.iterdir()) == [
        "polar__csv-sum.json",
        "polar__hello-file.json",
    ]
    code, output = load([str(data), "--no-build", "--strict", "--out", str(out)], str(tmp_path))
    assert code == 2 and "1 task(s) refused (--strict)" in output, output


def test_a_dataset_outside_the_source_roots_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    data = _dataset(tmp_path)
    code, output = load([str(data / "hello-file"), "--no-build"], str(REPO))
    assert code == 2, output
    assert "outside the source roots" in output and "POLAR_SOURCE_ROOTS" in output


def test_a_docker_image_beside_a_dockerfile_is_warned_about(tmp_path: Path) -> None:
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "both"))
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[environment]\n", '[environment]\ndocker_image = "polar/runtime:py311"\n'
        )
    )
    code, output = load([str(task), "--no-build", "--out", str(tmp_path / "o")], str(tmp_path))
    assert code == 0, output
    assert "docker_image (polar/runtime:py311) and environment/Dockerfile" in output
    assert "the Dockerfile is not built" in output


def test_the_harness_flags_override_every_tasks_agent(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    shutil.copytree(EXAMPLES / "hello-file", data / "hello-file")
    args = [str(data), "--no-build", "--out", str(out), "--harness", "command"]
    code, output = load(
        [*args, "--command", "bash solve.sh", "--model", "m", "--harness-env", "A=1"], str(tmp_path)
    )
    assert code == 0, output
    harness = json.loads((out / "polar__hello-file.json").read_text())["harness"]
    assert (harness["kind"], harness["command"], harness["model"]) == (
        "command",
        "bash solve.sh",
        "m",
    )
    assert harness["env"]["A"] == "1"
    code, output = load(args, str(tmp_path))  # a command harness needs its command
    assert code == 2 and "command" in output, output
    code, output = load([*args, "--command", "x", "--harness-env", "novalue"], str(tmp_path))
    assert code == 2 and "--harness-env: KEY=VALUE" in output, output


def test_a_build_without_the_docker_package_names_the_server_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "hello"))
    monkeypatch.setitem(sys.modules, "docker", None)  # the client install: no docker package
    code, output = load([str(task), "--out", str(tmp_path / "o")], str(tmp_path))
    assert code == 2, output
    assert "needs polar-rollout[server] (docker not installed)" in output
    assert "--no-build" in output
