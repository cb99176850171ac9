"""A session's GPUs (RuntimeSpec `gpus`) as the container engines take them.

docker: a device request of the NVIDIA driver for `gpus` GPUs with the `gpu` capability (what
`docker run --gpus N` sends, and what Harbor's docker environment reserves for its main
service); the engine's NVIDIA runtime picks which. podman: the CDI devices
`nvidia.com/gpu=0` .. `N-1` (the names `nvidia-ctk cdi generate` writes). Types are not chosen
here: a GPU session is only placed on a worker whose host declares GPUs of a type it accepts
(polar/gpus.py). GPUs are not partitioned among a host's concurrent sessions.
"""

from __future__ import annotations

from docker.types import DeviceRequest

__all__ = ["docker_device_requests", "podman_device_args"]


def docker_device_requests(gpus: int) -> list[DeviceRequest] | None:
    """The docker SDK's `device_requests` for `gpus` GPUs (None for none)."""
    if gpus <= 0:
        return None
    return [DeviceRequest(driver="nvidia", count=gpus, capabilities=[["gpu"]])]


def podman_device_args(gpus: int) -> list[str]:
    """`podman run` arguments giving the container `gpus` GPUs by CDI name (none for none)."""
    return [arg for index in range(gpus) for arg in ("--device", f"nvidia.com/gpu={index}")]
