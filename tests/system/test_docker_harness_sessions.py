"""The four harness CLIs as Docker sessions graded by the SWE-bench-style evaluator.

For Codex, Claude Code, Qwen Code and Pi: a TaskSpec made from a bundled SWE
task (`intervals`, its repository at the base commit) with runtime `{"kind":
"docker", "image": polar/harness:node20}` (the CLIs on the image's PATH), the
`swebench` evaluator and the `prefix_merging` builder. The harness stack
(tests/support/harness_stack.py) drives the CLI through an in-thread gateway
with the agent backend (real token ids from the tiny model's tokenizer), whose
plan reads the file and edits it with the task's gold fix, or its wrong fix.

Every CLI runs the gold fix (resolved, reward 1) and the wrong fix (not
resolved, reward 0, the FAIL_TO_PASS tests named): 8 sessions of 5-25 s
each, about 80 s with the stack on 2 cores. Each session also checks the
evaluator prewarm: its fresh runtime was prepared while the harness ran,
used by `evaluate`, and torn down.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import docker
import pytest

from activities.harnesses import CLI_ADAPTERS
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key, session_prefix
from polar.tasks.swe import SweInstance, instance_to_task
from tests.support.harness_stack import HarnessStack
from tests.support.histories import activity_order
from tests.support.swe_tasks import bundled_fix
from tests.system.test_harness_clis import CLI_BUDGET_S, PLAN

pytestmark = pytest.mark.slow

INSTANCE = "polar-tasks__intervals-1"
CHECK = "python -m pytest -q -p no:cacheprovider tests"
CASES = [(k, v) for k in ("pi", "codex", "claude_code", "qwen_code") for v in ("gold", "wrong")]


@pytest.mark.parametrize(("kind", "variant"), CASES, ids=[f"{k}-{v}" for k, v in CASES])
async def test_docker_harness_session_graded_by_swebench(
    kind: str,
    variant: str,
    harness_stack: HarnessStack,
    harness_image: str,
    storage: Storage,
    swe_dir: Path,
    instances: dict[str, SweInstance],
) -> None:
    adapter = CLI_ADAPTERS[kind]
    polar, backend = harness_stack.polar, harness_stack.backend
    if adapter.installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip(f"{adapter.package} is not installed: run infra/harnesses/install.sh")
    inst = instances[INSTANCE]
    task_id = f"dh-{kind}-{variant}-{uuid.uuid4().hex[:6]}"
    spec = instance_to_task(
        inst,
        harness={"kind": kind},
        source_root=swe_dir / "repos",
        runtime={"kind": "docker", "image": harness_image},
        task_id=task_id,
        builder={"name": "prefix_merging"},
        timeouts={
            "harness_s": CLI_BUDGET_S,
            "evaluate_s": 180,
            "heartbeat_s": 20,
            "max_attempts": 1,
        },
    )
    backend.reset()  # the workspace is /workspace in every container: known before submitting
    backend.assign(bundled_fix("intervals", variant, Path("/workspace"), CHECK))
    started = time.monotonic()
    result = await polar.wait(await polar.submit(spec), timeout_s=CLI_BUDGET_S + 300)
    elapsed = time.monotonic() - started
    (session,) = result.sessions
    sid = session.session_id
    artifacts = storage.list_keys(f"{session_prefix(sid)}artifacts/")
    print(
        f"docker {kind} {variant}: {session.status} reward={session.reward} in {elapsed:.1f}s "
        f"(stages {session.stage_seconds}), steps={backend.steps()}, "
        f"{session.num_completions} calls, {session.num_traces} traces"
    )

    def output() -> str:
        logs = [k for k in artifacts if k.rsplit("/", 1)[-1].startswith("harness-attempt1.")]
        return "\n".join(f"--- {k}\n{storage.get_bytes(k).decode()[-3000:]}" for k in logs)

    # the CLI ran its plan inside the container and the evaluator graded the patch
    assert session.status == SessionStatus.COMPLETED, f"{session.error}\n{output()}"
    assert session.harness_exit_code == 0, output()
    assert backend.steps() == PLAN, output()
    report = json.loads(storage.get_bytes(artifact_key(sid, "swebench-report.json")))
    assert report["patch_files"] == ["intervals/core.py"], report
    if variant == "gold":
        assert session.reward == 1.0 and report["resolved"], f"{session.evaluation}\n{output()}"
        assert report["FAIL_TO_PASS"]["success"] == inst.FAIL_TO_PASS
    else:
        assert session.reward == 0.0 and not report["resolved"], session.evaluation
        assert report["FAIL_TO_PASS"]["failure"] == inst.FAIL_TO_PASS
        assert session.evaluation and all(t in session.evaluation for t in inst.FAIL_TO_PASS)
    assert report["PASS_TO_PASS"]["success"] == inst.PASS_TO_PASS

    # every call went through the gateway and is in S3 with its token ids
    records = storage.list_completions(sid)
    assert len(records) == len(backend.calls) == session.num_completions > 0
    for record in records:
        assert record.status_code == 200 and record.error is None, record.error
        assert record.provider == adapter.api
        assert record.has_token_ids and record.prompt_token_ids and record.response_token_ids
        assert record.task_id == task_id and record.attempt == 1

    # the prefix-merging traces cover every call and carry the session's reward
    traces = polar.load_traces(session)
    assert session.traces_key and session.traces_key.endswith("prefix_merging.jsonl")
    assert len(traces) == session.num_traces >= 1
    covered = [rid for t in traces for rid in t.provenance.record_ids]
    assert sorted(covered) == sorted(r.record_id for r in records)
    for trace in traces:
        assert trace.reward == session.reward and trace.provenance.builder == "prefix_merging"
    sampled = sum(len(r.response_token_ids or []) for r in records)
    assert sum(sum(t.loss_mask) for t in traces) == sampled

    # evaluator prewarm: its runtime was ready before the harness ended, and was used
    order = await activity_order(harness_stack.polar.client, sid)
    assert order.index(("scheduled", "prepare_eval_runtime")) < order.index(
        ("completed", "run_harness")
    )
    assert order.index(("completed", "prepare_eval_runtime")) < order.index(
        ("completed", "run_harness")
    ), order
    assert report["eval_runtime"] == "prewarmed"
    assert [a for e, a in order if e == "scheduled"].count("teardown") == 2  # both runtimes

    # teardown: no container of the session or of its evaluator is left, nor their dirs
    client = docker.from_env()
    left = [
        c.name
        # another test's container may go between the listing and its inspection
        for c in client.containers.list(
            all=True, filters={"label": "polar.session"}, ignore_removed=True
        )
        if c.labels.get("polar.session") in (sid, f"{sid}-eval")
    ]
    assert not left, left
    assert not (harness_stack.runtimes / sid).exists()
    assert not (harness_stack.runtimes / f"{sid}-eval").exists()
