"""Egress in Harbor sessions: with compose sidecars (a sidecar by name goes direct, the rest
through the egress proxy), and per step (a step's own `[steps.agent]` network).

On the real stack (Temporal, SeaweedFS, docker and podman, an in-process worker with
POLAR_EGRESS=proxy): examples/harbor-features/compose-lookup with its network an allowlist
(`[environment] network_mode = "allowlist"`: the agent's and the verifier's) naming one
"internet" host, `localhost` (a loopback server of the test's, reachable only because the
worker's deployment exempts its one port). The `command` harness, with the environment it is
given (HTTP_PROXY and NO_PROXY untouched, lower-case too), reads the word from its `lookup`
sidecar by name, is refused a host off the allowlist (403 from the proxy) and gets the
allowed host from HTTP_PROXY. The proxy's record of the run (`egress.jsonl`) has the allowed
and the refused attempt, never `lookup`. The verifier (its own egress, its own fresh
`lookup`) reads the sidecar too, with the same NO_PROXY, its proxy's record
(`harbor-egress.jsonl`) without `lookup` either: the oracle scores 1. A variant that drops
NO_PROXY (so its request to `lookup` goes to the proxy, which refuses it, off the allowlist,
before resolving it) cannot read the word and scores 0, its record showing `lookup` refused.

examples/harbor-features/two-step-notes with its second step's agent on an allowlist naming
the "internet" (the task's own network: none): the first step's harness has no proxy and no
egress record, the second's gets the allowed host through its proxy, and both steps score 1
(the oracle). On the suite's worker, which has no egress, the same task is refused at
prepare, naming the setting, before any step runs.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.adversaries import oracle_command, steps_oracle_command
from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec
from tests.support.harbor_sessions import harbor_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "compose-lookup"
INTERNET = "localhost"
"""the allowed host, a name (an allowlist of names: any other is refused before it is
resolved, so neither `lookup` nor not-allowed.example is ever looked up on the worker)"""

# the agent: the sidecar and a host off the allowlist asked as any program would, with the
# environment it was given; the stand-in internet is a loopback name (which NO_PROXY keeps off
# the proxy, for the gateway's channel), so that one is asked of HTTP_PROXY explicitly
FETCH = """
import http.client, json, os, time, urllib.error, urllib.parse, urllib.request
def get(url, retries=1):
    for attempt in range(retries):
        try:
            with urllib.request.urlopen(url, timeout=20) as r:
                return r.status, r.read().decode().strip()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode().strip()
        except OSError as e:
            last = repr(e)
            time.sleep(0.2)
    return None, last
def via_proxy(url):
    proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
    conn.request("GET", url)
    answer = conn.getresponse()
    return answer.status, answer.read().decode().strip()
names = ("HTTP_PROXY", "https_proxy", "NO_PROXY", "no_proxy")
found = {
    "env": {name: os.environ.get(name) for name in names},
    "sidecar": get(os.environ["LOOKUP_URL"], retries=50),
    "allowed": via_proxy("ALLOWED_URL"),
    "refused": get("http://not-allowed.example/x"),
}
print("AGENT", json.dumps(found), flush=True)
if found["sidecar"][0] == 200:
    open("/workspace/answer.txt", "w").write(found["sidecar"][1])
"""

# the verifier: the task's test.sh (reward 1 when answer.txt holds what its own fresh lookup
# says, read with the environment it is given), which also prints that environment and asks
# its proxy for the allowed host
VERIFIER = """#!/bin/bash
echo "VERIFIER proxy=$HTTP_PROXY no_proxy=$no_proxy NO_PROXY=$NO_PROXY"
python3 - <<'PY'
import http.client, os, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
conn.request("GET", "ALLOWED_URL")
print("VERIFIER allowed", conn.getresponse().read().decode().strip())
PY
"""


def _task(tmp_path: Path, internet: int) -> Path:
    """compose-lookup with an allowlist network, the agent's fetch as its solution and a
    variant's (NO_PROXY dropped) beside it, test.sh also fetching the allowed host."""
    task = Path(shutil.copytree(TASK, tmp_path / "compose-egress"))
    allowed = f"http://{INTERNET}:{internet}"
    toml = task / "task.toml"
    network = f'network_mode = "allowlist"\nallowed_hosts = ["{INTERNET}"]\n'
    toml.write_text(toml.read_text().replace('network_mode = "no-network"\n', network))
    test = task / "tests" / "test.sh"
    verifier = VERIFIER.replace("ALLOWED_URL", f"{allowed}/verifier")
    test.write_text(verifier + test.read_text().removeprefix("#!/bin/bash\n"))
    for name, prelude in (("solution", ""), ("variant", "unset NO_PROXY no_proxy\n")):
        folder = task / name
        folder.mkdir(exist_ok=True)
        (folder / "fetch.py").write_text(FETCH.replace("ALLOWED_URL", f"{allowed}/agent"))
        (folder / "solve.sh").write_text(
            f'#!/bin/bash\n{prelude}python3 "$(dirname "$0")/fetch.py"\n'
        )
    return task


def _record(storage: Storage, session: SessionResult, name: str) -> list[tuple[str, bool]]:
    log = storage.get_bytes(artifact_key(session.session_id, name)).decode()
    return [(e["host"], e["allowed"]) for e in map(json.loads, log.splitlines())]


