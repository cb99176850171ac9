"""The harnesses page's recipe works: a CLI Polar has never seen, baked into an image, runs.

`examples/byo-harness/` (shown on docs/harnesses.md) holds a Dockerfile on the
project's local `polar/runtime:py311`, a tiny CLI (`quill`: its own flags, its
own log dir in HOME) and the task that runs it. The image is built with no
network (`network_mode="none"`: nothing is pulled or downloaded), then the task
runs as written on a real worker and gateway (a scripted model behind it) in a
sealed Docker session: the CLI's one call goes through the session's channel and
is recorded, its answer is graded in a fresh runtime, and its native log comes
back as an artifact.
"""

from __future__ import annotations

import json
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

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "byo-harness"
ANSWER = "Rollouts gather what the policy sowed."


@pytest.fixture(scope="module")
def recipe_image(docker_image: str) -> Iterator[str]:
    """The recipe's image, built offline FROM the local runtime image, as the page says."""
    tag = json.loads((RECIPE / "task.json").read_text())["runtime"]["image"]
    client = docker.from_env()
    try:
        client.images.build(
            path=str(RECIPE),
            tag=tag,
            buildargs={"BASE": docker_image},
            network_mode="none",
            rm=True,
            forcerm=True,
        )
    except BuildError as exc:
        log = "".join(str(chunk.get("stream", "")) for chunk in exc.build_log)
        pytest.fail(f"the recipe's image does not build offline: {exc}\n{log[-3000:]}")
    yield tag


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
