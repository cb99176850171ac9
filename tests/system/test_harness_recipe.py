"""The harnesses page's recipe works: a CLI Polar has never seen, baked into an image, runs.

`examples/byo-harness/` (shown on docs/harnesses.md) holds a Dockerfile on the
project's local `polar/runtime:py311`, a tiny CLI (`quill`: its own flags, its
own log dir in HOME) and the task that runs it. The image is built with no
network (`network_mode="none"`: nothing is pulled or downloaded), then the task
runs as written on a real worker and gateway (a scripted model behind it) in a
sealed Docker session: the CLI's one call goes through the session's channel and
is recorded, its answer is graded in a fresh runtime, and its native log comes
back as an artifact.

`examples/byo-offline/` is the page's offline recipe for real packages: a PyPI CLI with
dependencies (httpx's command line, in a venv of its own under /opt) and an npm CLI
(cowsay, with the host's Node). Its `fetch.sh` downloads the pinned wheels and
node_modules on the host, once per pinned set (cached under `.polar/cache/`); the image is
built from them with no network, and one session runs both CLIs: the PyPI one makes the
model call through the session's channel, the npm one says the answer, and the evaluator
finds the image's own `python3` (with its pytest) still first on PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import BuildError

from polar.records import SessionStatus
from polar.settings import Settings
from polar.storage import Storage, artifact_key, session_prefix
from polar.tasks.spec import TaskSpec
from tests.support.scripted_backend import text
from tests.support.scripted_stack import running_scripted_stack

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "byo-harness"
ANSWER = "Rollouts gather what the policy sowed."
OFFLINE = REPO / "examples" / "byo-offline"
FETCHED = ("wheels", "npm", "node")
"""What examples/byo-offline/fetch.sh downloads into the build context."""
PINNED = ("fetch.sh", "requirements.txt", "package.json", "package-lock.json")
"""The files whose content decides what fetch.sh downloads (the cache's key, with Node's
version)."""
OFFLINE_ANSWER = "Wheels in, rollouts out."


def build_image(context: list[tuple[Path, str]], tag: str, base: str) -> str:
    """`docker build --network none` FROM `base` of a build context of (path, name in the
    context) entries; the test fails with the build's log when it does not build."""
    client = docker.from_env()
    with tempfile.TemporaryFile(prefix="polar-byo-ctx-") as tar_file:
        with tarfile.open(fileobj=tar_file, mode="w") as tar:
            for path, name in context:
                tar.add(path, arcname=name)
        tar_file.seek(0)
        try:
            client.images.build(
                fileobj=tar_file,
                custom_context=True,
                tag=tag,
                buildargs={"BASE": base},
                network_mode="none",
                rm=True,
                forcerm=True,
            )
        except BuildError as exc:
            log = "".join(str(chunk.get("stream", "")) for chunk in exc.build_log)
            pytest.fail(f"{tag} does not build offline: {exc}\n{log[-3000:]}")
    return tag


