"""Shared builders and scenarios of the runtime tests (tests/system/test_runtime_contract.py
and what is particular to docker and podman in their own files)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.tasks.spec import DirSource, EvaluatorSpec, RuntimeSpec, TaskSpec
from tests.support.eval_runtimes import grade, prepare_session, run_harness


@contextlib.contextmanager
def runtime_root(prefix: str) -> Iterator[Path]:
    """A runtimes root every sandbox user reaches (rootless podman's runner, the local
    runtime's harness user: pytest's 0700 tmp dirs forbid it), removed after."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    try:
        yield root / "runtimes"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def docker_runtime(root: Path) -> Iterator[Any]:
    """A DockerRuntime under `root`; its containers removed after."""
    import docker

    from activities.runtimes.kinds.docker import LABEL, DockerRuntime

    rt = DockerRuntime(root)
    yield rt
    client = docker.from_env()
    prefix = rt.container_name("")
    found = client.containers.list(
        all=True, filters={"label": LABEL, "name": prefix}, ignore_removed=True
    )
    for container in found:  # other tests' containers come and go meanwhile
        if (container.name or "").startswith(prefix):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def podman_modes() -> list[str]:
    """The podman modes the tests run: rootless, and root when the tests run as root."""
    import os

    return ["rootless", "root"] if os.geteuid() == 0 else ["rootless"]


def podman_runtime(root: Path, mode: str) -> Iterator[Any]:
    """A PodmanRuntime in `mode` under `root`, its containers removed after. A rootless run on
    a host that cannot support it (`rootless_support`) is skipped with that reason, unless
    rootless is what `auto` picks here: the default mode is never skipped."""
    import pytest

    from activities.runtimes.kinds.podman import PodmanRuntime, resolve_mode, rootless_support

    if mode == "rootless" and resolve_mode()[0] != "rootless":
        supported, why = rootless_support()
        if not supported:
            pytest.skip(f"rootless podman is not supported here: {why}")
    rt = PodmanRuntime(root, mode=mode)
    print(f"podman mode: {rt.mode}; auto here: {resolve_mode('auto')}")
    yield rt
    listed = rt.podman.run("ps", "--all", "--format", "{{.Names}}", check=False)
    for name in listed.stdout.decode().split():
        if name.startswith(rt.container_name("")):
            rt.podman.run("rm", "--force", "--ignore", "--time", "0", "--depend", name, check=False)


def container_attrs(runtime: Any, session_id: str) -> dict[str, Any] | None:
    """The engine's inspect record of a session's container (docker and podman share its
    shape: HostConfig, Mounts, Config), or None when there is no such container."""
    name = runtime.container_name(session_id)
    if runtime.kind == "docker":
        import docker
        from docker.errors import NotFound

        try:
            attrs: dict[str, Any] = docker.from_env().containers.get(name).attrs
        except NotFound:
            return None
        return attrs
    inspect = runtime.podman.run("container", "inspect", name, check=False)
    if inspect.returncode != 0:
        return None
    [attrs] = json.loads(inspect.stdout)
    return attrs


def small_repo(tmp_path: Path) -> Path:
    """A tiny source tree: hello.txt and a package."""
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "hello.txt").write_text("hello\n")
    (repo / "pkg").mkdir(exist_ok=True)
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    return repo


