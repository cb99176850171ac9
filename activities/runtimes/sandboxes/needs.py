"""What a sandbox itself needs from its image or host, checked at prepare.

Every harness command runs as `setsid -w bash -c ...` (containers) behind the
in-sandbox gateway forwarder (`python3`, activities/runtimes/network/channel.py), and the
workspace baseline is a `git` commit (activities/evaluators/baseline.py). An
image without one of them (a user's image built on `polar/base:bookworm` that
dropped python3, say) used to make the harness exit 97 or the baseline fail, and
the session ended as if the policy or the evaluator had failed. Prepare now
looks for them first and refuses the runtime (`RuntimeUnfit`, an infra error of
class `image`) with every missing tool named.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence

from activities.runtimes.base import RuntimeUnfit

CONTAINER_TOOLS = ("bash", "setsid", "git", "python3")
"""What a container's image must have on its PATH."""

_PROBE = 'for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || echo "$tool"; done'


def probe_argv(tools: Sequence[str] = CONTAINER_TOOLS) -> list[str]:
    """An argv (run with `sh` in the sandbox) that prints each of `tools` not on its PATH."""
    return ["sh", "-c", _PROBE, "sh", *tools]


def missing_from(output: str, tools: Sequence[str] = CONTAINER_TOOLS) -> list[str]:
    """The tools `probe_argv`'s output names, in `tools`' order."""
    named = set(output.split())
    return [tool for tool in tools if tool in named]


def missing_on_host(tools: Iterable[str], path: str | None = None) -> list[str]:
    """The tools not found on the host's `path` (default: the worker's PATH)."""
    return [tool for tool in tools if shutil.which(tool, path=path) is None]


def refuse(where: str, missing: Sequence[str]) -> RuntimeUnfit:
    """The prepare-time refusal of `where` (an image, a host), naming what it lacks."""
    return RuntimeUnfit(
        f"{where} lacks what the sandbox needs: {', '.join(missing)} not found on its PATH "
        f"(the sandbox runs commands with bash and setsid, serves the gateway with python3 "
        "and records the workspace with git)"
    )


def check_probe(where: str, exit_code: int, output: str) -> None:
    """Raise `refuse` when the probe could not run (no `sh`) or named missing tools."""
    if exit_code != 0:
        raise RuntimeUnfit(
            f"{where} cannot run the sandbox's tool check (no sh?): exit {exit_code}: "
            f"{output.strip()[-300:]}"
        )
    missing = missing_from(output)
    if missing:
        raise refuse(where, missing)
