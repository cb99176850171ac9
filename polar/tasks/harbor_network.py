"""Harbor's network policies (environment, agent, verifier) as Polar's NetworkSpecs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from polar.tasks.harbor_toml import HarborTask, HarborTaskError, first_error
from polar.tasks.spec import NetworkSpec

__all__ = ["NO_NETWORK", "baseline_policy", "phase_networks"]

NO_NETWORK = "no-network"

_NETWORK_MODES: dict[str, Literal["none", "public", "allowlist"]] = {
    NO_NETWORK: "none",
    "public": "public",
    "allowlist": "allowlist",
}
"""Harbor's network modes and Polar's (RuntimeSpec.network, the harbor verifier's network)."""


def baseline_policy(task: HarborTask, env_cfg: dict[str, Any]) -> tuple[str, Any]:
    """`[environment]`'s (network_mode, allowed_hosts): Harbor's default `public`; the
    deprecated `allow_internet` only where neither is set (as Harbor applies it)."""
    mode = env_cfg.get("network_mode")
    hosts = env_cfg.get("allowed_hosts")
    if mode is None and hosts is None and env_cfg.get("allow_internet") is not None:
        mode = "public" if env_cfg["allow_internet"] else NO_NETWORK
    return (str(mode) if mode is not None else "public"), hosts


def _network(task: HarborTask, field: str, mode: str, hosts: Any, *, explicit: bool) -> NetworkSpec:
    """One phase's Harbor policy as Polar's NetworkSpec (HarborTaskError naming `field`)."""
    if mode not in _NETWORK_MODES:
        raise HarborTaskError(task.name, f"{field}.network_mode", f"unknown network mode {mode!r}")
    if hosts is not None and not (
        isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)
    ):
        raise HarborTaskError(task.name, f"{field}.allowed_hosts", "must be a list of strings")
    if hosts is not None and mode != "allowlist" and (hosts or explicit):
        raise HarborTaskError(
            task.name,
            f"{field}.allowed_hosts",
            f"is only valid when network_mode = 'allowlist' (it is {mode!r})",
        )
    try:
        return NetworkSpec(mode=_NETWORK_MODES[mode], allowed_hosts=list(hosts or []))
    except ValidationError as exc:
        raise HarborTaskError(task.name, f"{field}.allowed_hosts", first_error(exc)) from exc


def phase_networks(
    task: HarborTask,
    env_cfg: dict[str, Any],
    agent: dict[str, Any],
    verifier: dict[str, Any],
    where: str = "",
) -> tuple[NetworkSpec, NetworkSpec]:
    """The agent's and the verifier's network, as Harbor resolves them: a phase's own
    `network_mode` (with its `allowed_hosts`) when set, else `[environment]`'s. `public` and
    `allowlist` are served by the worker's egress proxy where the deployment turns it on
    (POLAR_EGRESS=proxy); a worker without it refuses the session at its start. `where`: the
    tables' prefix in errors (a step's `steps.NAME.`)."""
    base_mode, base_hosts = baseline_policy(task, env_cfg)
    baseline = _network(task, "environment", base_mode, base_hosts, explicit=False)
    phases = []
    for name, section in (("agent", agent), ("verifier", verifier)):
        if section.get("network_mode") is None:
            if section.get("allowed_hosts") is not None:
                raise HarborTaskError(
                    task.name,
                    f"{where}{name}.allowed_hosts",
                    f"is only valid with {name}.network_mode = 'allowlist'",
                )
            phases.append(baseline)
            continue
        phases.append(
            _network(
                task,
                f"{where}{name}",
                str(section["network_mode"]),
                section.get("allowed_hosts"),
                explicit=True,
            )
        )
    return phases[0], phases[1]
