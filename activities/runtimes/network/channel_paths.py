"""Where a sandbox finds its gateway channel: the folder and the loopback port, apart from the
relay's server (channel.py) so that the runtimes, and `polar submit`'s checks of a task's
kinds, import without the server's packages."""

from __future__ import annotations

SANDBOX_DIR = "/run/polar"
"""The channel's folder inside a sandbox (its socket, the forwarder)."""
SANDBOX_PORT = 4000
"""The port on the sandbox's loopback where its harness reaches the gateway."""
