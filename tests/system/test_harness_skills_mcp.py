"""The real harness CLIs see a task's Agent Skills and MCP servers as their own.

MCP: each CLI that takes MCP servers (Claude Code, Codex, Qwen Code) is prepared with
the bundled `mcp-vault` task's stdio server (a stdlib Python script) in its own MCP
config, and the scripted backend asks it to call the server's `lookup_code` tool
(whatever name that CLI gives it): the CLI spawns the server, calls the tool, and the
code only the server knows comes back to the model in the next call.

Each CLI (infra/harnesses/) is prepared by its production adapter with a task's
`skills_dir` (the bundled `skill-stamp` task's skills, as the local runtime sees
them) and run, as the runtime runs it (`bash -c` of the launch command), against
the agent backend through an in-thread gateway. The skill's folder is copied where
that CLI reads skills by the launch's own first line, and the CLI's own code puts
the skill's name and description into what it sends the model: the first agent
call's body holds them. The same run without the skill holds neither, so the
check can fail.

In a container (docker), the bundled task's image ships the skill at its
`skills_dir`: the launch's copy line puts it in the harness's folder under the
session's HOME, where an agent that follows it (a scripted one here) scores 1 and
the same agent without the copy 0; on podman (its own user mapping) the copy runs as
the sandbox's user too.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from activities.harnesses import CLI_ADAPTERS, HarnessContext, Launch
from activities.harnesses.skills import with_skills
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, McpServerSpec, RuntimeSpec
from tests.support.agent_backend import AgentBackend, RepoTask, agent_backend_app, shell_call
from tests.support.container_sessions import (
    docker_runtime,
    podman_modes,
    podman_runtime,
    runtime_root,
)
from tests.support.eval_runtimes import grade, prepare_session, run_harness
from tests.support.paths import REPO
from tests.support.scripted_backend import serve_app
from tests.system.test_harness_clis import (
    gateway_for,
    make_repo,
    route_missing,
    run_cli,
    runtime_path,
)

pytestmark = pytest.mark.slow

SKILL_TASK = REPO / "examples" / "harbor" / "skill-stamp"
SKILLS = SKILL_TASK / "environment" / "skills"
SKILL_MARK = "zebra-quartz"  # in the skill's description only
BUDGET_S = 180.0
KINDS = ["claude_code", "codex", "pi", "qwen_code"]
VAULT = REPO / "examples" / "harbor" / "mcp-vault" / "environment" / "mcp" / "vault_server.py"
VAULT_CODE = "VAULT-9FAA7A0944"  # the server's code for project `orion`
DEFERRED = "mcp__vault__lookup_code"  # the tool's name where a CLI defers it


class ScriptedBackend(AgentBackend):
    """An agent backend that answers every agent call with its final text at once."""

    def plan(
        self, step: int, tools: dict[str, dict[str, Any]], messages: list[dict[str, Any]]
    ) -> tuple[str, str | None, dict[str, Any] | None]:
        return "answer", None, None


class VaultPlan:
    """Call the MCP tool named `*lookup_code` once; with `write`, then write the code its
    answer holds to code.txt with the shell tool; then answer. Where the CLI defers MCP
    tools (Claude Code's `ToolSearch` loads one; Qwen Code's `tool_search` shows one and
    its `tool_call` calls it), look the tool up first, as a model would."""

    def __init__(self, write: bool = False) -> None:
        self.write = write
        self.called = self.searched = self.written = False

    def __call__(
        self, step: int, tools: dict[str, dict[str, Any]], messages: list[dict[str, Any]]
    ) -> tuple[str, str | None, dict[str, Any] | None]:
        tool = next((name for name in tools if name.endswith("lookup_code")), None)
        search = next((n for n in ("ToolSearch", "tool_search") if n in tools), None)
        args = {"project": "orion"}
        if self.called:
            codes = re.findall(r"VAULT-[0-9A-F]{10}", json.dumps(messages))
            if not self.write or self.written or not codes:
                return "answer", None, None
            self.written = True  # the latest code: the tool's answer
            return ("write", *shell_call(tools, f"echo {codes[-1]} > code.txt"))
        if tool is not None:
            self.called = True
            return "mcp", tool, args
        if search is not None and not self.searched:
            self.searched = True
            return "search", search, {"query": f"select:{DEFERRED}"}
        if self.searched and "tool_call" in tools:
            self.called = True
            return "mcp", "tool_call", {"name": DEFERRED, "arguments": args}
        return "answer", None, None


class McpBackend(AgentBackend):
    """An agent backend that calls the vault's tool, then answers (`VaultPlan`)."""

    def __init__(self, task: RepoTask, model_dir: Path) -> None:
        super().__init__(task, model_dir)
        self.vault = VaultPlan()

    def plan(
        self, step: int, tools: dict[str, dict[str, Any]], messages: list[dict[str, Any]]
    ) -> tuple[str, str | None, dict[str, Any] | None]:
        return self.vault(step, tools, messages)


