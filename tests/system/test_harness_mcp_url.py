"""The real harness CLIs reach a task's MCP server by URL, with its headers, and call its tool.

The `vault` service of examples/harbor-features/mcp-http-vault (a stdlib Python MCP server,
the script its docker-compose.yaml runs) is run here on a free port; it answers only
requests carrying `Authorization: Bearer <its token>`. Each CLI that takes MCP servers is
prepared by its production adapter with the server at its URL, over streamable HTTP
(Claude Code, Codex, Qwen Code) and over SSE (Claude Code, Qwen Code; Codex refuses SSE),
the header as the task writes it (`Bearer ${VAULT_TOKEN}`, the token in the harness's env),
and the scripted backend has it call the server's `lookup_code` tool: the code only the
server knows (its salt is in the server's environment alone) comes back to the model in
the next call. The same run with a wrong token gets no code, so the check can fail.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import HarnessSpec, McpServerSpec
from tests.support.paths import REPO
from tests.system.test_harness_clis import make_repo
from tests.system.test_harness_skills_mcp import McpBackend, backend_of, run_prepared

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "mcp-http-vault"
CODE = "VAULT-F6FAF1DD5D"  # the service's code for project `orion`
CASES = [
    ("claude_code", "streamable-http"),
    ("claude_code", "sse"),
    ("codex", "streamable-http"),
    ("qwen_code", "streamable-http"),
    ("qwen_code", "sse"),
]


@contextmanager
def vault_service() -> Iterator[tuple[str, str]]:
    """The task's `vault` service on a free port of the host: (base URL, its token)."""
    service = yaml.safe_load((TASK / "environment" / "docker-compose.yaml").read_text())
    vault = service["services"]["vault"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | vault["environment"] | {"VAULT_PORT": str(port)}
    proc = subprocess.Popen(vault["command"], env=env)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", vault["environment"]["VAULT_TOKEN"]
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def vault() -> Iterator[tuple[str, str]]:
    with vault_service() as found:
        yield found


def _spec(kind: str, transport: str, base: str, token: str) -> HarnessSpec:
    path = "/mcp" if transport == "streamable-http" else "/sse"
    server = McpServerSpec(
        name="vault",
        transport=transport,  # type: ignore[arg-type]
        url=base + path,
        headers={"Authorization": "Bearer ${VAULT_TOKEN}"},
    )
    return HarnessSpec(kind=kind, env={"VAULT_TOKEN": token}, mcp_servers=[server])


@pytest.mark.parametrize(("kind", "transport"), CASES)
def test_each_cli_calls_the_url_servers_tool_with_its_header(
    kind: str,
    transport: str,
    vault: tuple[str, str],
    tmp_path: Path,
    base_settings: Settings,
    storage: Storage,
    model_dir: Path,
) -> None:
    base, token = vault
    finals = {}
    for right in (True, False):
        run = tmp_path / ("right" if right else "wrong")
        task = make_repo(run / "repo")
        spec = _spec(kind, transport, base, token if right else "not-the-token")
        with backend_of(McpBackend, task, model_dir) as backend:
            rc, out, err = run_prepared(kind, spec, run, base_settings, storage, backend)
        assert rc == 0, f"{kind}: rc={rc}\n{out[-3000:]}\n{err[-3000:]}"
        finals[right] = json.dumps([c.request for c in backend.agent_calls])
        if right:
            steps = backend.steps()
            assert steps[-2:] == ["mcp", "answer"], (steps, err[-2000:], out[-1500:])
            assert CODE not in json.dumps(backend.agent_calls[0].request)
    assert CODE in finals[True], finals[True][-3000:]
    assert CODE not in finals[False]  # without the header's token: no code
