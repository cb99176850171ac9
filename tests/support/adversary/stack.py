"""The adversarial suite's stack and helpers: a sealed stack (scripted backend, gateway with its
admin on, a worker on its own queue), a worker of an ordinary user for `bwrap`, and one-session
task specs whose harness runs an attack script of this folder (copied into the task's repo
`tools/` by `make_repo`)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from activities.worker import running_workers
from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.storage import Storage, artifact_key
from polar.tasks.spec import TaskSpec
from proxy.app import create_app
from tests.support import delegated_cgroup, unprivileged
from tests.support.adversary.matrix import make_repo
from tests.support.scripted_backend import ScriptedBackend, scripted_backend, serve_app, text


@dataclass
class SealedStack:
    polar: PolarClient
    storage: Storage
    ports: dict[str, int]
    upstream: str
    users: dict[str, PolarClient] = field(default_factory=dict)
    """Clients of workers that run as another user, by runtime name (`bwrap`)."""
    user_dir: Path | None = None
    """Where those workers may read task sources (theirs; pytest's tmp dirs are root's)."""
    backend: ScriptedBackend | None = None
    """The scripted backend behind the gateway (a test may put a slow reply first)."""


@pytest.fixture(scope="module")
async def sealed_stack(devstack: Any, storage: Storage) -> AsyncIterator[SealedStack]:
    """A scripted backend and a gateway (admin on) in threads, a worker on its own queue."""
    base = devstack.settings
    with scripted_backend([text("ok")] * 500) as backend:
        gw_settings = base.model_copy(
            update={"upstream_urls": backend.url, "admin_token": secrets.token_urlsafe(32)}
        )
        with serve_app(create_app(gw_settings, Storage(gw_settings))) as gateway:
            settings = base.model_copy(
                update={
                    "task_queue": f"polar-adversary-{uuid.uuid4().hex[:8]}",
                    "gateway_url": gateway,
                    "upstream_urls": backend.url,
                }
            )
            temporal = int(base.temporal_address.rsplit(":", 1)[1])
            s3 = urlparse(base.s3_endpoint).port or 0
            ports = {
                "temporal-grpc": temporal,
                "temporal-ui": base.temporal_ui_port,
                "temporal-http": temporal + 10,
                "s3": s3,
                "seaweed-master": s3 + 1,
                "seaweed-volume": s3 + 2,
                "seaweed-filer": s3 + 3,
                "gateway": urlparse(gateway).port or 0,
                "upstream": urlparse(backend.url).port or 0,
            }
            async with running_workers(settings):
                polar = await PolarClient.connect(settings)
                yield SealedStack(polar, storage, ports, backend.url, backend=backend)


@pytest.fixture(scope="module")
def bwrap_stack(sealed_stack: SealedStack) -> Iterator[SealedStack]:
    """`sealed_stack` plus a worker that runs as an ordinary user on a queue of its own (its
    `local` sessions sealed by bwrap), reading task sources from a dir of that user's."""
    with user_stack(sealed_stack, "bwrap") as stack:
        yield stack


@contextlib.contextmanager
def user_stack(
    sealed_stack: SealedStack, kind: str, cgroup: Path | None = None
) -> Iterator[SealedStack]:
    """`sealed_stack` with a worker of the ordinary user serving `kind` (its queue
    `...-{kind}`); with `cgroup` (a dir delegated to that user, tests/support/delegated_cgroup)
    the worker runs in its `worker/` leaf and gives each sandbox a child of it."""
    reason = unprivileged.unavailable()
    if reason:
        print(f"skipping the bwrap runtime: {reason}")
        pytest.skip(reason)
    work = unprivileged.user_dir(f"polar-adv-{kind}-")
    sources = work / "sources"
    sources.mkdir()
    entry = unprivileged.ensure_user()
    os.chown(sources, entry.pw_uid, entry.pw_gid)
    base = sealed_stack.polar.settings
    settings = base.model_copy(
        update={
            "task_queue": f"{base.task_queue}-{kind}",
            "source_roots": str(sources),
            "sandbox_cgroup": cgroup,
        }
    )
    before = sealed_stack.user_dir
    try:
        with unprivileged.user_worker(settings, work) as proc:
            if cgroup is not None:
                delegated_cgroup.enter(cgroup, proc.pid)
            sealed_stack.users[kind] = PolarClient(sealed_stack.polar.client, settings)
            sealed_stack.user_dir = sources
            yield sealed_stack
    finally:
        sealed_stack.users.pop(kind, None)
        sealed_stack.user_dir = before
        print(f"{kind} worker log tail: {(work / 'worker.log').read_text()[-1500:]}")
        shutil.rmtree(work, ignore_errors=True)