@contextmanager
def backend_of(cls: type[AgentBackend], task: RepoTask, model_dir: Path) -> Iterator[Any]:
    handle = cls(task, model_dir)
    with serve_app(agent_backend_app(handle)) as base:
        handle.url = f"{base}/v1"
        yield handle


def run_prepared(
    kind: str,
    spec: HarnessSpec,
    tmp_path: Path,
    base_settings: Settings,
    storage: Storage,
    backend: AgentBackend,
) -> tuple[int, str, str]:
    """`kind`'s CLI, prepared by its adapter from `spec`, run as a runtime runs it: bash."""
    adapter = CLI_ADAPTERS[kind]
    if adapter.installed_version(base_settings.harness_bin_dir) is None:
        pytest.skip(f"{adapter.package} is not installed: run infra/harnesses/install.sh")
    identity = SessionIdentity(f"{kind}-{uuid.uuid4().hex[:12]}", "task-skills-mcp")
    with gateway_for(base_settings, storage, backend.url) as (gateway, settings):
        key = mint_session_key(identity, settings.session_secret)
        if route_missing(gateway, adapter.route, key):
            pytest.skip(f"the gateway has no {adapter.route} yet")
        ctx = HarnessContext(
            spec=spec,
            instruction="Write the release stamp for version 7 into stamp.txt.",
            gateway_url=gateway,
            api_key=key,
            session_id=identity.session_id,
            task_id=identity.task_id,
            bin_dir=settings.harness_bin_dir,
        )
        home = tmp_path / "home"
        launch = adapter.prepare(home, str(backend.task.workspace), ctx)
        env = {"PATH": runtime_path(), "HOME": str(home)} | launch.env
        rc, _, out, err = run_cli(
            ["bash", "-c", launch.command], backend.task.workspace, env, BUDGET_S
        )
    return rc, out, err


def first_agent_body(backend: AgentBackend) -> str:
    assert backend.agent_calls, [c.kind for c in backend.calls]
    return json.dumps(backend.agent_calls[0].request)


@pytest.mark.parametrize("kind", KINDS)
def test_each_cli_offers_the_tasks_skill_to_the_model(
    kind: str, tmp_path: Path, base_settings: Settings, storage: Storage, model_dir: Path
) -> None:
    task = make_repo(tmp_path / "repo")
    seen = {}
    for with_skill in (True, False):
        run_dir = tmp_path / ("with" if with_skill else "without")
        spec = HarnessSpec(kind=kind, skills_dir=str(SKILLS) if with_skill else None)
        with backend_of(ScriptedBackend, task, model_dir) as backend:
            rc, out, err = run_prepared(kind, spec, run_dir, base_settings, storage, backend)
            assert rc == 0, f"{kind}: rc={rc}\n{out[-3000:]}\n{err[-3000:]}"
            seen[with_skill] = first_agent_body(backend)
    assert "stamp-format" in seen[True] and SKILL_MARK in seen[True], seen[True][:4000]
    assert SKILL_MARK not in seen[False]


