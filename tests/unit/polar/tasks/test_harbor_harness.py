"""What a Harbor task gives its harness (polar/tasks/harbor_harness.py): `[environment]
.skills_dir` is the harness's `skills_dir`, whichever harness runs it; a stdio MCP server is
one of its `mcp_servers`; a bad one, or one reached by URL, is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.spec import HarnessSpec, McpServerSpec, TaskSpec
from tests.support.paths import REPO

EXAMPLES = REPO / "examples" / "harbor"


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / name))


@pytest.mark.parametrize("kind", ["pi", "claude_code", "command"])
def test_the_skills_dir_is_the_harness_skills_dir(kind: str) -> None:
    harness = HarnessSpec(kind=kind, command="true" if kind == "command" else None)
    (spec,) = load_harbor_tasks(EXAMPLES / "skill-stamp", harness=harness)
    assert spec.harness.kind == kind and spec.harness.skills_dir == "/opt/task-skills"
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec
    (hello,) = load_harbor_tasks(EXAMPLES / "hello-file", harness=harness)
    assert hello.harness.skills_dir is None


@pytest.mark.parametrize(
    ("value", "why"), [("3", "must be a string"), ('"a\\nb"', "not a usable path")]
)
def test_a_bad_skills_dir_is_refused_by_name(tmp_path: Path, value: str, why: str) -> None:
    task = _copy(tmp_path, "skill-stamp")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"/opt/task-skills"', value))
    with pytest.raises(HarborTaskError, match=why) as info:
        load_harbor_tasks(task)
    assert info.value.field == "environment.skills_dir"


def test_an_empty_skills_dir_is_none_as_in_harbor(tmp_path: Path) -> None:
    task = _copy(tmp_path, "skill-stamp")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"/opt/task-skills"', '""'))
    (spec,) = load_harbor_tasks(task)
    assert spec.harness.skills_dir is None


# ------------------------------------------------ [[environment.mcp_servers]]


def test_a_stdio_server_is_the_harness_mcp_server() -> None:
    (spec,) = load_harbor_tasks(EXAMPLES / "mcp-vault", harness=HarnessSpec(kind="codex"))
    (server,) = spec.harness.mcp_servers
    assert server == McpServerSpec(
        name="vault", command="python3", args=["/opt/mcp/vault_server.py"]
    )
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec


def test_the_harness_own_server_wins_by_name_as_harbor_merges() -> None:
    mine = McpServerSpec(name="vault", command="node", args=["v.js"])
    other = McpServerSpec(name="other", command="x")
    harness = HarnessSpec(kind="codex", mcp_servers=[mine, other])
    (spec,) = load_harbor_tasks(EXAMPLES / "mcp-vault", harness=harness)
    assert spec.harness.mcp_servers == [mine, other]


@pytest.mark.parametrize(
    ("server", "field", "why"),
    [
        ('name = "v"\nurl = "http://svc:8000/sse"', "transport", "stdio servers only"),
        (
            'name = "v"\ntransport = "streamable-http"\nurl = "http://svc/mcp"',
            "transport",
            "compose sidecar",
        ),
        ('name = "v"\ntransport = "http"\nurl = "http://svc/mcp"', "transport", "sidecar"),
        ('name = "v"\ntransport = "stdio"', "", "command"),
        ('name = "a b"\ntransport = "stdio"\ncommand = "x"', "", "name"),
        ('name = "v"\ntransport = "stdio"\ncommand = "x"\nheaders = {A = "b"}', "headers", "HTTP"),
    ],
)
def test_a_server_polar_cannot_run_is_refused_by_name(
    tmp_path: Path, server: str, field: str, why: str
) -> None:
    task = _copy(tmp_path, "hello-file")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + f"\n[[environment.mcp_servers]]\n{server}\n")
    with pytest.raises(HarborTaskError, match=why) as info:
        load_harbor_tasks(task, harness=HarnessSpec(kind="codex"))
    assert info.value.field == "environment.mcp_servers[0]" + (f".{field}" if field else "")