def files_of(folder: Path, leaving_out: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    """A folder's entries as build context entries, by name."""
    return [(p, p.name) for p in sorted(folder.iterdir()) if p.name not in leaving_out]


@pytest.fixture(scope="module")
def recipe_image(docker_image: str) -> Iterator[str]:
    """The recipe's image, built offline FROM the local runtime image, as the page says."""
    tag = json.loads((RECIPE / "task.json").read_text())["runtime"]["image"]
    yield build_image(files_of(RECIPE), tag, docker_image)


def fetched_downloads() -> Path:
    """examples/byo-offline/fetch.sh's downloads, run once per pinned set and Node version:
    kept in `.polar/cache/byo-offline-{key}/` (made beside it and renamed in, so two runs
    never see half of one)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: the offline recipe copies the host's Node")
    digest = hashlib.sha256()
    for name in PINNED:
        digest.update(name.encode() + b"\0" + (OFFLINE / name).read_bytes())
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    digest.update(version.stdout.encode())
    cache = REPO / ".polar" / "cache"
    dest = cache / f"byo-offline-{digest.hexdigest()[:16]}"
    if dest.is_dir():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{dest.name}.", dir=cache))
    env = os.environ | {"PYTHON": sys.executable}
    argv = ["bash", str(OFFLINE / "fetch.sh"), str(work)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        pytest.fail(f"fetch.sh failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    try:
        work.rename(dest)
    except OSError:  # another run renamed its own in first: same pins, same files
        shutil.rmtree(work, ignore_errors=True)
    return dest


@pytest.fixture(scope="module")
def offline_image(docker_image: str) -> str:
    """The offline recipe's image: the example's files plus fetch.sh's downloads, as the
    build context `docker build --network none examples/byo-offline` sends after fetch.sh."""
    downloads = fetched_downloads()
    tag = json.loads((OFFLINE / "task.json").read_text())["runtime"]["image"]
    fetched = [(downloads / name, name) for name in FETCHED]
    return build_image(files_of(OFFLINE, FETCHED) + fetched, tag, docker_image)


async def test_a_cli_baked_by_the_recipe_runs_a_sealed_session(
    recipe_image: str, devstack: object, base_settings: Settings, storage: Storage
) -> None:
    raw = json.loads((RECIPE / "task.json").read_text())
    raw["task_id"] = f"{raw['task_id']}-{uuid.uuid4().hex[:6]}"
    spec = TaskSpec.model_validate(raw)
    assert spec.runtime.kind == "docker" and spec.runtime.image == recipe_image
    async with running_scripted_stack(base_settings, [text(ANSWER)]) as stack:
        result = await stack.polar.wait(await stack.polar.submit(spec), timeout_s=600)
        requests = list(stack.backend.requests)
    [session] = result.sessions
    sid = session.session_id
    stdout = storage.get_bytes(artifact_key(sid, "harness-attempt1.stdout")).decode()
    stderr = storage.get_bytes(artifact_key(sid, "harness-attempt1.stderr")).decode()
    assert session.status == SessionStatus.COMPLETED, f"{session}\n{stdout}\n{stderr[-3000:]}"
    assert session.harness_exit_code == 0
    assert f"quill: wrote {len(ANSWER)} characters to answer.txt" in stdout  # the CLI ran
    assert session.reward == 1.0  # graded in a fresh runtime: answer.txt is in the diff

    # its one call went through the channel with the CLI's own request, and was recorded
    [request] = requests
    assert request["messages"][-1] == {"role": "user", "content": spec.instruction}
    assert request["messages"][0]["content"].startswith("You are quill")
    [record] = storage.list_completions(sid)
    assert record.response["choices"][0]["message"]["content"] == ANSWER
    assert session.num_completions == 1 and session.num_traces == 1

    # its native log, kept in HOME and copied to the artifacts dir by the task's command
    prefix = f"{session_prefix(sid)}artifacts/harness-attempt1/artifacts/"
    log_key = f"{prefix}.quill/log.jsonl"
    assert log_key in storage.list_keys(prefix)
    [entry] = [json.loads(line) for line in storage.get_bytes(log_key).decode().splitlines()]
    assert entry["answer"] == ANSWER and entry["model"] == spec.harness.model


async def test_a_pypi_and_an_npm_cli_baked_offline_run_a_sealed_session(
    offline_image: str, devstack: object, base_settings: Settings, storage: Storage
) -> None:
    raw = json.loads((OFFLINE / "task.json").read_text())
    raw["task_id"] = f"{raw['task_id']}-{uuid.uuid4().hex[:6]}"
    spec = TaskSpec.model_validate(raw)
    assert spec.runtime.kind == "docker" and spec.runtime.image == offline_image
    async with running_scripted_stack(base_settings, [text(OFFLINE_ANSWER)]) as stack:
        result = await stack.polar.wait(await stack.polar.submit(spec), timeout_s=600)
        requests = list(stack.backend.requests)
    [session] = result.sessions
    stdout = storage.get_bytes(session.artifacts["harness.stdout"]).decode()
    stderr = storage.get_bytes(session.artifacts["harness.stderr"]).decode()
    assert session.status == SessionStatus.COMPLETED, f"{session}\n{stdout}\n{stderr[-3000:]}"
    # the PyPI CLI asked the model through the session's channel, with the task's words
    [request] = requests
    assert request["messages"] == [{"role": "user", "content": spec.instruction}]
    [record] = storage.list_completions(session.session_id)
    assert record.response["choices"][0]["message"]["content"] == OFFLINE_ANSWER
    # the npm CLI said the answer; the image's python3 is still first on PATH
    assert f"< {OFFLINE_ANSWER} >" in stdout and "(oo)" in stdout, stdout
    assert "python3: /usr/bin/python3; httpx: /opt/httpx/bin/httpx" in stdout, stdout
    # graded in a fresh runtime of the image: both files in the diff, pytest importable
    assert session.reward == 1.0, session.evaluation
    patch = storage.get_bytes(session.artifacts["evaluation.patch"]).decode()
    assert "answer.txt" in patch and "cow.txt" in patch and "reply.json" not in patch