@pytest.mark.parametrize("kind", ["claude_code", "codex", "qwen_code"])
def test_each_cli_spawns_the_tasks_mcp_server_and_calls_its_tool(
    kind: str, tmp_path: Path, base_settings: Settings, storage: Storage, model_dir: Path
) -> None:
    task = make_repo(tmp_path / "repo")
    vault = McpServerSpec(name="vault", command="python3", args=[str(VAULT)])
    spec = HarnessSpec(kind=kind, mcp_servers=[vault])
    with backend_of(McpBackend, task, model_dir) as backend:
        rc, out, err = run_prepared(kind, spec, tmp_path, base_settings, storage, backend)
    assert rc == 0, f"{kind}: rc={rc}\n{out[-3000:]}\n{err[-3000:]}"
    steps = backend.steps()
    assert steps[-2:] == ["mcp", "answer"], (steps, err[-2000:], out[-1500:])
    final = json.dumps(backend.agent_calls[-1].request["messages"])
    assert VAULT_CODE in final, final[-3000:]
    assert VAULT_CODE not in json.dumps(backend.agent_calls[0].request)


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[Any]:
    yield from docker_runtime(tmp_path / "runtimes")


# an agent that follows the skill: version 3's stamp in SKILL.md, made version 7's
FOLLOW_SKILL = (
    "sed -n 's/^ *ZQ-3\\(:sealed\\)$/ZQ-7\\1/p' "
    '"$HOME/.agents/skills/stamp-format/SKILL.md" > stamp.txt'
)


async def test_the_images_skills_reach_the_harness_folder_in_its_container(
    runtime: Any,
) -> None:
    ensure_images(SKILL_TASK)
    (spec,) = load_harbor_tasks(SKILL_TASK, harness=HarnessSpec(kind="pi"))
    assert spec.harness.skills_dir == "/opt/task-skills"
    rewards = {}
    for copied in (True, False):
        handle = await prepare_session(runtime, spec.runtime, None, f"skills-{copied}")
        try:
            launch = Launch(command=FOLLOW_SKILL, env={})
            if copied:
                folder = CLI_ADAPTERS["pi"].skills_folder(str(runtime.home(handle)))
                launch = with_skills(launch, spec.harness.skills_dir, folder)
            await run_harness(runtime, handle, launch.command)
            home = runtime.home(handle)
            assert (home / ".agents/skills/stamp-format/SKILL.md").is_file() == copied
            evaluation = await grade(
                runtime, spec.runtime, None, handle, spec.evaluator, timeout_s=300
            )
            rewards[copied] = evaluation.reward
        finally:
            await runtime.teardown(handle)
    assert rewards == {True: 1.0, False: 0.0}


@pytest.mark.parametrize("mode", podman_modes())
async def test_the_copy_runs_as_the_sandbox_user_on_podman(mode: str, podman_image: str) -> None:
    """Podman maps the sandbox's user differently (rootless): the copy into its HOME, by
    the launch's first line, works there too (the skills dir made in the container first,
    as an image would ship it)."""
    skill = (SKILLS / "stamp-format" / "SKILL.md").read_text()
    made = "/tmp/task-skills/stamp-format"
    ship = f"mkdir -p {made} && cat > {made}/SKILL.md <<'EOF'\n{skill}EOF"
    with runtime_root("polar-skills-") as root:
        for runtime in podman_runtime(root, mode):
            spec = RuntimeSpec(kind="podman", image=podman_image)
            handle = await prepare_session(runtime, spec, None, f"skills-podman-{mode}")
            try:
                folder = CLI_ADAPTERS["codex"].skills_folder(str(runtime.home(handle)))
                launch = Launch(command=FOLLOW_SKILL, env={})
                launch = with_skills(launch, "/tmp/task-skills", folder)
                await run_harness(runtime, handle, f"{ship}\n{launch.command}")
                home = runtime.home(handle)
                assert (home / ".agents/skills/stamp-format/SKILL.md").read_text() == skill
                files, _ = await runtime.read_files(handle, handle.workdir, ["stamp.txt"], 100)
                assert files.get("stamp.txt") == b"ZQ-7:sealed\n", files
            finally:
                await runtime.teardown(handle)
