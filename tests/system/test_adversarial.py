"""The sealed session, attacked: an adversarial harness against real sessions on the real stack.

The harness (tests/support/adversary/attack.py) tries every attack of issue 9
from inside a session, on Docker, podman and the `local` runtime: it opens
every port the stack listens on (Temporal's gRPC and HTTP APIs, the Web UI,
S3, the SeaweedFS master, volume and filer, the gateway, the inference
backend), calls the backend directly, calls the gateway through its channel
with another session's valid key and on its admin, metrics and docs routes,
plants reward files from a detached process that outlives it, edits the
graded test, adds a conftest.py that passes every test, makes the code under
test print fake `PASSED` lines and exit 0, and leaves a process that puts the
real fix in after it exits. Every attacking session must end with the honest
reward (its code is wrong: 0), the honest twin with 1; a disk-filling and a
fork-bombing harness end that one session (`harness_failed` / `timeout`) with
their logs kept.
"""

from __future__ import annotations

import asyncio
import json
import os
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
from polar.records import SessionStatus
from polar.session_keys import SessionIdentity, mint_session_key
from polar.storage import Storage, artifact_key
from polar.tasks.spec import TaskSpec
from proxy.app import create_app
from tests.support import unprivileged
from tests.support.adversary.matrix import make_repo, swebench_evaluator
from tests.support.container_sessions import skip_without_disk_watchdog
from tests.support.scripted_backend import scripted_backend, serve_app, text

pytestmark = pytest.mark.slow

# the command evaluator's grader reads pytest's junit XML, not its exit code (which the code
# under test can force) nor its log
JUNIT_GRADER = (
    'j="${TMPDIR:-/tmp}/junit.xml"; '
    'python3 -m pytest -q -p no:cacheprovider --junitxml="$j" tests/test_calc.py; '
    "J=$j python3 -c \"import os, sys, xml.etree.ElementTree as E; r = E.parse(os.environ['J'])"
    ".getroot(); s = r if r.tag == 'testsuite' else r[0]; "
    "sys.exit(int(s.get('failures')) + int(s.get('errors')) or int(s.get('tests')) < 2)\""
)


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