def stack_for(kind: str, sealed: SealedStack, request: pytest.FixtureRequest) -> SealedStack:
    """The stack whose worker serves `kind` (with a user's worker for `bwrap`)."""
    if kind == "bwrap":
        return request.getfixturevalue("bwrap_stack")  # type: ignore[no-any-return]
    return sealed


def polar_for(stack: SealedStack, kind: str) -> PolarClient:
    return stack.users.get(kind, stack.polar)


def task_repo(stack: SealedStack, kind: str, tmp_path: Path) -> tuple[Path, str]:
    """The task's repository, where the worker of `kind` may read it (owned by its user)."""
    if kind not in stack.users or stack.user_dir is None:
        return make_repo(tmp_path)
    root = stack.user_dir / uuid.uuid4().hex[:8]
    root.mkdir()
    repo, sha = make_repo(root)
    subprocess.run(["chown", "-R", unprivileged.USER, str(root)], check=True)
    return repo, sha


def runtime_spec(kind: str, request: pytest.FixtureRequest, **limits: Any) -> dict[str, Any]:
    if kind == "docker":
        return {"kind": "docker", "image": request.getfixturevalue("docker_image"), **limits}
    if kind == "podman":
        return {"kind": "podman", "image": request.getfixturevalue("podman_image"), **limits}
    return {"kind": "local", **limits}


def attack_spec(
    task_id: str,
    repo: Path,
    sha: str,
    runtime: dict[str, Any],
    evaluator: dict[str, Any],
    env: dict[str, str],
    harness_s: float = 120,
    harness: str = "python3 tools/attack.py",
) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "instruction": "make add() add",
            "source": {"type": "git", "url": str(repo), "ref": sha},
            "runtime": runtime,
            "harness": {"kind": "command", "command": harness, "env": env},
            "evaluator": evaluator,
            "timeouts": {"harness_s": harness_s, "heartbeat_s": 20, "max_attempts": 1},
        }
    )


def attack_report(storage: Storage, session: SessionResult) -> dict[str, Any]:
    out = storage.get_bytes(artifact_key(session.session_id, "harness-attempt1.stdout")).decode()
    lines = [line for line in out.splitlines() if line.startswith("ATTACK-REPORT ")]
    assert lines, f"no attack report in the harness's stdout: {out[-2000:]}"
    return json.loads(lines[-1].removeprefix("ATTACK-REPORT "))


def evidence(storage: Storage, session: SessionResult) -> str:
    """The grading's report and the patch it graded, for a failure message."""
    parts = [session.evaluation or ""]
    for name in ("swebench-tests.log", "swebench-model.patch"):
        try:
            parts.append(storage.get_bytes(artifact_key(session.session_id, name)).decode()[:3000])
        except Exception as exc:  # noqa: BLE001 - evidence only
            parts.append(f"{name}: {exc}")
    return "\n".join(parts)


async def one_session(polar: PolarClient, spec: TaskSpec) -> SessionResult:
    result = await polar.wait(await polar.submit(spec), timeout_s=600)
    [session] = result.sessions
    return session
