"""Real sealed Codex sessions on Harbor tasks with skills and a stdio MCP server, graded
by their test.sh, on docker and on podman.

The bundled `skill-stamp` task ships an Agent Skill in its image at its `skills_dir`;
loaded with Codex, the launch's first line copies it into `~/.agents/skills` inside the
sealed container, and Codex names it to the model: the scripted backend writes the stamp
only when the skill's text is in what Codex sent, so the session scores 1 only when
Codex saw the skill in its container.

The bundled `mcp-vault` task ships a tiny stdlib MCP server in its image and names it in
`[[environment.mcp_servers]]`. Loaded with the Codex harness, its environment built
offline on the harness image (the image map), the session runs Codex in the sealed
container: Codex spawns the server there from the config.toml its adapter wrote, the
scripted backend (through the gateway, the session's only door) has it call the
server's `lookup_code` tool, reads the code from the tool's answer in the next prompt,
and has it written to code.txt. The verifier scores 1 only for that code, which only
the server in that container gave.
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
from polar.storage import Storage
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, TaskSpec, Timeouts
from tests.support.agent_backend import RepoTask, shell_call
from tests.support.harness_stack import HarnessStack
from tests.support.paths import REPO
from tests.system.test_harness_clis import CLI_BUDGET_S
from tests.system.test_harness_skills_mcp import SKILL_MARK, VAULT_CODE, VaultPlan

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor" / "mcp-vault"
SKILL_TASK = REPO / "examples" / "harbor" / "skill-stamp"


def codex_spec(task: Path, harness_image: str, name: str, kind: str = "docker") -> TaskSpec:
    """The task loaded with Codex on the harness image (its environment built offline, and
    put in podman's store for a podman session), on runtime `kind`."""
    image_map = {"polar/runtime:py311": harness_image}
    (built,) = ensure_images(task, image_map=image_map)
    if kind == "podman":
        from activities.runtimes.kinds.podman import load_from_docker

        load_from_docker(built.image)
    (spec,) = load_harbor_tasks(task, harness=HarnessSpec(kind="codex"), image_map=image_map)
    return spec.model_copy(
        update={
            "runtime": spec.runtime.model_copy(update={"kind": kind}),
            "task_id": f"hb-{name}-{kind}-{uuid.uuid4().hex[:6]}",
            "timeouts": Timeouts(
                harness_s=CLI_BUDGET_S, evaluate_s=300, heartbeat_s=20, max_attempts=1
            ),
        }
    )


class StampPlan:
    """Write the stamp the skill describes when the skill's text reached the model; answer."""

    def __init__(self) -> None:
        self.saw_skill = False

    def __call__(
        self, step: int, tools: dict[str, dict[str, Any]], messages: list[dict[str, Any]]
    ) -> tuple[str, str | None, dict[str, Any] | None]:
        self.saw_skill = self.saw_skill or SKILL_MARK in json.dumps(messages)
        if step == 0 and self.saw_skill:
            return ("write", *shell_call(tools, "echo ZQ-7:sealed > stamp.txt"))
        return "answer", None, None


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_codex_sees_the_images_skill_in_its_sealed_container(
    kind: str,
    harness_stack: HarnessStack,
    harness_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    polar, backend = harness_stack.polar, harness_stack.backend
    if CLI_ADAPTERS["codex"].installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip("@openai/codex is not installed: run infra/harnesses/install.sh")
    spec = codex_spec(SKILL_TASK, harness_image, "skill", kind)
    assert spec.harness.skills_dir == "/opt/task-skills"
    plan = StampPlan()
    monkeypatch.setattr(backend, "plan", plan)
    backend.reset()
    backend.assign(RepoTask(Path("/workspace"), "stamp.txt", "", "", "true"))
    result = await polar.wait(await polar.submit(spec), timeout_s=CLI_BUDGET_S + 400)
    (session,) = result.sessions
    print(f"harbor codex skill: {session.status} reward={session.reward}, {backend.steps()}")
    assert session.status == SessionStatus.COMPLETED, session.error
    assert plan.saw_skill and backend.steps() == ["write", "answer"], backend.steps()
    assert session.reward == 1.0, session.evaluation


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_codex_calls_the_tasks_mcp_server_in_its_sealed_container(
    kind: str,
    harness_stack: HarnessStack,
    harness_image: str,
    storage: Storage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    polar, backend = harness_stack.polar, harness_stack.backend
    if CLI_ADAPTERS["codex"].installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip("@openai/codex is not installed: run infra/harnesses/install.sh")
    spec = codex_spec(TASK, harness_image, "mcp", kind)
    (server,) = spec.harness.mcp_servers
    assert (server.name, server.command, server.args) == (
        "vault",
        "python3",
        ["/opt/mcp/vault_server.py"],
    )
    plan = VaultPlan(write=True)
    monkeypatch.setattr(backend, "plan", plan)
    backend.reset()
    backend.assign(RepoTask(Path("/workspace"), "code.txt", "", "", "true"))
    started = time.monotonic()
    result = await polar.wait(await polar.submit(spec), timeout_s=CLI_BUDGET_S + 400)
    (session,) = result.sessions
    print(
        f"harbor codex mcp: {session.status} reward={session.reward} in "
        f"{time.monotonic() - started:.1f}s, {session.num_completions} calls, "
        f"steps {backend.steps()}"
    )
    assert session.status == SessionStatus.COMPLETED, session.error
    assert backend.steps() == ["mcp", "write", "answer"], backend.steps()
    assert VAULT_CODE in str(backend.agent_calls[1].request["messages"])
    assert session.reward == 1.0, session.evaluation
    records = storage.list_completions(session.session_id)
    assert len(records) == session.num_completions == len(backend.calls)
