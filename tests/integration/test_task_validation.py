"""A TaskSpec that is wrong fails fast, with a message that says what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment
from typer.testing import CliRunner

from activities.kind_configs import InvalidKindConfig
from activities.postrun_activities import PostrunActivities
from activities.task_kinds import check_task_kinds
from app.cli import app
from polar.builders import UnknownBuilder, check_builder
from polar.client.sdk import PolarClient
from polar.contracts import BuildRequest
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import BuilderSpec, TaskSpec
from tests.support.polling import wait_for


async def test_invalid_task_spec_fails_workflow_without_retry(polar: PolarClient) -> None:
    bad = {"task_id": "bad task!", "num_sessions": 0, "harness": {"kind": "nope"}}
    handle = await polar.client.start_workflow(
        "RolloutTask", bad, id=f"bad-{uuid.uuid4().hex[:6]}", task_queue=polar.settings.task_queue
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidTaskSpec"
    assert cause.non_retryable
    for field in ("task_id", "num_sessions"):
        assert field in cause.message
    history = await handle.fetch_history()
    # failed on its first workflow task: no activity, no child, no retry
    assert not [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]


async def test_unknown_harness_kind_started_directly_fails_at_the_run_stage(
    polar: PolarClient,
) -> None:
    """The kind is a name the worker's registry checks (activities/harnesses): a task started
    past `polar submit` with a kind no worker has fails its session at the first stage that
    reads the harness, at once and not retried, naming the known kinds."""
    workflow_id = f"bad-{uuid.uuid4().hex[:6]}"
    await polar.client.start_workflow(
        "RolloutTask",
        BASE | {"harness": {"kind": "nope"}},
        id=workflow_id,
        task_queue=polar.settings.task_queue,
    )
    result = await polar.wait(workflow_id, timeout_s=120)
    (session,) = result.sessions
    assert session.status == "error", session
    error = session.error or ""
    assert "harness.kind: unknown harness kind 'nope' (known: claude_code, codex, command" in error


def test_unknown_builder_and_missing_evaluator_command_are_rejected() -> None:
    # builders are checked outside the spec model (at submit, in the build activity), so a
    # registry change never breaks a workflow decoding an old history's input
    spec = TaskSpec.model_validate(
        {"task_id": "t", "harness": {"command": "true"}, "builder": {"name": "magic"}}
    )
    with pytest.raises(UnknownBuilder, match="builder.name: unknown builder 'magic'"):
        check_builder(spec.builder)
    bad_config = BuilderSpec(name="prefix_merging", config={"reward": "sum"})
    with pytest.raises(ValueError, match="builder.config: (?s:.*)reward"):
        check_builder(bad_config)
    # so is an evaluator's config, by the kind's own model (activities/evaluators/<kind>/)
    no_command = TaskSpec.model_validate(
        {"task_id": "t", "harness": {"command": "true"}, "evaluator": {"kind": "command"}}
    )
    with pytest.raises(InvalidKindConfig, match="evaluator.command: Field required"):
        check_task_kinds(no_command)


async def test_submit_validates_before_starting(polar: PolarClient) -> None:
    with pytest.raises(ValueError, match="unknown_field"):
        await polar.submit({"task_id": "t", "harness": {"command": "true"}, "unknown_field": 1})


async def test_temporal_cli_start_with_input_file_works_like_submit(
    polar: PolarClient, tmp_path: Path
) -> None:
    """`temporal workflow start --type RolloutTask --input-file task.json` works as submit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    task_file = tmp_path / "task.json"
    task_file.write_text(
        json.dumps(
            {
                "task_id": "cli-start",
                "num_sessions": 2,
                "source": {"type": "dir", "path": str(repo)},
                "harness": {"kind": "command", "command": "echo hi > out.txt"},
                "evaluator": {"kind": "command", "command": "test -f out.txt"},
            }
        )
    )
    temporal = Path(sys.executable).parent / "temporal"
    workflow_id = f"cli-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(
        [
            str(temporal),
            "workflow",
            "start",
            "--type",
            "RolloutTask",
            "--task-queue",
            polar.settings.task_queue,
            "--input-file",
            str(task_file),
            "--workflow-id",
            workflow_id,
            "--address",
            polar.settings.temporal_address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = await polar.wait(workflow_id, timeout_s=120)
    assert result.task_id == "cli-start"
    assert [s.reward for s in result.sessions] == [1.0, 1.0]
    # the sessions are filterable by the search attributes the Web UI shows
    query = "PolarTaskId = 'cli-start' AND PolarStatus = 'completed' AND PolarReward = 1.0"
    expected = sorted(s.session_id for s in result.sessions)

    async def listed() -> bool:  # visibility is eventually consistent
        return sorted([w.id async for w in polar.client.list_workflows(query)]) == expected

    await wait_for(listed, 10, f"{expected} listed by {query!r}")


# --------------------------------------------------------------------------- injections
# each: the spec fragment, the field the error names, a phrase of its message

BASE: dict[str, Any] = {"task_id": "t", "harness": {"command": "true"}}
INJECTIONS: dict[str, tuple[dict[str, Any], str, str]] = {
    "source-root": ({"source": {"type": "dir", "path": "/"}}, "source.dir.path", "root directory"),
    "source-etc": ({"source": {"type": "dir", "path": "/etc"}}, "source.dir.path", "/etc"),
    "source-dotdot": (
        {"source": {"type": "dir", "path": "/tmp/../proc/self"}},
        "source.dir.path",
        "/proc",
    ),
    "source-var-lib": (
        {"source": {"type": "dir", "path": "//var/lib/docker"}},
        "source.dir.path",
        "/var/lib",
    ),
    "upload-shadow": (
        {"runtime": {"prepare": [{"type": "upload", "src": "/etc/shadow", "dest": "s"}]}},
        "runtime.prepare.0.upload.src",
        "system directory /etc",
    ),
    "upload-root-home": (
        {"runtime": {"prepare": [{"type": "upload", "src": "/root/.ssh", "dest": "s"}]}},
        "runtime.prepare.0.upload.src",
        "/root",
    ),
    "ref-option": (
        {
            "source": {
                "type": "git",
                "url": "https://example.com/r.git",
                "ref": "--pathspec-from-file=/etc/passwd",
            }
        },
        "source.git.ref",
        "starts with '-'",
    ),
    "url-upload-pack": (
        {"source": {"type": "git", "url": "--upload-pack=touch /tmp/pwned"}},
        "source.git.url",
        "starts with '-'",
    ),
    "url-ext": (
        {"source": {"type": "git", "url": "ext::sh -c touch% /tmp/pwned"}},
        "source.git.url",
        "remote helper",
    ),
    "url-fd": ({"source": {"type": "git", "url": "fd::3"}}, "source.git.url", "remote helper"),
    "url-file": (
        {"source": {"type": "git", "url": "file:///srv/repo"}},
        "source.git.url",
        "file://",
    ),
    "url-local-etc": ({"source": {"type": "git", "url": "/etc"}}, "source.git.url", "/etc"),
    "harness-1e300": ({"timeouts": {"harness_s": 1e300}}, "timeouts.harness_s", "604800"),
    "harness-inf": ({"timeouts": {"harness_s": "Infinity"}}, "timeouts.harness_s", "finite"),
    "prepare-nan": ({"timeouts": {"prepare_s": "NaN"}}, "timeouts.prepare_s", "finite"),
    "heartbeat-1e-9": ({"timeouts": {"heartbeat_s": 1e-9}}, "timeouts.heartbeat_s", "1"),
    "action-timeout": (
        {"runtime": {"prepare": [{"type": "run", "command": "x", "timeout_s": 1e300}]}},
        "runtime.prepare.0.run.timeout_s",
        "604800",
    ),
    "wall-clock-inf": ({"runtime": {"wall_clock_s": "Infinity"}}, "runtime.wall_clock_s", "finite"),
    "cpus-1e-9": ({"runtime": {"cpus": 1e-9}}, "runtime.cpus", "0.1"),
    "memory-0": ({"runtime": {"memory": "0"}}, "runtime.memory", "16m"),
    "disk-huge": ({"runtime": {"disk": "99999999999g"}}, "runtime.disk", "16m"),
}


@pytest.mark.parametrize("name", sorted(INJECTIONS))
def test_injections_are_refused_naming_the_field(name: str) -> None:
    extra, field, phrase = INJECTIONS[name]
    with pytest.raises(ValidationError) as info:
        TaskSpec.model_validate(BASE | extra)
    errors = {".".join(map(str, e["loc"])): e["msg"] for e in info.value.errors()}
    assert list(errors) == [field], errors
    assert phrase in errors[field], errors


def test_a_base_commit_git_reads_as_an_option_is_refused_by_the_kinds_model() -> None:
    """The swebench config is the kind's own (activities/evaluators/swebench/config.py):
    its model refuses the injection where the registries are (submit, the worker)."""
    evaluator = {
        "kind": "swebench",
        "swebench": {"instance_id": "i", "base_commit": "--output=/tmp/x", "fail_to_pass": ["t"]},
    }
    task = TaskSpec.model_validate(BASE | {"evaluator": evaluator})
    with pytest.raises(
        InvalidKindConfig, match=r"evaluator\.swebench\.base_commit: .*starts with '-'"
    ):
        check_task_kinds(task)


def test_allowed_neighbours_of_the_injections() -> None:
    """What the rules keep: local and remote git, paths next to system dirs, the bounds."""
    for extra in (
        {"source": {"type": "dir", "path": "/tmp/etc"}},
        {"source": {"type": "dir", "path": "/etcetera"}},
        {"source": {"type": "dir", "path": "examples/demo/repo"}},
        {"source": {"type": "git", "url": "/tmp/repo", "ref": "v1.0"}},
        {"source": {"type": "git", "url": "git@example.com:a/b.git", "ref": "feature/x-1"}},
        {"source": {"type": "git", "url": "https://example.com/a.git", "ref": "0123abcd"}},
        {"runtime": {"prepare": [{"type": "upload", "src": "/tmp/f", "dest": "/etc/f"}]}},
        {"timeouts": {"harness_s": 7 * 86400, "heartbeat_s": 1}},
        {"runtime": {"cpus": 0.1, "memory": "16m", "disk": "1024g", "wall_clock_s": 604800}},
        {"runtime": {"cpus": None, "memory": None, "pids": None, "disk": None}},
    ):
        TaskSpec.model_validate(BASE | extra)


async def test_rollout_task_started_directly_with_an_injection_fails_fast(
    polar: PolarClient,
) -> None:
    bad = BASE | INJECTIONS["upload-shadow"][0]
    handle = await polar.client.start_workflow(
        "RolloutTask", bad, id=f"bad-{uuid.uuid4().hex[:6]}", task_queue=polar.settings.task_queue
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == "InvalidTaskSpec"
    assert "runtime.prepare.0.upload.src: Value error, upload src '/etc/shadow'" in cause.message


async def test_session_started_directly_with_an_injection_fails_fast(polar: PolarClient) -> None:
    task = BASE | INJECTIONS["ref-option"][0]
    handle = await polar.client.start_workflow(
        "Session",
        {"session_id": "s-inject", "index": 0, "task": task},
        id=f"bad-{uuid.uuid4().hex[:6]}",
        task_queue=polar.settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == "InvalidSessionSpec"
    assert "task.source.git.ref" in cause.message and "starts with '-'" in cause.message


async def test_submit_refuses_injections_and_unresolvable_builders(polar: PolarClient) -> None:
    with pytest.raises(ValidationError, match="source.dir.path"):
        await polar.submit(BASE | INJECTIONS["source-etc"][0])
    spec = BASE | {"builder": {"name": "no_such_module:build"}}
    workflow_id = f"nobuilder-{uuid.uuid4().hex[:6]}"
    with pytest.raises(UnknownBuilder, match="builder.name: cannot import builder"):
        await polar.submit(spec, workflow_id=workflow_id)
    with pytest.raises(UnknownBuilder, match="has no attribute 'nope'"):
        await polar.submit(spec | {"builder": {"name": "polar.builders:nope"}})
    with pytest.raises(RPCError, match="not found"):  # nothing was started
        await polar.client.get_workflow_handle(workflow_id).describe()


cli = CliRunner()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (INJECTIONS["upload-shadow"][0], "runtime.prepare.0.upload.src"),
        (INJECTIONS["url-ext"][0], "source.git.url"),
        ({"builder": {"name": "no_such_module:build"}}, "builder.name"),
    ],
)
def test_cli_submit_refuses_with_the_field(
    extra: dict[str, Any], field: str, tmp_path: Path
) -> None:
    file = tmp_path / "task.json"
    file.write_text(json.dumps(BASE | extra))
    result = cli.invoke(app, ["submit", str(file), "--no-wait"])
    assert result.exit_code == 2, result.output
    assert "invalid TaskSpec in" in result.output and field in result.output
    assert "Traceback" not in result.output


async def test_build_activity_refuses_an_unresolvable_builder_without_retry(
    storage: Storage,
) -> None:
    acts = PostrunActivities(Settings(), storage)
    request = BuildRequest(
        session_id="s-nobuilder",
        task_id="t",
        harness="command",
        builder=BuilderSpec(name="no_such_module:build"),
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.build_trajectory, request)
    assert info.value.type == "InvalidBuilder" and info.value.non_retryable
    assert "cannot import builder 'no_such_module:build'" in info.value.message