async def fixed_and_wrong_sessions(
    polar: PolarClient, repo: Path, runtime: dict[str, Any], *, in_container: str, label: str
) -> tuple[SessionResult, SessionResult]:
    """One session whose harness fixes hello.txt (after checking `in_container`), one that
    makes a wrong change, both graded by a command evaluator in the runtime: rewards 1 and 0."""
    evaluator = "grep -q fixed hello.txt"
    # the reward_command, told where the reward goes (the command is not); it always writes
    # one (a reward_command that writes none is an evaluator error)
    reward = (
        '[ "$POLAR_COMMAND_EXIT_CODE" = 0 ] && r=1.0 || r=0.0; '
        f'echo "{{\\"reward\\": $r, \\"detail\\": \\"graded in {label}\\"}}" '
        '> "$POLAR_REWARD_FILE"'
    )

    def spec(task_id: str, harness: str) -> TaskSpec:
        return TaskSpec.model_validate(
            {
                "task_id": task_id,
                "num_sessions": 1,
                "source": {"type": "dir", "path": str(repo)},
                "runtime": runtime,
                "harness": {"kind": "command", "command": harness},
                "evaluator": {"kind": "command", "command": evaluator, "reward_command": reward},
            }
        )

    fix = f'{in_container} && test "$PWD" = /workspace && test -n "$OPENAI_API_KEY"'
    fix += " && echo fixed >> hello.txt"
    started = time.monotonic()
    good, bad = await asyncio.gather(
        polar.wait(await polar.submit(spec(f"{label}-e2e-fixed", fix)), timeout_s=180),
        polar.wait(await polar.submit(spec(f"{label}-e2e-wrong", "echo nope >> hello.txt")), 180),
    )
    [fixed] = good.sessions
    [wrong] = bad.sessions
    assert fixed.status == SessionStatus.COMPLETED, fixed
    assert fixed.reward == 1.0 and f"graded in {label}" in (fixed.evaluation or "")
    assert wrong.status == SessionStatus.COMPLETED and wrong.reward == 0.0
    assert (repo / "hello.txt").read_text() == "hello\n"  # sessions worked on copies
    print(
        f"two {label} sessions end to end: {time.monotonic() - started:.1f}s; "
        f"stages {fixed.stage_seconds}"
    )
    return fixed, wrong


def skip_without_disk_watchdog(kind: str) -> None:
    """The disk limit past one file is a watchdog over the container's overlay upper dir; an
    engine with another storage driver (vfs, a remote engine) has none: skip, saying so."""
    import subprocess

    import pytest

    if kind == "docker":
        import docker

        driver = docker.from_env().info().get("Driver", "")
    else:
        fmt = "{{.Store.GraphDriverName}}"
        proc = subprocess.run(["podman", "info", "--format", fmt], capture_output=True, text=True)
        driver = proc.stdout.strip()
    if driver not in ("overlay2", "overlay"):
        pytest.skip(f"{kind} storage driver {driver!r} has no overlay upper dir to watch")


async def graded_in_a_moved_workspace(runtime: Any, kind: str, tmp_path: Path) -> None:
    """A RuntimeSpec `workdir` other than /workspace: the source, a relative upload and the
    harness's cwd are there, and the command evaluator's fresh runtime grades the session's
    changes there (a fix rewards 1, nothing 0)."""
    extra = tmp_path / "note.txt"
    extra.write_text("uploaded\n")
    spec = RuntimeSpec.model_validate(
        {
            "kind": kind,
            "workdir": "/srv/app",
            "prepare": [{"type": "upload", "src": str(extra), "dest": "docs/note.txt"}],
        }
    )
    source = DirSource(path=str(small_repo(tmp_path)))
    evaluator = EvaluatorSpec(
        kind="command",
        command='test "$PWD" = /srv/app && grep -q fixed hello.txt && test -f docs/note.txt',
    )
    for sid, script, reward in (
        ("moved-fix", 'test "$PWD" = /srv/app && cat docs/note.txt && echo fixed >> hello.txt', 1),
        ("moved-noop", "true", 0),
    ):
        handle = await prepare_session(runtime, spec, source, sid)
        try:
            assert handle.workdir == "/srv/app"
            await run_harness(runtime, handle, script)
            evaluation = await grade(runtime, spec, source, handle, evaluator)
            assert evaluation.reward == reward, (sid, evaluation.detail)
            if reward:
                assert evaluation.report.patch_files == ["hello.txt"], evaluation.report
        finally:
            await runtime.teardown(handle)


def session_containers(runtime: Any, session_id: str) -> list[str]:
    """The containers of `session_id` still on `runtime`'s engine (sidecars and the podman
    namespace's holder included); `runtime`: a runtime, or a kind (the worker's)."""
    import docker

    from activities.runtimes.kinds.docker import LABEL

    if runtime == "docker" or getattr(runtime, "kind", None) == "docker":
        found = docker.from_env().containers.list(
            all=True, filters={"label": f"{LABEL}={session_id}"}
        )
        return [c.name or "" for c in found]
    if runtime == "podman":
        from activities.runtimes.kinds.podman import PodmanRuntime

        runtime = PodmanRuntime(Path("/nonexistent"))  # the worker's mode: auto
    listed = runtime.podman.run(
        "ps", "--all", "--format", "{{.Names}}", "--filter", f"label={LABEL}={session_id}"
    )
    return [str(name) for name in listed.stdout.decode().split()]