@pytest.fixture(scope="module")
async def sealed_stack(devstack: Any, storage: Storage) -> AsyncIterator[SealedStack]:
    """A scripted backend and a gateway (admin on) in threads, a worker on its own queue."""
    base = devstack.settings
    with scripted_backend([text("ok")] * 500) as backend:
        gw_settings = base.model_copy(
            update={"upstream_urls": backend.url, "admin_token": "adversary-test-admin"}
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
                yield SealedStack(polar, storage, ports, backend.url)


@pytest.fixture(scope="module")
def bwrap_stack(sealed_stack: SealedStack) -> Iterator[SealedStack]:
    """`sealed_stack` plus a worker that runs as an ordinary user on a queue of its own (its
    `local` sessions sealed by bwrap), reading task sources from a dir of that user's."""
    reason = unprivileged.unavailable()
    if reason:
        print(f"skipping the bwrap runtime: {reason}")
        pytest.skip(reason)
    work = unprivileged.user_dir("polar-adv-bwrap-")
    sources = work / "sources"
    sources.mkdir()
    entry = unprivileged.ensure_user()
    os.chown(sources, entry.pw_uid, entry.pw_gid)
    base = sealed_stack.polar.settings
    settings = base.model_copy(
        update={"task_queue": f"{base.task_queue}-bwrap", "source_roots": str(sources)}
    )
    try:
        with unprivileged.user_worker(settings, work):
            sealed_stack.users["bwrap"] = PolarClient(sealed_stack.polar.client, settings)
            sealed_stack.user_dir = sources
            yield sealed_stack
    finally:
        sealed_stack.users.pop("bwrap", None)
        print(f"bwrap worker log tail: {(work / 'worker.log').read_text()[-1500:]}")
        shutil.rmtree(work, ignore_errors=True)


def _stack_for(kind: str, sealed: SealedStack, request: pytest.FixtureRequest) -> SealedStack:
    """The stack whose worker serves `kind` (with a user's worker for `bwrap`)."""
    if kind == "bwrap":
        return request.getfixturevalue("bwrap_stack")  # type: ignore[no-any-return]
    return sealed


def _polar(stack: SealedStack, kind: str) -> PolarClient:
    return stack.users.get(kind, stack.polar)


def _repo(stack: SealedStack, kind: str, tmp_path: Path) -> tuple[Path, str]:
    """The task's repository, where the worker of `kind` may read it (owned by its user)."""
    if kind != "bwrap" or stack.user_dir is None:
        return make_repo(tmp_path)
    root = stack.user_dir / uuid.uuid4().hex[:8]
    root.mkdir()
    repo, sha = make_repo(root)
    subprocess.run(["chown", "-R", unprivileged.USER, str(root)], check=True)
    return repo, sha


def _runtime(kind: str, request: pytest.FixtureRequest, **limits: Any) -> dict[str, Any]:
    if kind == "docker":
        return {"kind": "docker", "image": request.getfixturevalue("docker_image"), **limits}
    if kind == "podman":
        return {"kind": "podman", "image": request.getfixturevalue("podman_image"), **limits}
    return {"kind": "local"}


def _spec(
    task_id: str,
    repo: Path,
    sha: str,
    runtime: dict[str, Any],
    evaluator: dict[str, Any],
    env: dict[str, str],
    harness_s: float = 120,
) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "instruction": "make add() add",
            "source": {"type": "git", "url": str(repo), "ref": sha},
            "runtime": runtime,
            "harness": {"kind": "command", "command": "python3 tools/attack.py", "env": env},
            "evaluator": evaluator,
            "timeouts": {"harness_s": harness_s, "heartbeat_s": 20, "max_attempts": 1},
        }
    )


def _report(storage: Storage, session: SessionResult) -> dict[str, Any]:
    out = storage.get_bytes(artifact_key(session.session_id, "harness-attempt1.stdout")).decode()
    lines = [line for line in out.splitlines() if line.startswith("ATTACK-REPORT ")]
    assert lines, f"no attack report in the harness's stdout: {out[-2000:]}"
    return json.loads(lines[-1].removeprefix("ATTACK-REPORT "))


def _evidence(storage: Storage, session: SessionResult) -> str:
    """The grading's report and the patch it graded, for a failure message."""
    parts = [session.evaluation or ""]
    for name in ("swebench-tests.log", "swebench-model.patch"):
        try:
            parts.append(storage.get_bytes(artifact_key(session.session_id, name)).decode()[:3000])
        except Exception as exc:  # noqa: BLE001 - evidence only
            parts.append(f"{name}: {exc}")
    return "\n".join(parts)


async def _one(polar: PolarClient, spec: TaskSpec) -> SessionResult:
    result = await polar.wait(await polar.submit(spec), timeout_s=600)
    [session] = result.sessions
    return session


RUNTIMES = ["docker", "podman", "local", "bwrap"]
"""The sealed runtimes every attack runs against (`bwrap`: `local` on a non-root worker)."""


