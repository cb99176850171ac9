"""Polar's Harbor loader resolves each phase's network as Harbor does.

Harbor 0.25 (`.venv-harbor`, as in test_harbor_agreement) reads task dirs with
every shape of network setting (unset, `allowlist` with each kind of entry,
the deprecated `allow_internet`, `[agent]` / `[verifier]` overrides); its
policy for the agent is `[agent]`'s explicit one or the environment's baseline,
and the same for the verifier (shared mode). Polar's `runtime.network` and
`evaluator.harbor.network` must say the same, entries normalised alike.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from activities.evaluators.harbor import HarborConfig
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.spec import NetworkSpec
from tests.integration.test_harbor_agreement import harbor_python  # noqa: F401 - fixture
from tests.support.paths import REPO

HARBOR_POLICIES = """
import json, sys
from harbor.models.task.task import Task
out = []
for d in sys.argv[1:]:
    c = Task(d).config
    base = c.environment.resolve_baseline()
    phases = [c.agent.explicit_phase_policy() or base, c.verifier.explicit_phase_policy() or base]
    out.append([[p.network_mode.value, p.allowed_hosts] for p in phases])
print(json.dumps(out))
"""

CASES = {
    "unset": ("", "", ""),
    "allowlist": (
        'network_mode = "allowlist"\\nallowed_hosts = ["PyPI.org.", "*.pythonhosted.org", '
        '"10.1.0.0/16", "2001:DB8::1"]',
        "",
        "",
    ),
    "legacy-off": ("allow_internet = false", "", ""),
    "legacy-on": ("allow_internet = true", "", ""),
    "phases": (
        'network_mode = "public"',
        'network_mode = "no-network"',
        'network_mode = "allowlist"\\nallowed_hosts = ["a.test"]',
    ),
    "verifier-public": (
        'network_mode = "allowlist"\\nallowed_hosts = ["x.test"]',
        "",
        'network_mode = "public"',
    ),
}
HARBOR_MODE = {"none": "no-network", "public": "public", "allowlist": "allowlist"}


def _task(root: Path, name: str, environment: str, agent: str, verifier: str) -> Path:
    task = Path(shutil.copytree(REPO / "examples" / "harbor" / "hello-file", root / name))
    toml = task / "task.toml"
    text = toml.read_text().replace('network_mode = "no-network"\n', "")
    for section, extra in (("environment", environment), ("agent", agent), ("verifier", verifier)):
        if extra:
            text = text.replace(f"[{section}]\n", f"[{section}]\n{extra}\n".replace("\\n", "\n"), 1)
    toml.write_text(text)
    return task


def _harbor_view(network: NetworkSpec) -> list[object]:
    return [HARBOR_MODE[network.mode], network.allowed_hosts]


def test_each_phases_network_agrees_with_harbor(
    harbor_python: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    dirs = [_task(tmp_path, name, *edits) for name, edits in CASES.items()]
    proc = subprocess.run(
        [str(harbor_python), "-W", "ignore", "-c", HARBOR_POLICIES, *map(str, dirs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    theirs = json.loads(proc.stdout)
    for d, (agent, verifier) in zip(dirs, theirs, strict=True):
        (spec,) = load_harbor_tasks(d)
        verifier_network = HarborConfig.of(spec.evaluator).network
        assert _harbor_view(spec.runtime.network) == agent, (d.name, "agent")
        assert _harbor_view(verifier_network) == verifier, (d.name, "verifier")
