"""Egress for a task that asks for network: granted only where the deployment turns it on.

On the real stack (Temporal, SeaweedFS, Docker, an in-process worker): a docker,
podman and local session (no network of their own) whose `command` harness fetches, through the
HTTP_PROXY it is given, an allowed URL (a loopback server standing in for the
internet, reachable only because this module's deployment exempts its one port)
and a disallowed one. The first answers, the second is refused 403 by the
worker's egress proxy, and both attempts are in the session's `egress.jsonl`
artifact. The same task on the suite's worker (POLAR_EGRESS off, the default)
is refused at its start, non-retryable, naming the reason.
"""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from polar.app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.spec import TaskSpec
from tests.support.container_sessions import small_repo

pytestmark = pytest.mark.slow

# the stand-in internet is a loopback name, which NO_PROXY (there for the gateway's port)
# would keep off the proxy: the script says what it was given, then drops NO_PROXY
FETCH = """
import os, sys, urllib.error, urllib.request
print("proxy", os.environ["HTTP_PROXY"], os.environ["HTTPS_PROXY"], os.environ["NO_PROXY"])
os.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")
def status(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
ok = status(sys.argv[1])
no = status(sys.argv[2])
print("allowed", ok[0], ok[1].strip())
print("refused", no[0], no[1].strip())
sys.exit(0 if ok[0] == 200 and no[0] == 403 else 1)
"""


class _Internet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"internet says hi to {self.path}\n".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def internet() -> Iterator[int]:
    """A loopback HTTP server in a thread: the 'internet' of this module."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Internet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
async def egress_polar(
    devstack: DevStack, docker_image: str, internet: int
) -> AsyncIterator[PolarClient]:
    """A worker on its own queue whose deployment turns egress on, exempting the internet's
    one loopback port from the blocked networks (the default blocks loopback)."""
    from activities.worker import running_workers

    settings = devstack.settings.model_copy(
        update={
            "task_queue": f"polar-egress-{uuid.uuid4().hex[:8]}",
            "egress": "proxy",
            "egress_exempt": [f"127.0.0.1:{internet}"],
        }
    )
    async with running_workers(settings):
        yield await PolarClient.connect(settings)


def fetching_task(
    task_id: str, repo: Path, internet: int, image: str, kind: str = "docker"
) -> TaskSpec:
    (repo / "fetch.py").write_text(FETCH)
    allowed = f"http://localhost:{internet}/allowed"
    network = {"mode": "allowlist", "allowed_hosts": ["localhost"]}
    runtime = {"kind": kind, "network": network} | ({"image": image} if kind != "local" else {})
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "source": {"type": "dir", "path": str(repo)},
            "runtime": runtime,
            "harness": {
                "kind": "command",
                "command": f"python3 fetch.py {allowed} http://not-allowed.example/x",
            },
            "timeouts": {"max_attempts": 1},
        }
    )


@pytest.mark.parametrize("kind", ["docker", "podman", "local"])
async def test_a_session_reaches_only_its_allowed_hosts(
    kind: str,
    egress_polar: PolarClient,
    storage: Storage,
    docker_image: str,
    internet: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """docker and podman (`--network none`) and the sealed local sandbox (its own network
    namespace): the same door, the same policy."""
    image = request.getfixturevalue("podman_image") if kind == "podman" else docker_image
    spec = fetching_task(
        f"egress-{kind}-{uuid.uuid4().hex[:6]}", small_repo(tmp_path), internet, image, kind
    )
    result = await egress_polar.wait(await egress_polar.submit(spec), timeout_s=180)
    [session] = result.sessions
    sid = session.session_id
    stdout = storage.get_bytes(artifact_key(sid, "harness-attempt1.stdout")).decode()
    stderr = storage.get_bytes(artifact_key(sid, "harness-attempt1.stderr")).decode()
    assert session.status == SessionStatus.COMPLETED, (session.error, stdout, stderr)
    proxy = "http://127.0.0.1:3128"
    assert f"proxy {proxy} {proxy} 127.0.0.1,localhost,::1" in stdout, stdout
    assert "allowed 200 internet says hi to /allowed" in stdout, stdout
    assert (
        "refused 403 polar egress: not-allowed.example:80 is not in the task's allowed_hosts"
        in (stdout)
    ), stdout
    log = storage.get_bytes(artifact_key(sid, "harness-attempt1/egress.jsonl")).decode()
    entries = [json.loads(line) for line in log.splitlines()]
    assert [(e["host"], e["port"], e["allowed"]) for e in entries] == [
        ("localhost", internet, True),
        ("not-allowed.example", 80, False),
    ]
    assert entries[0]["ip"] == "127.0.0.1" and entries[0]["bytes_down"] > 0
    assert entries[1]["ip"] is None and "allowed_hosts" in entries[1]["reason"]


async def test_a_task_asking_for_network_is_refused_where_egress_is_off(
    polar: PolarClient, docker_image: str, internet: int, tmp_path: Path
) -> None:
    """The suite's own worker has the default POLAR_EGRESS=off."""
    assert polar.settings.egress == "off"
    spec = fetching_task(
        f"egress-off-{uuid.uuid4().hex[:6]}", small_repo(tmp_path), internet, docker_image
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=120)
    [session] = result.sessions
    assert session.status == SessionStatus.ERROR
    assert session.error_type == "InvalidTaskSpec", session
    assert "POLAR_EGRESS=off" in (session.error or "")
    assert "runtime.network.mode is 'allowlist'" in (session.error or "")
    assert session.error_stage == "prepare"
