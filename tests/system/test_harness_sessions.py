"""Each real harness CLI as a full Temporal Session on the `local` runtime.

For Codex, Claude Code, Qwen Code and Pi: a TaskSpec with `harness: {"kind":
...}`, a tiny repo with a bug as source, the `prefix_merging` builder and a
`command` evaluator running the repo's check. A worker on its own task queue
points its harnesses at an in-thread gateway whose upstream is the agent backend
(vLLM's answer shape, real token ids) that walks the CLI through list, read,
edit, check, answer. Then: the session completed with reward 1 (the fix is in,
graded by the evaluator), every call is recorded with token ids, the traces
cover every call, and stdout, stderr and the CLI's native logs are in S3.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from activities.harnesses import CLI_ADAPTERS
from polar.records import SessionStatus
from polar.storage import Storage, session_prefix
from polar.tasks.spec import TaskSpec
from tests.support.harness_stack import HarnessStack, assign_when_prepared
from tests.system.test_harness_clis import CLI_BUDGET_S, PLAN, PROMPT, make_repo

pytestmark = pytest.mark.slow

# native logs each CLI must leave as artifacts (pi's is its --mode json stdout)
NATIVE_LOGS = {
    "codex": "codex/sessions/",
    "claude_code": "claude/projects/",
    "qwen_code": "qwen/projects/",
}


@pytest.mark.parametrize("kind", ["qwen_code", "pi", "codex", "claude_code"])
async def test_harness_session_fixes_the_bug(
    kind: str, harness_stack: HarnessStack, storage: Storage, tmp_path: Path
) -> None:
    adapter = CLI_ADAPTERS[kind]
    polar, backend = harness_stack.polar, harness_stack.backend
    if adapter.installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip(f"{adapter.package} is not installed: run infra/harnesses/install.sh")
    task = make_repo(tmp_path / "repo")
    task_id = f"hs-{kind}-{uuid.uuid4().hex[:6]}"
    spec = TaskSpec.model_validate(
        {
            "task_id": task_id,
            "instruction": PROMPT,
            "source": {"type": "dir", "path": str(task.workspace)},
            "harness": {"kind": kind},
            "builder": {"name": "prefix_merging"},
            "evaluator": {"kind": "command", "command": task.check},
            "timeouts": {"harness_s": CLI_BUDGET_S, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    backend.reset()
    started = time.monotonic()
    run = await polar.submit(spec)
    session_id = await assign_when_prepared(harness_stack, task_id, task)
    result = await polar.wait(run, timeout_s=CLI_BUDGET_S + 120)
    elapsed = time.monotonic() - started
    (session,) = result.sessions
    assert session.session_id == session_id
    artifacts = storage.list_keys(f"{session_prefix(session_id)}artifacts/")
    print(
        f"{kind}: {session.status} reward={session.reward} in {elapsed:.1f}s "
        f"(stages {session.stage_seconds}), steps={backend.steps()}, "
        f"{session.num_completions} calls, {session.num_traces} traces, "
        f"breaks={session.trace_breaks}, artifacts={len(artifacts)}"
    )

    def output() -> str:
        logs = [k for k in artifacts if k.rsplit("/", 1)[-1].startswith("harness-attempt1.")]
        return "\n".join(f"--- {k}\n{storage.get_bytes(k).decode()[-3000:]}" for k in logs)

    # the session ran to the end, the evaluator (the repo's own check) passed
    assert session.status == SessionStatus.COMPLETED, f"{session.error}\n{output()}"
    assert session.harness_exit_code == 0
    assert session.reward == 1.0, f"{session.evaluation}\n{output()}"
    assert backend.steps() == PLAN, output()

    # every call went through the gateway and is in S3 with its token ids
    records = storage.list_completions(session_id)
    assert len(records) == len(backend.calls) == session.num_completions
    for record in records:
        assert record.status_code == 200 and record.error is None, record.error
        assert record.provider == adapter.api
        assert record.has_token_ids and record.prompt_token_ids and record.response_token_ids
        assert record.response_logprobs is not None
        assert len(record.response_logprobs) == len(record.response_token_ids)
        assert record.task_id == task_id and record.attempt == 1

    # the prefix-merging traces cover every call, scored with the session's reward
    traces = polar.load_traces(session)
    assert session.traces_key and session.traces_key.endswith("prefix_merging.jsonl")
    assert len(traces) == session.num_traces >= 1
    covered = [rid for t in traces for rid in t.provenance.record_ids]
    assert sorted(covered) == sorted(r.record_id for r in records)
    for trace in traces:
        assert trace.reward == 1.0 and trace.status == SessionStatus.COMPLETED
        assert trace.provenance.harness == kind and trace.provenance.builder == "prefix_merging"
        assert sum(trace.loss_mask) > 0
    sampled = sum(len(r.response_token_ids or []) for r in records)
    assert sum(sum(t.loss_mask) for t in traces) == sampled

    # stdout, stderr and the CLI's native logs are session artifacts in S3
    names = {k.removeprefix(f"{session_prefix(session_id)}artifacts/") for k in artifacts}
    assert {"harness-attempt1.stdout", "harness-attempt1.stderr"} <= names, names
    stdout = storage.get_bytes(f"{session_prefix(session_id)}artifacts/harness-attempt1.stdout")
    assert stdout.strip(), "the harness wrote nothing to stdout"
    if kind in NATIVE_LOGS:
        native = [n for n in names if n.startswith(f"harness-attempt1/{NATIVE_LOGS[kind]}")]
        assert native, f"no native logs of {kind} among {sorted(names)}"
    else:  # pi: --mode json, one event per line
        events = [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]
        assert events and all("type" in e for e in events)
    # teardown removed the workspace
    assert not (harness_stack.runtimes / session_id).exists()


@pytest.mark.parametrize("case", ["crash", "timeout"])
async def test_cli_that_crashes_or_times_out_is_still_built_and_evaluated(
    case: str, harness_stack: HarnessStack, storage: Storage, tmp_path: Path
) -> None:
    """A CLI that crashes at start (node refuses its options) or hangs past its budget on its first
    call (the backend never answers in time) ends harness_failed / timeout, and its session
    still builds traces and is evaluated (the bug is still there: reward 0)."""
    polar = harness_stack.polar
    if CLI_ADAPTERS["pi"].installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip("pi is not installed: run infra/harnesses/install.sh")
    task = make_repo(tmp_path / "repo")
    harness: dict[str, Any] = {"kind": "pi"}
    if case == "crash":
        harness["env"] = {"NODE_OPTIONS": "--polar-crash"}
    spec = TaskSpec.model_validate(
        {
            "task_id": f"hs-{case}-{uuid.uuid4().hex[:6]}",
            "instruction": PROMPT,
            "source": {"type": "dir", "path": str(task.workspace)},
            "harness": harness,
            "builder": {"name": "prefix_merging"},
            "evaluator": {"kind": "command", "command": task.check},
            "timeouts": {"harness_s": 4, "heartbeat_s": 10, "max_attempts": 1},
        }
    )
    harness_stack.backend.reset()  # never assigned: calls wait, then fail
    result = await polar.wait(await polar.submit(spec), timeout_s=120)
    (session,) = result.sessions
    expected = SessionStatus.HARNESS_FAILED if case == "crash" else SessionStatus.TIMEOUT
    assert session.status == expected, session.error
    assert session.reward == 0.0 and session.traces_key is not None
    assert {"run", "build", "evaluate", "teardown"} <= set(session.stage_seconds)
    if case == "crash":
        assert session.harness_exit_code == 9  # node: bad option
    prefix = f"{session_prefix(session.session_id)}artifacts/"
    names = {k.removeprefix(prefix) for k in storage.list_keys(prefix)}
    assert {"harness-attempt1.stdout", "harness-attempt1.stderr"} <= names
