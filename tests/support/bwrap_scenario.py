"""What tests/system/test_bwrap_sandbox.py runs as an ordinary user: a worker's `local`
runtime, detected as that user, its sessions probed from inside; prints one JSON report.

    python -m tests.support.bwrap_scenario sealed|refused|auto DATA_DIR
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pydantic

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.network.channel import (
    SANDBOX_GATEWAY_URL,
    SESSION_KEY_HEADER,
    GatewayRelay,
    with_forwarder,
)
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, RuntimeSpec

SECRET = "worker-secret-" + uuid.uuid4().hex


class _Gateway(BaseHTTPRequestHandler):
    """A stand-in gateway on the worker's loopback: answers with the session key the relay sent."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"key": self.headers.get(SESSION_KEY_HEADER, "")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


async def _run(runtime: LocalRuntime, handle: RuntimeHandle, command: str) -> dict[str, Any]:
    name = f"c-{uuid.uuid4().hex[:6]}"
    outcome = await runtime.run(handle, command, env={}, log_name=name, timeout_s=60)
    out, err = (p.read_text() for p in runtime.log_paths(handle, name))
    return {"exit": outcome.exit_code, "out": out, "err": err[-1500:]}


def _alive(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def sealed(data: Path) -> dict[str, Any]:
    os.environ["POLAR_SESSION_SECRET"] = SECRET  # the worker's env: never a command's
    source = data / "src"
    source.mkdir()
    (source / "a.txt").write_text("a\n")
    runtime = LocalRuntime(data / "runtimes")
    report: dict[str, Any] = {"mode": runtime.sandbox.mode, "sealed": runtime.sandbox.sealed}
    spec = RuntimeSpec.model_validate({"kind": "local", "pids": 300, "disk": "64m"})

    def request(session_id: str) -> PrepareRequest:
        return PrepareRequest(
            session_id=session_id,
            task_id="t",
            runtime=spec,
            source=DirSource(path=str(source)),
        )

    a = await runtime.prepare(request("bw-a"))
    b = await runtime.prepare(request("bw-b"))
    host = socket.create_server(("127.0.0.1", 0))  # a port of the worker's network
    port = host.getsockname()[1]
    token = f"polar-leftover-{uuid.uuid4().hex[:8]}"
    checks = {
        "only_loopback": 'test "$(grep -c : /proc/net/dev)" = 1',
        "host_port_unreachable": f"! (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null",
        "no_worker_env": f"! env | grep -q {SECRET}",
        "no_worker_process": f"! grep -qs {SECRET} /proc/[0-9]*/environ "
        "&& test $(ls -d /proc/[0-9]* | wc -l) -lt 8",
        # the worker's packages (its venv's site-packages; here the system Python's path)
        "no_worker_venv": f"test ! -e {Path(pydantic.__file__).parents[1]}",
        "no_other_session": f"test ! -e {b.workdir} && test ! -e {Path(b.workdir).parent}",
        "no_own_logs": f"test ! -e {runtime.log_paths(a, 'x')[0].parent}",
        "no_worker_data": f"test ! -e {data / 'src'}",
        "system_read_only": "! touch /usr/polar-x 2>/dev/null && ! touch /etc/polar-x 2>/dev/null",
        "workspace_writable": "echo made > made.txt && test -s a.txt",
        "rlimits": 'test "$(ulimit -c)" = 0 && test "$(ulimit -u)" = 300 '
        '&& test "$(ulimit -f)" = 65536',
        "no_nested_userns": "! unshare -U true 2>/dev/null",
    }
    report["checks"] = {}
    for name, command in checks.items():
        report["checks"][name] = await _run(runtime, a, command)
    # what a command leaves behind does not outlive it
    detach = f"( setsid nohup bash -c 'exec -a {token} sleep 600' >/dev/null 2>&1 & ); sleep 0.2"
    report["detached"] = await _run(runtime, a, detach)
    report["left_alive"] = _alive(token)
    # the channel: the relay's socket bound in, the forwarder on the sandbox's loopback
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    call = (
        'python3 -c "import urllib.request as u; print(u.urlopen(u.Request('
        f"'{SANDBOX_GATEWAY_URL}/v1/chat/completions', b'{{}}', method='POST'), "
        'timeout=30).read().decode())"'
    )
    channel = runtime.channel_in_sandbox(a)
    report["channel_in_sandbox"] = channel
    async with runtime.open_channel(a) as listener:
        report["listener"] = listener is not None
        relay = GatewayRelay(
            runtime.channel_dir(a), f"http://127.0.0.1:{server.server_port}", "the-key"
        )
        async with relay:
            report["channel"] = await _run(runtime, a, with_forwarder(call, channel or ""))
    server.shutdown()
    host.close()
    await runtime.reap(a)
    report["made"] = (Path(a.workdir) / "made.txt").read_text().strip()
    report["torn_down"] = [await runtime.teardown(h) for h in (a, b)]
    return report


async def refused(data: Path) -> dict[str, Any]:
    request = PrepareRequest(
        session_id="bw-r", task_id="t", runtime=RuntimeSpec(kind="local"), source=None
    )
    runtime = LocalRuntime(data / "runtimes", allow_unsealed=False)
    report: dict[str, Any] = {}
    try:
        await runtime.prepare(request)
        report["refused"] = None
    except InvalidRuntime as exc:
        report["refused"] = str(exc)
    allowed = LocalRuntime(data / "runtimes", allow_unsealed=True)
    handle = await allowed.prepare(request)
    report["allowed_mode"] = allowed.sandbox.mode
    report["allowed_run"] = await _run(allowed, handle, "echo ran")
    await allowed.teardown(handle)
    return report


async def auto(data: Path) -> dict[str, Any]:
    """`kind: auto` for this worker: what it resolves to and why, a session run in it, and
    the sweep's kinds listed as the sweep lists them (which must start no podman)."""
    from activities.runtimes import get_runtime
    from activities.runtimes.selection import podman_usable, resolve_auto, sweep_kinds

    choice = resolve_auto()
    report: dict[str, Any] = {"kind": choice.kind, "why": choice.why}
    report["podman_usable"] = podman_usable()[0]
    runtime = get_runtime("auto", data)
    request = PrepareRequest(
        session_id="bw-auto", task_id="t", runtime=RuntimeSpec(kind="auto"), source=None
    )
    handle = await runtime.prepare(request)
    report["handle_kind"] = handle.kind
    report["mode"] = getattr(runtime, "sandbox", None) and runtime.sandbox.mode  # type: ignore[attr-defined]
    report["run"] = await _run(runtime, handle, "echo ran-in-auto")  # type: ignore[arg-type]
    report["torn_down"] = await runtime.teardown(handle)
    report["podman_storage"] = (Path.home() / ".local/share/containers/storage").exists()
    report["sweep_kinds"] = list(sweep_kinds())
    for kind in report["sweep_kinds"]:
        # an engine this user cannot reach: the sweep skips it, as here
        with contextlib.suppress(Exception):
            await get_runtime(kind, data).list_sessions()
    return report


SCENARIOS = {"sealed": sealed, "refused": refused, "auto": auto}


def main() -> None:
    what, data = sys.argv[1], Path(sys.argv[2])
    report = asyncio.run(SCENARIOS[what](data))
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
