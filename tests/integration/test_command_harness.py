"""The `command` harness's artifacts: what it writes under `$POLAR_ARTIFACTS_DIR` is in S3.

On the real stack (Temporal, SeaweedFS, a worker) with the `local`, `docker`
and `podman` runtimes: a shell harness writes files into its artifacts dir and
plants symlinks to a host file and a host dir there; the files are session
artifacts in S3 under `harness-attempt1/artifacts/`, named in the harness result
like native logs, and nothing the links point at leaves the host. The reader
itself (activities/harnesses/artifacts.py) is checked on a real directory for
its bounds and for every kind of entry it must not follow.

`polar key mint` (a subprocess, as a user runs it) makes a key that a running
gateway accepts, and the `export` lines it prints are all a stock OpenAI client
needs to record a call into that session.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from activities.harnesses.artifacts import ARTIFACTS_ENV, ARTIFACTS_SUBDIR, collect_artifacts
from activities.harnesses.base import HarnessContext
from activities.harnesses.command import CommandAdapter
from polar.client.sdk import PolarClient
from polar.contracts import HarnessResult
from polar.records import SessionStatus
from polar.settings import Settings
from polar.storage import Storage, artifact_key, session_prefix
from polar.tasks.spec import HarnessSpec, TaskSpec
from tests.integration.test_gateway import stack
from tests.support import text
from tests.support.runtime_kinds import every_runtime_kind

POLAR = [sys.executable, "-m", "app.cli"]

# writes two files (one in a subdir), then plants links the worker must not follow and a
# FIFO that would block a plain read
HARNESS = (
    'set -e; d="$' + ARTIFACTS_ENV + '"; test -d "$d" || { echo "no dir: [$d]" >&2; exit 3; }; '
    'echo "report of $POLAR_SESSION_ID" > "$d/report.txt"; mkdir "$d/sub"; '
    'printf \'{"ok": 1}\' > "$d/sub/data.json"; '
    'ln -s "$HOST_SECRET" "$d/host-file"; ln -s /etc "$d/etc-dir"; '
    'ln -s "$HOST_SECRET" "$d/sub/again"; mkfifo "$d/pipe"; echo done'
)


# ---------------------------------------------------------------------------- the reader


def test_reader_keeps_regular_files_and_follows_no_link(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("HOST-SECRET")
    top = tmp_path / "artifacts"
    (top / "sub" / "deep").mkdir(parents=True)
    (top / "a.txt").write_text("a")
    (top / "sub" / "deep" / "b.bin").write_bytes(b"\x00\x01")
    (top / "link").symlink_to(secret)
    (top / "dangling").symlink_to(tmp_path / "nowhere")
    (top / "dirlink").symlink_to(tmp_path)  # a symlinked dir is not walked either
    os.link(secret, top / "hard")  # a hard link to a file outside
    os.mkfifo(top / "fifo")  # would block a plain open
    got = collect_artifacts(top)
    assert got.files == [("a.txt", b"a"), ("sub/deep/b.bin", b"\x00\x01")]
    assert got.total_bytes == 3
    assert sorted(got.notes()) == [
        "dangling: a symlink (not followed)",
        "dirlink: a symlink (not followed)",
        "fifo: not a regular file",
        "hard: a hard link (not followed)",
        "link: a symlink (not followed)",
    ]
    assert not any(b"HOST-SECRET" in data for _, data in got.files)


def test_reader_in_place_of_the_dir_a_symlink_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x").write_text("x")
    (tmp_path / "artifacts").symlink_to(tmp_path / "real")
    got = collect_artifacts(tmp_path / "artifacts")
    assert got.files == [] and got.notes() == ["artifacts: a symlink (not followed)"]
    assert collect_artifacts(tmp_path / "missing").files == []


def test_reader_bounds_files_and_bytes_and_says_what_it_left_out(tmp_path: Path) -> None:
    top = tmp_path / "artifacts"
    top.mkdir()
    for i in range(5):
        (top / f"f{i}").write_bytes(b"x" * 10)
    (top / "big").write_bytes(b"y" * 100)
    got = collect_artifacts(top, max_files=3, max_bytes=25)
    # path order: big (100 > 25), then f0 and f1 (20 bytes); f2..f4 would pass 25
    assert [name for name, _ in got.files] == ["f0", "f1"]
    assert got.total_bytes == 20
    assert got.notes() == [
        "big: 100 bytes, past the 25-byte total",
        "f2: 10 bytes, past the 25-byte total",
        "f3: 10 bytes, past the 25-byte total",
        "f4: 10 bytes, past the 25-byte total",
    ]
    by_count = collect_artifacts(top, max_files=2)
    assert [name for name, _ in by_count.files] == ["big", "f0"]
    assert by_count.notes()[0] == "f1: past the 2-file limit"


def test_reader_names_the_first_skipped_files_and_counts_the_rest(tmp_path: Path) -> None:
    top = tmp_path / "artifacts"
    top.mkdir()
    for i in range(30):
        (top / f"l{i:02}").symlink_to("/etc/hostname")
    notes = collect_artifacts(top).notes()
    assert len(notes) == 21 and notes[-1] == "... and 10 more skipped"


def test_command_adapter_makes_the_dir_and_names_it_as_the_harness_sees_it(
    tmp_path: Path,
) -> None:
    ctx = HarnessContext(
        spec=HarnessSpec(kind="command", command="true"),
        instruction="x",
        gateway_url="http://gw:1",
        api_key="pk-x",
        session_id="s1",
        task_id="t1",
        home_in_runtime="/in/container/home/",
    )
    launch = CommandAdapter().prepare(tmp_path / "home", "/workspace", ctx)
    assert (tmp_path / "home" / ARTIFACTS_SUBDIR).is_dir()
    assert launch.env[ARTIFACTS_ENV] == f"/in/container/home/{ARTIFACTS_SUBDIR}"


# ---------------------------------------------------------------------------- on the stack


async def _harness_result(polar: PolarClient, session_id: str) -> HarnessResult:
    """The run_harness activity's result, from the session's history."""
    history = await polar.client.get_workflow_handle(session_id).fetch_history()
    scheduled: dict[int, str] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        if event.HasField("activity_task_completed_event_attributes"):
            attrs = event.activity_task_completed_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == "run_harness":
                return HarnessResult.model_validate_json(attrs.result.payloads[0].data)
    raise AssertionError(f"no completed run_harness in {session_id}'s history")


@pytest.mark.slow
@pytest.mark.parametrize("kind", every_runtime_kind(["local", "docker", "podman"]))
async def test_artifacts_reach_s3_and_host_files_behind_links_do_not(
    kind: str,
    polar: PolarClient,
    storage: Storage,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    runtime: dict[str, str] = {"kind": kind}
    if kind != "local":
        runtime["image"] = request.getfixturevalue(f"{kind}_image")
    marker = f"HOST-SECRET-{uuid.uuid4().hex}"
    secret = tmp_path / "secret.txt"
    secret.write_text(marker)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("nothing\n")
    task_id = f"artifacts-{kind}-{uuid.uuid4().hex[:6]}"
    spec = TaskSpec.model_validate(
        {
            "task_id": task_id,
            "instruction": "write artifacts",
            "source": {"type": "dir", "path": str(repo)},
            "runtime": runtime,
            "harness": {"kind": "command", "command": HARNESS, "env": {"HOST_SECRET": str(secret)}},
            "timeouts": {"harness_s": 120, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=600)
    [session] = result.sessions
    stderr = storage.get_bytes(artifact_key(session.session_id, "harness-attempt1.stderr"))
    assert session.status == SessionStatus.COMPLETED, f"{session}\n{stderr.decode()[-2000:]}"
    assert session.harness_exit_code == 0

    prefix = f"{session_prefix(session.session_id)}artifacts/harness-attempt1/artifacts/"
    keys = sorted(storage.list_keys(prefix))
    assert keys == [f"{prefix}report.txt", f"{prefix}sub/data.json"], keys
    report = storage.get_bytes(f"{prefix}report.txt").decode()
    assert report == f"report of {session.session_id}\n"
    assert json.loads(storage.get_bytes(f"{prefix}sub/data.json")) == {"ok": 1}
    every = storage.list_keys(session_prefix(session.session_id))
    assert not any(marker.encode() in storage.get_bytes(k) for k in every)

    harness = await _harness_result(polar, session.session_id)
    assert set(keys) <= set(harness.artifact_keys), harness.artifact_keys
    if kind == "local":  # the links were dropped at reap; the FIFO is left out, and said so
        assert harness.artifacts_skipped == ["pipe: not a regular file"]
    else:  # the sync out of the container brought neither the links nor the FIFO
        assert harness.artifacts_skipped == []
    print(f"{kind}: kept {keys}; skipped {harness.artifacts_skipped}")


# ---------------------------------------------------------------------------- polar key mint


def _mint(settings: Settings, *args: str, secret: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    env |= {"POLAR_DATA_DIR": str(settings.data_dir)}
    if secret is not None:
        env["POLAR_SESSION_SECRET"] = secret
    return subprocess.run(
        [*POLAR, "key", "mint", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _exports(stdout: str) -> dict[str, str]:
    """The variables of the printed `export NAME=value` lines, as a shell would set them."""
    env = {}
    for line in stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0]
    return env


# a stock OpenAI client configured by the environment alone
CLIENT = (
    "import os; from openai import OpenAI; "
    "r = OpenAI(max_retries=0).chat.completions.create(model=os.environ['OPENAI_MODEL'], "
    "messages=[{'role': 'user', 'content': 'hi'}]); print(r.choices[0].message.content)"
)


def test_a_minted_key_is_accepted_by_a_running_gateway(
    base_settings: Settings, storage: Storage
) -> None:
    session_id = f"byo-{uuid.uuid4().hex[:8]}"
    with stack(base_settings, [text("hello from the gateway")]) as (_, gateway):
        secret = gateway.settings.session_secret
        assert secret
        minted = _mint(
            base_settings,
            "--session-id",
            session_id,
            "--task-id",
            "byo-task",
            "--ttl-s",
            "600",
            "--gateway-url",
            gateway.url,
            secret=secret,
        )
        assert minted.returncode == 0, minted.stderr
        env = _exports(minted.stdout)
        assert env["OPENAI_BASE_URL"] == f"{gateway.url}/v1"
        assert env["GOOGLE_GEMINI_BASE_URL"] == env["ANTHROPIC_BASE_URL"] == gateway.url
        assert env["POLAR_SESSION_ID"] == session_id and env["POLAR_TASK_ID"] == "byo-task"
        key = env["OPENAI_API_KEY"]
        assert key.startswith("pk-") and env["GEMINI_API_KEY"] == env["POLAR_API_KEY"] == key
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "POLAR_"))}
        called = subprocess.run(
            [sys.executable, "-c", CLIENT],
            env=clean | env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert called.returncode == 0, called.stderr
        assert called.stdout.strip() == "hello from the gateway"
        [record] = storage.list_completions(session_id)
        assert record.task_id == "byo-task" and record.status_code == 200

        # the same CLI with another secret: a key this gateway refuses
        forged = _mint(
            base_settings,
            "--session-id",
            session_id,
            "--task-id",
            "byo-task",
            "--key-only",
            secret="another-secret-0123456789abcdef0123456789",
        )
        assert forged.returncode == 0, forged.stderr
        refused = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {forged.stdout.strip()}"},
            json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert refused.status_code == 401, refused.text
        assert len(storage.list_completions(session_id)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--session-id", "../etc", "--task-id", "t"], "invalid session id '../etc'"),
        (["--session-id", "s", "--task-id", "t", "--ttl-s", "0"], "--ttl-s must be a positive"),
        (["--session-id", "s", "--task-id", "t", "--ttl-s", "inf"], "--ttl-s must be a positive"),
    ],
)
def test_key_mint_refuses_bad_input_with_a_clear_error(
    base_settings: Settings, args: list[str], message: str
) -> None:
    got = _mint(base_settings, *args, secret="a-secret-0123456789abcdef0123456789abcdef")
    assert got.returncode == 2 and got.stdout == ""
    assert message in got.stderr and "Traceback" not in got.stderr


def test_key_mint_without_a_secret_says_so(tmp_path: Path) -> None:
    got = _mint(Settings(data_dir=tmp_path), "--session-id", "s", "--task-id", "t")
    assert got.returncode == 2 and got.stdout == ""
    assert "no session secret: set POLAR_SESSION_SECRET" in got.stderr
