"""A session's GPUs as the engines take them (activities/runtimes/gpu_devices.py), checked on
the argument level only: this host has no GPU (tests/system/test_gpu_sessions.py shows each
engine here refusing them for want of one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from activities.runtimes.gpu_devices import docker_device_requests, podman_device_args
from activities.runtimes.kinds.docker import DockerRuntime
from polar.tasks.spec import RuntimeSpec


def test_docker_asks_the_nvidia_driver_for_the_count() -> None:
    assert docker_device_requests(0) is None
    (request,) = docker_device_requests(2) or []
    assert request["Driver"] == "nvidia" and request["Count"] == 2
    assert request["Capabilities"] == [["gpu"]]


def test_podman_names_the_cdi_devices() -> None:
    assert podman_device_args(0) == []
    assert podman_device_args(2) == [
        "--device",
        "nvidia.com/gpu=0",
        "--device",
        "nvidia.com/gpu=1",
    ]


class _Containers:
    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def run(self, image: str, command: list[str], **kwargs: Any) -> str:
        self.kwargs = kwargs
        return "container"


class _Images:
    def get(self, image: str) -> None:
        return None


class _Engine:
    """The two calls `DockerRuntime._create` makes, the second recorded (no GPU here)."""

    def __init__(self) -> None:
        self.images, self.containers = _Images(), _Containers()


def test_a_docker_session_with_gpus_sends_the_device_request(tmp_path: Path) -> None:
    engine = _Engine()
    runtime = DockerRuntime(tmp_path, client=engine)  # type: ignore[arg-type]
    runtime._create("s1", RuntimeSpec(kind="docker", gpus=1))
    (request,) = engine.containers.kwargs["device_requests"]
    assert request["Count"] == 1 and request["Driver"] == "nvidia"
    runtime._create("s2", RuntimeSpec(kind="docker"))
    assert engine.containers.kwargs["device_requests"] is None