def _text(storage: Storage, session: SessionResult, name: str) -> str:
    return storage.get_bytes(artifact_key(session.session_id, name)).decode(errors="replace")


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_a_sidecar_is_reached_by_name_and_the_rest_through_the_proxy(
    kind: str,
    egress_polar: PolarClient,
    storage: Storage,
    podman_image: str,
    internet: int,
    tmp_path: Path,
) -> None:
    task = _task(tmp_path, internet)
    (built,) = ensure_images(task)
    if kind == "podman":  # the worker's podman store; the sidecar's image is podman_image
        from activities.runtimes.kinds.podman import load_from_docker

        load_from_docker(built.image)
    oracle, variant = await asyncio.gather(
        *(
            harbor_session(egress_polar, task, oracle_command(task / name), kind, f"eg-sc-{name}")
            for name in ("solution", "variant")
        )
    )
    tag = "harness-attempt1"
    agent = json.loads(
        next(
            line.removeprefix("AGENT ")
            for line in _text(storage, oracle, f"{tag}.stdout").splitlines()
            if line.startswith("AGENT ")
        )
    )
    print(f"{kind} agent: {agent}")
    proxy = "http://127.0.0.1:3128"
    no_proxy = "127.0.0.1,localhost,::1,lookup"
    assert agent["env"] == {
        "HTTP_PROXY": proxy,
        "https_proxy": proxy,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }, agent
    assert agent["sidecar"] == [200, "sidecar-says-hello"], agent  # by name, direct
    assert agent["allowed"] == [200, "internet says hi to /agent"], agent  # through the proxy
    assert agent["refused"][0] == 403 and "allowed_hosts" in agent["refused"][1], agent
    # the proxy was never asked for the sidecar: only the allowed and the refused host
    assert _record(storage, oracle, f"{tag}/egress.jsonl") == [
        (INTERNET, True),
        ("not-allowed.example", False),
    ]
    verifier = _text(storage, oracle, "harbor-test.stdout")
    assert f"VERIFIER proxy={proxy} no_proxy={no_proxy} NO_PROXY={no_proxy}" in verifier
    assert "VERIFIER allowed internet says hi to /verifier" in verifier, verifier
    assert _record(storage, oracle, "harbor-egress.jsonl") == [(INTERNET, True)]
    assert oracle.reward == 1.0, (oracle.evaluation, verifier)
    # without NO_PROXY the sidecar's name goes to the proxy, which refuses it: reward 0
    assert variant.reward == 0.0, variant.evaluation
    assert _record(storage, variant, f"{tag}/egress.jsonl") == [
        ("lookup", False),
        (INTERNET, True),
        ("not-allowed.example", False),
    ]


STEPS_TASK = REPO / "examples" / "harbor-features" / "two-step-notes"

# each step's harness says whether it has a proxy and, where it has, asks it for the allowed
# host; then does the step's work (its oracle)
PROBE = """python3 - <<'PY'
import http.client, json, os, urllib.parse
found = {"step": os.environ["POLAR_STEP"], "proxy": os.environ.get("HTTP_PROXY")}
if found["proxy"]:
    proxy = urllib.parse.urlsplit(found["proxy"])
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
    conn.request("GET", "ALLOWED_URL")
    answer = conn.getresponse()
    found["allowed"] = [answer.status, answer.read().decode().strip()]
print("PROBE", json.dumps(found), flush=True)
PY
"""


def _steps_task(tmp_path: Path, internet: int) -> Path:
    """two-step-notes, its `extend` step's agent on an allowlist naming the internet."""
    task = Path(shutil.copytree(STEPS_TASK, tmp_path / "step-network"))
    toml = task / "task.toml"
    own = f'[steps.agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["{INTERNET}"]\n'
    toml.write_text(toml.read_text().replace("[steps.agent]\n", own, 1))
    return task


def _probes(storage: Storage, session: SessionResult) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix("PROBE "))
        for step in (1, 2)
        for line in _text(storage, session, f"harness-attempt{step}.stdout").splitlines()
        if line.startswith("PROBE ")
    ]


async def test_a_steps_own_network_is_its_harness_alone(
    egress_polar: PolarClient, polar: PolarClient, storage: Storage, internet: int, tmp_path: Path
) -> None:
    task = _steps_task(tmp_path, internet)
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.network.sealed and spec.steps[1].network is not None
    ensure_images(task)
    probe = PROBE.replace("ALLOWED_URL", f"http://{INTERNET}:{internet}/step")
    command = probe + (steps_oracle_command(task, ["write", "extend"]) or "")
    session = await harbor_session(egress_polar, task, command, "docker", "eg-step")
    assert _probes(storage, session) == [
        {"step": "write", "proxy": None},
        {
            "step": "extend",
            "proxy": "http://127.0.0.1:3128",
            "allowed": [200, "internet says hi to /step"],
        },
    ]
    assert "harness-attempt1/egress.jsonl" not in str(session.artifacts)  # sealed: no proxy
    assert _record(storage, session, "harness-attempt2/egress.jsonl") == [(INTERNET, True)]
    assert [s.reward for s in session.steps] == [1.0, 1.0] and session.reward == 1.0
    # a worker without egress refuses it at prepare, naming the setting: no step runs
    (spec,) = load_harbor_tasks(task, harness=HarnessSpec(kind="command", command=command))
    spec = spec.model_copy(
        update={
            "task_id": f"eg-step-refused-{uuid.uuid4().hex[:6]}",
            "timeouts": spec.timeouts.model_copy(update={"max_attempts": 1}),
        }
    )
    (refused,) = (await polar.wait(await polar.submit(spec), timeout_s=300)).sessions
    assert refused.status == SessionStatus.ERROR and not refused.steps, refused
    assert "POLAR_EGRESS=proxy" in (refused.error or ""), refused.error
