"""Real sealed Polar sessions on docker with a Harbor task's MCP server reached by URL.

examples/harbor-features/mcp-http-vault runs an MCP server (stdlib Python) as its compose
service `vault`, beside the session's container on the session's own private network, and
names it in `[[environment.mcp_servers]]` at http://vault:8000/mcp (streamable HTTP) with an
`Authorization` header whose `${VAULT_TOKEN}` comes from `main`'s environment. The oracle (its
solve.sh, calling the tool itself) scores 1 and a no-op 0. Loaded with Codex, Codex reaches
the service from the config.toml its adapter wrote (the header's value through its env), the
scripted backend (through the gateway, the session's only door) has it call `lookup_code`,
reads the code from the tool's answer in the next prompt and has it written to code.txt:
the verifier scores 1 only for that code, which only that session's service gave (its salt
is in the service's environment alone).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from activities.harnesses import CLI_ADAPTERS
from app.adversaries import oracle_command
from polar.records import SessionStatus
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, TaskSpec, Timeouts
from tests.support.agent_backend import RepoTask
from tests.support.harness_stack import HarnessStack
from tests.support.paths import REPO
from tests.system.test_harness_clis import CLI_BUDGET_S
from tests.system.test_harness_skills_mcp import VaultPlan

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "mcp-http-vault"
CODE = "VAULT-F6FAF1DD5D"


def task_spec(harness: HarnessSpec, harness_image: str, name: str) -> TaskSpec:
    """The task on the harness image (its environment and its service's image mapped)."""
    image_map = {"polar/runtime:py311": harness_image}
    ensure_images(TASK, image_map=image_map)
    (spec,) = load_harbor_tasks(TASK, harness=harness, image_map=image_map)
    assert [s.name for s in spec.runtime.sidecars] == ["vault"]
    return spec.model_copy(
        update={
            "task_id": f"mcp-url-{name}-{uuid.uuid4().hex[:6]}",
            "timeouts": Timeouts(
                harness_s=CLI_BUDGET_S, evaluate_s=300, heartbeat_s=20, max_attempts=1
            ),
        }
    )


@pytest.mark.parametrize(
    ("agent", "reward"),
    [(oracle_command(TASK / "solution"), 1.0), ("true", 0.0)],
    ids=["oracle", "noop"],
)
async def test_the_oracle_reaches_the_service_and_a_noop_does_not_score(
    harness_stack: HarnessStack, harness_image: str, agent: str, reward: float
) -> None:
    harness = HarnessSpec(kind="command", command=agent)
    spec = task_spec(harness, harness_image, "oracle" if reward else "noop")
    polar = harness_stack.polar
    result = await polar.wait(await polar.submit(spec), timeout_s=400)
    (session,) = result.sessions
    print(f"mcp url {spec.task_id}: {session.status} {session.reward} {session.evaluation}")
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == reward, session.evaluation


async def test_codex_calls_the_services_tool_from_its_sealed_container(
    harness_stack: HarnessStack, harness_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    polar, backend = harness_stack.polar, harness_stack.backend
    if CLI_ADAPTERS["codex"].installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip("@openai/codex is not installed: run infra/harnesses/install.sh")
    spec = task_spec(HarnessSpec(kind="codex"), harness_image, "codex")
    (server,) = spec.harness.mcp_servers
    assert (server.transport, server.url) == ("streamable-http", "http://vault:8000/mcp")
    plan = VaultPlan(write=True)
    monkeypatch.setattr(backend, "plan", plan)
    backend.reset()
    backend.assign(RepoTask(Path("/workspace"), "code.txt", "", "", "true"))
    result = await polar.wait(await polar.submit(spec), timeout_s=CLI_BUDGET_S + 400)
    (session,) = result.sessions
    print(f"mcp url codex: {session.status} reward={session.reward}, {backend.steps()}")
    assert session.status == SessionStatus.COMPLETED, session.error
    assert backend.steps() == ["mcp", "write", "answer"], backend.steps()
    assert CODE in str(backend.agent_calls[1].request["messages"])
    assert session.reward == 1.0, session.evaluation
