"""The harness adapters without running a CLI: spec validation, configs in a fresh HOME, logs."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.harnesses import (
    ADAPTERS,
    CLI_ADAPTERS,
    KEY_ENV,
    AgentCliConfig,
    HarnessContext,
    HarnessNotInstalled,
    InvalidKindConfig,
    UnknownHarness,
    check_harness,
    get_adapter,
)
from activities.harnesses.command import CommandConfig
from activities.run_activities import RunActivities
from activities.task_kinds import check_task_kinds
from polar.contracts import HarnessRequest, RuntimeHandle
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import HarnessSpec, TaskSpec
from tests.support.paths import REPO

GATEWAY = "http://127.0.0.1:8400/"
KEY = "pk-session-key"


def _ctx(kind: str, bin_dir: Path | None, **spec: object) -> HarnessContext:
    return HarnessContext(
        spec=HarnessSpec.model_validate({"kind": kind, **spec}),
        instruction="Fix the bug in calc.py.",
        gateway_url=GATEWAY,
        api_key=KEY,
        session_id="s-1",
        task_id="t-1",
        bin_dir=bin_dir,
    )


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A bin dir with a stand-in for every CLI."""
    path = tmp_path / "bin"
    path.mkdir()
    for adapter in CLI_ADAPTERS.values():
        (path / adapter.binary).write_text("#!/bin/sh\n")
    return path


def test_a_cli_kind_needs_the_instruction_and_command_does_not() -> None:
    """Issue 37: a CLI harness without an instruction is refused by its kind's model (at
    submit: check_task_kinds), not at the run stage; kind `command` runs without one."""
    for kind in CLI_ADAPTERS:
        for blank in ("", " \n"):
            with pytest.raises(
                InvalidKindConfig, match=f"instruction: harness kind '{kind}' runs its CLI"
            ):
                check_harness(HarnessSpec(kind=kind), blank)
        task = TaskSpec.model_validate({"task_id": "t", "harness": {"kind": kind}})
        with pytest.raises(InvalidKindConfig, match="give a non-empty 'instruction'"):
            check_task_kinds(task)
        check_harness(HarnessSpec(kind=kind), "Fix the bug.")
        config = check_harness(HarnessSpec(kind=kind))  # not asked
        assert isinstance(config, AgentCliConfig) and config.model_dump() == {}
    command = TaskSpec.model_validate(
        {"task_id": "t", "harness": {"kind": "command", "command": "true"}}
    )
    assert check_task_kinds(command).harness == command.harness


async def test_the_run_activity_refuses_a_cli_without_instruction_first(tmp_path: Path) -> None:
    """The worker's own check (a task started without `polar submit`): non-retryable
    InvalidTaskSpec before any runtime is touched."""
    settings = Settings(data_dir=str(tmp_path))
    acts = RunActivities(settings, Storage(settings))
    request = HarnessRequest(
        session_id="s-codex",
        task_id="t",
        runtime=RuntimeHandle(kind="local", session_id="s-codex", workdir="", host=""),
        harness=HarnessSpec(kind="codex"),
        instruction=" ",
        budget_s=60,
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.run_harness, request)
    assert info.value.non_retryable and info.value.type == "InvalidTaskSpec"
    assert "instruction: harness kind 'codex'" in info.value.message
    assert not (tmp_path / "runtimes").exists()


def test_harness_spec_kinds_and_command_rule() -> None:
    """The kinds are the registry's; each kind's model holds its rule about `command`."""
    assert set(ADAPTERS) == {"command", "codex", "claude_code", "qwen_code", "pi"}
    for kind in CLI_ADAPTERS:
        config = check_harness(HarnessSpec(kind=kind))  # the shared fields only (Pi's: no MCP)
        assert isinstance(config, AgentCliConfig) and config.model_dump() == {}
    assert check_harness(HarnessSpec(kind="command", command="true")) == CommandConfig(
        command="true"
    )
    for blank in ({}, {"command": " "}):
        with pytest.raises(
            InvalidKindConfig, match="harness.command: .*kind 'command' needs a non-empty"
        ):
            check_harness(HarnessSpec.model_validate({"kind": "command", **blank}))
    with pytest.raises(InvalidKindConfig, match="'command' is only for kind 'command'"):
        check_harness(HarnessSpec(kind="codex", command="codex exec"))
    # the core holds the kind as a name: the registry refuses one it does not know
    spec = TaskSpec.model_validate({"task_id": "t", "harness": {"kind": "aider"}})
    with pytest.raises(UnknownHarness, match="harness.kind: unknown harness kind 'aider'"):
        check_harness(spec.harness)
    with pytest.raises(ValueError, match="unknown harness kind"):
        get_adapter("aider")
    with pytest.raises(ValidationError, match="unknown field 'extra'"):
        HarnessSpec.model_validate({"kind": "pi", "extra": {}})


