"""A session's result names every object it stored, and each key it names is in S3.

On the real stack (Temporal, SeaweedFS, a worker, the gateway with a scripted model) a
`command` harness on the `local` runtime makes one model call, writes its answer to the
workspace and a file under `$POLAR_ARTIFACTS_DIR`; a `command` evaluator grades it. The
result's `artifacts` names the run's output and file, the traces and their rewards, the
evaluation's report, patch and logs (polar/session_artifacts.py), every key exists, and
`polar result SESSION --json` (a subprocess, as a script runs it) prints the same map.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

from polar.records import SessionStatus
from polar.session_artifacts import is_folder
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from tests.support.scripted_backend import text
from tests.support.scripted_stack import running_scripted_stack

ANSWER = "Every artifact has a key."
# one Chat Completions call through the session's base URL, its answer into the workspace
ASK = (
    "import json, os, urllib.request as r\n"
    "body = {'model': os.environ['OPENAI_MODEL'], 'messages': [{'role': 'user', "
    "'content': os.environ['POLAR_INSTRUCTION']}]}\n"
    "req = r.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
    "json.dumps(body).encode(), {'Content-Type': 'application/json', "
    "'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
    "answer = json.load(r.urlopen(req, timeout=60))['choices'][0]['message']['content']\n"
    "open('answer.txt', 'w').write(answer + '\\n')\n"
)
HARNESS = (
    f"python3 -c {shlex.quote(ASK)} && "
    'echo "kept by the harness" > "$POLAR_ARTIFACTS_DIR/note.txt" && echo asked'
)
NAMES = {
    "harness.stdout",
    "harness.stderr",
    "harness/artifacts/note.txt",
    "traces",
    "traces.rewards",
    "evaluation.report",
    "evaluation.patch",
    "evaluation/evaluate.stdout",
    "evaluation/evaluate.stderr",
}


async def test_every_artifact_the_result_names_is_in_s3(
    devstack: object, base_settings: Settings, storage: Storage, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("artifacts\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": f"artifacts-{uuid.uuid4().hex[:6]}",
            "instruction": "Say one line about keys.",
            "source": {"type": "dir", "path": str(repo)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "model": "policy", "command": HARNESS},
            "evaluator": {"kind": "command", "command": "grep -q key answer.txt"},
            "timeouts": {"harness_s": 120, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    async with running_scripted_stack(base_settings, [text(ANSWER)]) as stack:
        result = await stack.polar.wait(await stack.polar.submit(spec), timeout_s=300)
        env = os.environ | stack.env()
    [session] = result.sessions
    artifacts = session.artifacts
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0, session
    assert set(artifacts) == NAMES, artifacts
    for name, key in artifacts.items():
        assert key.startswith(f"sessions/{session.session_id}/"), (name, key)
        found = storage.list_keys(key) if is_folder(name) else storage.exists(key)
        assert found, f"{name}: {key} is not in S3"
    assert artifacts["traces"] == session.traces_key
    assert storage.get_bytes(artifacts["harness.stdout"]).decode() == "asked\n"
    note = storage.get_bytes(artifacts["harness/artifacts/note.txt"])
    assert note == b"kept by the harness\n"
    assert f"+{ANSWER}" in storage.get_bytes(artifacts["evaluation.patch"]).decode()
    report = json.loads(storage.get_bytes(artifacts["evaluation.report"]))
    assert report["patch_files"] == ["answer.txt"], report

    # `polar result SESSION --json` prints the same map
    argv = [sys.executable, "-m", "app.cli", "result", session.session_id, "--json"]
    shown = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert json.loads(shown.stdout)["artifacts"] == artifacts