@pytest.mark.parametrize("kind", RUNTIMES)
async def test_attacks_get_the_honest_reward(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack = _stack_for(kind, sealed_stack, request)
    repo, sha = _repo(stack, kind, tmp_path)
    runtime = _runtime(kind, request)
    polar = _polar(stack, kind)
    victim = SessionIdentity(f"victim-{uuid.uuid4().hex[:8]}", "victim-task")
    env = {
        "ATTACK_PORTS": ",".join(f"{name}={port}" for name, port in stack.ports.items()),
        "ATTACK_UPSTREAM": stack.upstream,
        "ATTACK_VICTIM_KEY": mint_session_key(victim, polar.settings.session_secret),
    }
    tag = f"adv-{kind}-{uuid.uuid4().hex[:6]}"
    attacked_swe, attacked_cmd, honest = await asyncio.gather(
        _one(polar, _spec(f"{tag}-swe", repo, sha, runtime, swebench_evaluator(sha), env)),
        _one(
            polar,
            _spec(
                f"{tag}-cmd",
                repo,
                sha,
                runtime,
                {
                    "kind": "command",
                    "command": JUNIT_GRADER,
                    "protected": ["tests/**", "conftest.py", "**/conftest.py"],
                },
                env,
            ),
        ),
        _one(
            polar,
            _spec(
                f"{tag}-fix", repo, sha, runtime, swebench_evaluator(sha), env | {"ATTACK_FIX": "1"}
            ),
        ),
    )
    for session in (attacked_swe, attacked_cmd, honest):
        report = _report(stack.storage, session)
        print(
            f"{kind} {session.session_id}: {session.status} reward={session.reward} "
            f"{session.evaluation!r}; attack: {report}"
        )
        assert session.status == SessionStatus.COMPLETED, session
        # nothing but the channel: no port of the stack, no direct backend
        assert report["reached_ports"] == [], report
        assert report["upstream_direct"] == -1, report
        # the channel: model calls only, every one recorded as this session's
        assert report["own_call"] == 200 and report["victim_key_call"] == 200, report
        assert set(report["routes"].values()) == {404}, report
        records = stack.storage.list_completions(session.session_id)
        assert len(records) == 2 and {r.session_id for r in records} == {session.session_id}
    assert stack.storage.count_completions(victim.session_id) == 0
    # a wrong fix plus every attack on grading: not resolved; the honest fix: resolved
    assert attacked_swe.reward == 0.0, _evidence(stack.storage, attacked_swe)
    assert attacked_cmd.reward == 0.0, attacked_cmd.evaluation
    assert honest.reward == 1.0, honest.evaluation


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_disk_filler_and_fork_bomb_end_only_their_session(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    skip_without_disk_watchdog(kind)
    stack = sealed_stack
    repo, sha = make_repo(tmp_path)
    tag = f"adv-limits-{kind}-{uuid.uuid4().hex[:6]}"
    evaluator = {"kind": "command", "command": "true"}
    filler, bomb, bystander = await asyncio.gather(
        _one(
            stack.polar,
            _spec(
                f"{tag}-disk",
                repo,
                sha,
                _runtime(kind, request, disk="64m"),
                evaluator,
                {"ATTACK_FILL_MB": "400"},
            ),
        ),
        _one(
            stack.polar,
            _spec(
                f"{tag}-bomb",
                repo,
                sha,
                _runtime(kind, request, pids=128),
                evaluator,
                {"ATTACK_FORK_BOMB": "1"},
                harness_s=15,
            ),
        ),
        _one(
            stack.polar,
            _spec(
                f"{tag}-ok",
                repo,
                sha,
                _runtime(kind, request),
                swebench_evaluator(sha),
                {"ATTACK_FIX": "1"},
            ),
        ),
    )
    print(
        f"{kind}: disk {filler.status} {filler.error!r}; bomb {bomb.status}; "
        f"bystander {bystander.status} {bystander.reward}"
    )
    assert filler.status == SessionStatus.HARNESS_FAILED, filler
    stderr = stack.storage.get_bytes(artifact_key(filler.session_id, "harness-attempt1.stderr"))
    assert b"disk limit exceeded" in stderr
    assert bomb.status == SessionStatus.TIMEOUT, bomb
    assert (
        "ATTACK-REPORT"
        in stack.storage.get_bytes(
            artifact_key(bomb.session_id, "harness-attempt1.stdout")
        ).decode()
    )
    assert bystander.status == SessionStatus.COMPLETED and bystander.reward == 1.0, bystander
