"""Strict identity: real secrets to start, keys that expire, and keys of ended sessions refused.

On the real gateway (in-process app over real S3 and a scripted backend), the
real `polar gateway` / `polar worker` processes, and a real session on the
Temporal dev server.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.credentials import (
    WeakSecret,
    load_dev_secrets,
    refuse_weak_secrets,
    weakness,
    with_dev_secrets,
)
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from proxy.app import create_app
from tests.support import scripted_backend, serve_app, text
from tests.support.paths import REPO
from tests.support.polling import wait_for
from tests.support.ports import free_port

BUILT_IN_DEV_SECRET = "polar-dev-secret-change-me"  # the default every gateway had before
CALL = (
    'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    "-H 'content-type: application/json' "
    '-d \'{"model":"p","messages":[{"role":"user","content":"hi"}]}\' > /dev/null'
)


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "is not set"),
        ("", "is not set"),
        (BUILT_IN_DEV_SECRET, "placeholder"),
        ("change-me-a-long-random-string", "placeholder"),  # the old compose example
        ("change-me-in-production", "placeholder"),
        ("short", "shorter"),
        # issue 21: long enough, but no strength
        ("a" * 16, "distinct"),
        ("0000000000000000", "distinct"),
        ("password12345678", "too weak"),
        ("abcdefghijklmnopqrstuvwxyz0123456789", "too weak"),  # sequential
        ("Xy7#kQ2!Xy7#kQ2!Xy7#kQ2!Xy7#kQ2!", "too weak"),  # one block, repeated
        ("qwertyuiopasdfghjklzxcvb", "too weak"),  # 24 letters: about 113 bits at most
        ("adversary-test-admin-token", "too weak"),
    ],
)
def test_weak_secrets_are_named(value: str | None, reason: str) -> None:
    assert reason in (weakness(value) or "")
    with pytest.raises(WeakSecret, match="POLAR_SESSION_SECRET"):
        refuse_weak_secrets(Settings(session_secret=value), "gateway")


def test_a_real_secret_passes_and_optional_ones_may_be_unset() -> None:
    settings = Settings(session_secret=secrets.token_urlsafe(32))
    refuse_weak_secrets(settings, "gateway")  # no admin token, no S3 keys: allowed
    with pytest.raises(WeakSecret, match="POLAR_ADMIN_TOKEN.*POLAR_S3_SECRET_KEY"):
        refuse_weak_secrets(
            settings.model_copy(
                update={"admin_token": "change-me-too", "s3_secret_key": "polar-secret"}
            ),
            "gateway",
        )


def test_random_secrets_of_128_bits_or_more_pass() -> None:
    """What the dev stack, infra/deploy/new-env.sh and the docs generate always passes; a
    16-byte hex key almost always (a run such as `12345` in it counts for nothing)."""
    for _ in range(2000):
        for value in (secrets.token_urlsafe(32), secrets.token_urlsafe(24), secrets.token_hex(32)):
            assert weakness(value) is None, value
    assert sum(weakness(secrets.token_hex(16)) is not None for _ in range(2000)) < 20


def _run_cli(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("process", ["gateway", "worker"])
@pytest.mark.parametrize("secret", [None, BUILT_IN_DEV_SECRET, "change-me-a-long-random-string"])
def test_processes_refuse_to_start_with_a_weak_secret(
    process: str, secret: str | None, tmp_path: Path
) -> None:
    env = {
        "POLAR_DATA_DIR": str(tmp_path),
        "POLAR_GATEWAY_PORT": str(free_port()),
        "POLAR_ADMIN_PORT": str(free_port()),
    }
    if secret is not None:
        env["POLAR_SESSION_SECRET"] = secret
    code, out = _run_cli([process], env)
    assert code == 2, out
    assert "refuses to start" in out and "POLAR_SESSION_SECRET" in out
    assert "Traceback" not in out


def test_dev_stack_generates_secrets_once_per_data_dir(tmp_path: Path) -> None:
    first = DevStack(Settings(data_dir=tmp_path / "a"), with_model=False, with_docker=False)
    again = DevStack(Settings(data_dir=tmp_path / "a"), with_model=False, with_docker=False)
    other = DevStack(Settings(data_dir=tmp_path / "b"), with_model=False, with_docker=False)
    assert first.settings.session_secret == again.settings.session_secret
    assert first.settings.session_secret != other.settings.session_secret
    for settings in (first.settings, other.settings):
        refuse_weak_secrets(settings, "gateway")  # generated ones pass
        assert settings.admin_token and settings.s3_access_key and settings.s3_secret_key
    path = tmp_path / "a" / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # every part the stack starts gets them; other commands with that data dir read them
    assert first.env()["POLAR_SESSION_SECRET"] == first.settings.session_secret
    assert with_dev_secrets(Settings(data_dir=tmp_path / "a")).session_secret == (
        first.settings.session_secret
    )
    # a value the user set wins over the generated one
    mine = "mine-" + uuid.uuid4().hex
    assert (
        with_dev_secrets(Settings(data_dir=tmp_path / "a", session_secret=mine)).session_secret
        == mine
    )
    assert load_dev_secrets(tmp_path / "c", create=False) == {}


async def test_a_gateway_with_a_real_secret_starts(tmp_path: Path) -> None:
    port = free_port()
    env = {
        "POLAR_DATA_DIR": str(tmp_path),
        "POLAR_GATEWAY_PORT": str(port),
        "POLAR_ADMIN_PORT": str(free_port()),
        "POLAR_SESSION_SECRET": uuid.uuid4().hex + uuid.uuid4().hex,
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "gateway"],
        env=clean | env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        probe = f"http://127.0.0.1:{port}/v1"
        await wait_for(lambda: _answers(probe), timeout_s=60, what="the gateway's probe")
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 404  # admin port only
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert proc.returncode in (0, -15), out[-2000:]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# ---------------------------------------------------------------- keys on the gateway


@pytest.fixture(scope="module")
def gateway(devstack: DevStack) -> Iterator[tuple[str, Settings]]:
    """A gateway over real S3 in front of a scripted backend; every session is re-checked
    for closing on every call (closed_check_s 0)."""
    with scripted_backend([text(f"ok {i}") for i in range(100)]) as backend:
        settings = devstack.settings.model_copy(
            update={"upstream_urls": backend.url, "closed_check_s": 0.0}
        )
        with serve_app(create_app(settings)) as url:
            yield url, settings


def _call(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "p", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )


def _identity(attempt: int = 1) -> SessionIdentity:
    return SessionIdentity(f"s-{uuid.uuid4().hex[:12]}", "task-identity", attempt)


def test_a_key_signed_with_the_built_in_dev_secret_is_refused(
    gateway: tuple[str, Settings], storage: Storage
) -> None:
    url, _ = gateway
    identity = _identity()
    forged = mint_session_key(identity, BUILT_IN_DEV_SECRET)
    answer = _call(url, forged)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_api_key"
    assert storage.count_completions(identity.session_id) == 0


def test_an_expired_key_is_refused(gateway: tuple[str, Settings], storage: Storage) -> None:
    url, settings = gateway
    identity = _identity()
    expired = mint_session_key(identity, settings.session_secret, ttl_s=-1)
    answer = _call(url, expired)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "expired_api_key"
    assert "expired" in answer.json()["error"]["message"]
    assert storage.count_completions(identity.session_id) == 0
    # the same identity with time left records
    assert _call(url, mint_session_key(identity, settings.session_secret)).status_code == 200
    assert storage.count_completions(identity.session_id) == 1


@pytest.mark.parametrize("scope", ["attempt", "session"])
def test_the_key_of_a_closed_session_is_refused(
    gateway: tuple[str, Settings], storage: Storage, scope: str
) -> None:
    url, settings = gateway
    identity = _identity(attempt=1)
    key = mint_session_key(identity, settings.session_secret)
    assert _call(url, key).status_code == 200
    storage.mark_closed(identity.session_id, 1 if scope == "attempt" else None)
    answer = _call(url, key)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "session_closed"
    assert storage.count_completions(identity.session_id) == 1  # nothing more was recorded
    # closing one attempt leaves a later attempt of the session open; closing the session not
    later = mint_session_key(
        SessionIdentity(identity.session_id, identity.task_id, 2), settings.session_secret
    )
    assert _call(url, later).status_code == (200 if scope == "attempt" else 403)


# ---------------------------------------------------------------- a real session closes


@pytest.fixture(scope="module")
async def polar(devstack: DevStack, gateway: tuple[str, Settings]) -> AsyncIterator[PolarClient]:
    from activities.worker import running_workers

    settings = devstack.settings.model_copy(
        update={"task_queue": f"polar-id-{uuid.uuid4().hex[:8]}", "gateway_url": gateway[0]}
    )
    async with running_workers(settings):
        yield await PolarClient.connect(settings)


async def test_a_finished_session_closes_its_keys(
    polar: PolarClient, gateway: tuple[str, Settings], storage: Storage, tmp_path: Path
) -> None:
    url, settings = gateway
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("identity\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": f"identity-{uuid.uuid4().hex[:6]}",
            "source": {"type": "dir", "path": str(repo)},
            "harness": {"command": CALL},
            "timeouts": {"heartbeat_s": 5},
        }
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=120)
    (session,) = result.sessions
    assert session.status == "completed", session
    assert storage.count_completions(session.session_id) == 1
    # the run closed its attempt and teardown the session: its key records nothing more
    assert storage.closed_markers(session.session_id) == {"attempt-1", "session"}
    key = mint_session_key(
        SessionIdentity(session.session_id, spec.task_id, 1), settings.session_secret
    )
    answer = _call(url, key)
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "session_closed"
    assert storage.count_completions(session.session_id) == 1
