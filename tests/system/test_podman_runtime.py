"""What is particular to the `podman` runtime (daemonless; rootless where the host allows).

The cases every runtime honours run over both podman modes in
test_runtime_contract.py. Here, in each mode (`rootless`: podman as the unprivileged
`polar-runner` user; `root` when the tests run as root; each prints which mode ran and
why `auto` picks what it picks): the memory limit as the container's own cgroup sees it,
which rootless podman on cgroup v1 ignores (said, and asserted as ignored). A rootless run
on a host that cannot support it (`rootless_support`: no user namespaces or `/dev/fuse`
for the runner, or cgroup v1) is skipped with that reason, unless rootless is what `auto`
picks here: the default mode is never skipped. `podman_image` copies polar/runtime:py311
from the local Docker engine into podman's stores (`docker save | podman load`, no
registry).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.runtimes.kinds.podman import PodmanRuntime, cgroup_v2
from polar.contracts import PrepareRequest
from polar.tasks.spec import RuntimeSpec
from tests.support.container_sessions import (
    container_attrs,
    podman_modes,
    podman_runtime,
    runtime_root,
)

pytestmark = pytest.mark.slow


@pytest.fixture(params=podman_modes())
def runtime(request: pytest.FixtureRequest, podman_image: str) -> Iterator[PodmanRuntime]:
    with runtime_root("polar-podman-") as root:
        yield from podman_runtime(root, request.param)


def _request(session_id: str, **runtime: object) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "podman", **runtime}),
    )


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def test_the_memory_limit_is_the_containers_cgroup_limit(runtime: PodmanRuntime) -> None:
    handle = await runtime.prepare(_request("mem-1", cpus=1.5, memory="256m"))
    try:
        attrs = container_attrs(runtime, "mem-1")
        assert attrs is not None
        if runtime.mode == "rootless" and not cgroup_v2():
            # podman: "Resource limits are not supported and ignored on cgroups V1 rootless"
            print("podman rootless on cgroup v1: CPU/memory/pids limits are not enforced")
            assert attrs["HostConfig"]["NanoCpus"] == 0
            return
        mem = await runtime.run(
            handle,
            "cat /sys/fs/cgroup/memory.max 2>/dev/null "
            "|| cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
            env={},
            log_name="mem",
            timeout_s=30,
        )
        assert mem.exit_code == 0
        assert _read(runtime.log_paths(handle, "mem")[0]).strip() == str(256 * 1024 * 1024)
    finally:
        await runtime.teardown(handle)


@pytest.mark.parametrize("size", [2_417_717, 2_500_000])
async def test_a_file_of_any_size_is_copied_in(runtime: PodmanRuntime, size: int) -> None:
    """A scratch file reaches the container whatever its size: with tarfile's padding to a
    whole record after the end-of-archive marker, `podman cp -` failed at some sizes ("io:
    read/write on closed pipe"; 2,417,717 bytes did, 3 of 3), an APIError that made a
    session's big patch an engine fault (issue 32)."""
    handle = await runtime.prepare(_request(f"copy-in-{size}"))
    try:
        (runtime.scratch(handle) / "f.bin").write_bytes(b"x" * size)
        probe = f"stat -c %s {runtime.scratch(handle)}/f.bin"
        outcome = await runtime.run(handle, probe, env={}, log_name="probe", timeout_s=60)
        assert outcome.exit_code == 0
        assert _read(runtime.log_paths(handle, "probe")[0]).strip() == str(size)
    finally:
        await runtime.teardown(handle)
