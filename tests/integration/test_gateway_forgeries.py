"""Issue 32, end to end: a session the policy lost stays a zero whatever it sends the gateway.

Temporal, SeaweedFS, a real gateway with a judge pool, and a worker whose `local`
sessions run a `command` harness that, from a losing position, sends the gateway what
used to make it fail (a lone surrogate, `stream_options` that is not an object, JSON
nested 900 deep: each a 500 marked as the gateway's own fault, so the session ended
`infra_error:gateway` after 3 placements, out of its group's baseline) or asks the judge
for a grade through its own channel (served, even with `unknown_models: refuse`), then
exits 1. Each now gets a 4xx in its own shape, and the session is `policy_failure`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from polar.client.sdk import PolarClient
from polar.records import OutcomeClass
from polar.settings import Settings
from polar.storage import Storage, artifact_key
from polar.tasks.spec import TaskSpec
from tests.integration.test_rubric_judge import judge_backend, judge_pool
from tests.support.scripted_backend import text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack

FORGE = r"""
import json, os, sys, urllib.error, urllib.request
url = os.environ["POLAR_BASE_URL"] + "/chat/completions"
model = json.dumps(os.environ["POLAR_MODEL"]).encode()
user = b'"messages": [{"role": "user", "content": "x"}]'
bodies = {
    "surrogate": b'{"model": ' + model + b', "messages": [{"role": "user", "content": "\\ud800"}]}',
    "stream_options": b'{"model": ' + model + b', "stream": true, "stream_options": 5, '
    + user + b"}",
    "deep": b'{"model": ' + model + b", " + user + b', "x": ' + b"[" * 900 + b"]" * 900 + b"}",
    "judge": b'{"model": "judge", ' + user + b"}",
}
for name in sys.argv[1:]:
    key = os.environ["POLAR_API_KEY"]
    headers = {"content-type": "application/json", "authorization": "Bearer " + key}
    try:
        urllib.request.urlopen(urllib.request.Request(url, bodies[name], headers), timeout=60)
        print(name, 200, flush=True)
    except urllib.error.HTTPError as exc:
        print(name, exc.code, exc.headers.get("x-polar-gateway-fault"), flush=True)
sys.exit(1)
"""


@pytest.fixture(scope="module")
async def forge_stack(
    devstack: object, base_settings: Settings
) -> AsyncIterator[tuple[ScriptedStack, list[dict[str, Any]]]]:
    with judge_backend(lambda body: '{"score": 1.0, "reason": "asked by the harness"}') as (
        judge_url,
        judged,
    ):
        graded = base_settings.model_copy(update={"pools": judge_pool(judge_url)})
        async with running_scripted_stack(graded, [text("ok")] * 8) as running:
            yield running, judged


async def forge(
    polar: PolarClient, tmp_path: Path, calls: list[str], **harness: Any
) -> tuple[Any, str]:
    """A session whose harness sends `calls`, then exits 1; the session and its stdout."""
    repo = tmp_path / uuid.uuid4().hex[:8]
    repo.mkdir()
    (repo / "forge.py").write_text(FORGE)
    spec = TaskSpec.model_validate(
        {
            "task_id": f"forge-{uuid.uuid4().hex[:8]}",
            "instruction": "lose, then try to make it not count",
            "source": {"type": "dir", "path": str(repo)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "command": "python3 forge.py " + " ".join(calls)}
            | harness,
            "timeouts": {"harness_s": 120, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=900)
    [session] = result.sessions
    stdout = Storage(polar.settings).get_bytes(
        artifact_key(session.session_id, "harness-attempt1.stdout")
    )
    return session, stdout.decode()


async def test_bytes_that_used_to_fail_the_gateway_leave_a_policy_failure(
    forge_stack: tuple[ScriptedStack, list[dict[str, Any]]], tmp_path: Path
) -> None:
    stack, _ = forge_stack
    session, stdout = await forge(stack.polar, tmp_path, ["surrogate", "stream_options", "deep"])
    assert stdout.split("\n")[:3] == [
        "surrogate 400 None",
        "stream_options 400 None",
        "deep 400 None",
    ], stdout
    assert session.outcome is not None, session
    assert (session.outcome.outcome, session.outcome.reason) == (OutcomeClass.POLICY_FAILURE, None)
    assert session.unserved_calls in (0, None), session


@pytest.mark.parametrize("unknown_models", ["refuse", "policy"])
async def test_a_harness_cannot_ask_the_judge(
    forge_stack: tuple[ScriptedStack, list[dict[str, Any]]], tmp_path: Path, unknown_models: str
) -> None:
    stack, judged = forge_stack
    before = len(judged)
    session, stdout = await forge(stack.polar, tmp_path, ["judge"], unknown_models=unknown_models)
    assert stdout.strip() == "judge 404 None", stdout
    assert len(judged) == before  # the judge never saw the harness's call
    assert session.outcome is not None, session
    assert session.outcome.outcome == OutcomeClass.POLICY_FAILURE