def test_default_bin_dir_is_the_pinned_install(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = REPO
    assert Settings().harness_bin_dir == repo / "infra" / "harnesses" / "node_modules" / ".bin"
    monkeypatch.setenv("POLAR_HARNESS_BIN_DIR", "/opt/clis")
    assert Settings().harness_bin_dir == Path("/opt/clis")


def test_command_adapter_env_and_args(tmp_path: Path) -> None:
    ctx = _ctx("command", None, command="python agent.py", args=["--n", "a b"], env={"X": "1"})
    launch = get_adapter("command").prepare(tmp_path, str(tmp_path), ctx)
    assert launch.command == "python agent.py --n 'a b'"
    env = launch.env
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8400/v1"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8400"
    assert env["OPENAI_API_KEY"] == env[KEY_ENV] == KEY
    assert env["POLAR_INSTRUCTION"] == "Fix the bug in calc.py." and env["X"] == "1"
    assert get_adapter("command").native_logs(tmp_path) == []


def test_codex_config(tmp_path: Path, bin_dir: Path) -> None:
    home = tmp_path / "home"
    launch = get_adapter("codex").prepare(home, "/work", _ctx("codex", bin_dir, args=["--json"]))
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert config["model"] == "policy" and config["model_provider"] == "polar"
    assert config["approval_policy"] == "never" and config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False}
    assert config["features"] == {"plugins": False, "apps": False}
    provider = config["model_providers"]["polar"]
    assert provider["base_url"] == "http://127.0.0.1:8400/v1"
    assert provider["env_key"] == KEY_ENV and provider["wire_api"] == "responses"
    assert launch.env[KEY_ENV] == KEY and launch.env["CODEX_HOME"] == f"{home}/.codex"
    assert KEY not in (home / ".codex" / "config.toml").read_text()  # the key stays in the env
    assert launch.argv == [
        str(bin_dir / "codex"),
        "exec",
        "--skip-git-repo-check",
        "--cd",
        "/work",
        "Fix the bug in calc.py.",
        "--json",
    ]
    assert shlex.split(launch.command) == launch.argv


def test_claude_code_env(tmp_path: Path, bin_dir: Path) -> None:
    launch = get_adapter("claude_code").prepare(tmp_path, "/work", _ctx("claude_code", bin_dir))
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8400"  # no /v1
    assert env["ANTHROPIC_API_KEY"] == KEY and env["ANTHROPIC_MODEL"] == "policy"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["DISABLE_TELEMETRY"] == env["DISABLE_AUTOUPDATER"] == "1"
    assert launch.argv and launch.argv[1:3] == ["-p", "Fix the bug in calc.py."]
    assert "--dangerously-skip-permissions" in launch.argv


def test_qwen_code_settings(tmp_path: Path, bin_dir: Path) -> None:
    launch = get_adapter("qwen_code").prepare(tmp_path, "/work", _ctx("qwen_code", bin_dir))
    settings = json.loads((tmp_path / ".qwen" / "settings.json").read_text())
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    assert settings["memory"]["enableManagedAutoMemory"] is False
    assert launch.env["OPENAI_BASE_URL"] == "http://127.0.0.1:8400/v1"
    assert launch.env["OPENAI_API_KEY"] == KEY
    assert launch.argv and "--yolo" in launch.argv and "openai" in launch.argv


def test_pi_models_json(tmp_path: Path, bin_dir: Path) -> None:
    launch = get_adapter("pi").prepare(tmp_path, "/work", _ctx("pi", bin_dir, env={"A": "b"}))
    models = json.loads((tmp_path / ".pi" / "agent" / "models.json").read_text())
    provider = models["providers"]["polar"]
    assert provider["baseUrl"] == "http://127.0.0.1:8400/v1"
    assert provider["api"] == "openai-completions" and provider["apiKey"] == KEY_ENV
    assert provider["models"] == [{"id": "policy"}]
    assert launch.env["PI_OFFLINE"] == "1" and launch.env["A"] == "b"
    assert launch.argv and launch.argv[-4:] == ["--mode", "json", "-p", "Fix the bug in calc.py."]


def test_home_in_runtime_and_bin_dir_none(tmp_path: Path) -> None:
    ctx = _ctx("pi", None)
    ctx = HarnessContext(**{**ctx.__dict__, "home_in_runtime": "/home/agent"})
    launch = get_adapter("pi").prepare(tmp_path, "/workspace", ctx)
    assert launch.argv and launch.argv[0] == "pi"  # from the runtime's PATH
    assert launch.env["HOME"] == "/home/agent"
    assert launch.env["PI_CODING_AGENT_DIR"] == "/home/agent/.pi/agent"
    assert (tmp_path / ".pi" / "agent" / "models.json").exists()  # written on the worker side


def test_missing_cli_and_empty_instruction(tmp_path: Path) -> None:
    with pytest.raises(HarnessNotInstalled, match="POLAR_HARNESS_BIN_DIR"):
        get_adapter("codex").prepare(tmp_path, "/w", _ctx("codex", tmp_path / "nothing"))
    ctx = HarnessContext(**{**_ctx("qwen_code", None).__dict__, "instruction": "  "})
    with pytest.raises(ValueError, match="non-empty task instruction"):
        get_adapter("qwen_code").prepare(tmp_path, "/w", ctx)


def test_native_logs_are_named_by_their_place_in_home(tmp_path: Path) -> None:
    rollout = tmp_path / ".codex" / "sessions" / "2026" / "11" / "29" / "rollout-1.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text("{}\n")
    (tmp_path / ".codex" / "config.toml").write_text("")
    chat = tmp_path / ".claude" / "projects" / "-w" / "abc.jsonl"
    chat.parent.mkdir(parents=True)
    chat.write_text("{}\n")
    assert get_adapter("codex").native_logs(tmp_path) == [
        ("codex/sessions/2026/11/29/rollout-1.jsonl", rollout)
    ]
    assert get_adapter("claude_code").native_logs(tmp_path) == [
        ("claude/projects/-w/abc.jsonl", chat)
    ]
    assert get_adapter("pi").native_logs(tmp_path) == []
