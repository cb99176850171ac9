"""A real sealed session on a Harbor task with a stdio MCP server, graded by its test.sh.

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

import time
import uuid
from pathlib import Path

import pytest

from activities.harnesses import CLI_ADAPTERS
from polar.records import SessionStatus
from polar.storage import Storage
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, Timeouts
from tests.support.agent_backend import RepoTask
from tests.support.harness_stack import HarnessStack
from tests.support.paths import REPO
from tests.system.test_harness_clis import CLI_BUDGET_S
from tests.system.test_harness_skills_mcp import VAULT_CODE, VaultPlan

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor" / "mcp-vault"


async def test_codex_calls_the_tasks_mcp_server_in_its_sealed_container(
    harness_stack: HarnessStack,
    harness_image: str,
    storage: Storage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapter = CLI_ADAPTERS["codex"]
    polar, backend = harness_stack.polar, harness_stack.backend
    if adapter.installed_version(polar.settings.harness_bin_dir) is None:
        pytest.skip(f"{adapter.package} is not installed: run infra/harnesses/install.sh")
    image_map = {"polar/runtime:py311": harness_image}
    ensure_images(TASK, image_map=image_map)
    (spec,) = load_harbor_tasks(TASK, harness=HarnessSpec(kind="codex"), image_map=image_map)
    (server,) = spec.harness.mcp_servers
    assert (server.name, server.command, server.args) == (
        "vault",
        "python3",
        ["/opt/mcp/vault_server.py"],
    )
    spec = spec.model_copy(
        update={
            "task_id": f"hb-mcp-{uuid.uuid4().hex[:6]}",
            "timeouts": Timeouts(
                harness_s=CLI_BUDGET_S, evaluate_s=300, heartbeat_s=20, max_attempts=1
            ),
        }
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
