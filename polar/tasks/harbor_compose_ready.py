"""A compose service's readiness keys → Polar's own (polar/tasks/sidecar_spec.py).

`healthcheck`: `test` as `[CMD, arg...]` (an argv), `[CMD-SHELL, line]` or a string (a shell
line), `[NONE]` or `disable: true` (none); `interval`, `timeout`, `start_period` as compose
durations (`5s`, `1m30s`, `500ms`, `1.5s`: a number and a unit of ns, us, ms, s, m, h, or
several; `0` or an unset key: docker's default, 30 s, 30 s and 0 s) read into seconds;
`retries` an integer (0 or unset: 3); `start_interval` is read and checked but not used
(docker 20.10 and podman 4.3 have none: probes in the start period come every `interval`).
A `healthcheck` without `test` (an image's own HEALTHCHECK with other timings) is refused:
Polar runs no image's own healthcheck.

`depends_on`: a list of service names (each `service_started`) or a table of names to
`{condition, restart, required}` (`condition`: `service_started`, `service_healthy`,
`service_completed_successfully`; `restart` is accepted: a sidecar is never restarted;
`required: false` is refused). Each error names the task, the service and the key.
"""

from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import ValidationError

from polar.tasks.harbor_toml import HarborTask, HarborTaskError
from polar.tasks.sidecar_spec import Condition, Healthcheck

__all__ = ["compose_depends_on", "compose_healthcheck", "parse_duration"]

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_HEALTH_KEYS = {"test", "interval", "timeout", "retries", "start_period", "start_interval"}
_CONDITIONS: tuple[str, ...] = get_args(Condition)
_DURATIONS = {"interval": "interval_s", "timeout": "timeout_s", "start_period": "start_period_s"}
"""compose's duration keys → Healthcheck's fields (`start_interval` is read, not kept)"""
_KEYS = {field: key for key, field in _DURATIONS.items()} | {"retries": "retries"}
"""Healthcheck's fields → compose's keys (to name the key of a refused value)"""


def parse_duration(text: Any) -> float:
    """Seconds in a compose duration (`5s`, `1m30s`, `250ms`, `0`); ValueError saying why."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration: write a string such as '5s' or '1m30s'")
    value = text.strip()
    if value == "0":
        return 0.0
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(
            f"{text!r} is not a duration: a number and a unit (ns, us, ms, s, m, h), "
            "e.g. '5s', '1m30s', '500ms'"
        )
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def compose_healthcheck(task: HarborTask, where: str, value: Any) -> Healthcheck | None:
    """A service's `healthcheck` (`where`: its place, e.g. `...: services.db`), or None."""
    here = f"{where}.healthcheck"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HarborTaskError(task.name, here, "must be a table")
    if value.get("disable") is True:
        return None
    unknown = sorted(set(value) - _HEALTH_KEYS - {"disable"})
    if unknown:
        raise HarborTaskError(
            task.name, f"{here}.{unknown[0]}", f"not a healthcheck key ({sorted(_HEALTH_KEYS)})"
        )
    if value.get("disable") not in (None, False):
        raise HarborTaskError(task.name, f"{here}.disable", "must be true or false")
    command = _test(task, f"{here}.test", value.get("test"))
    if command is None:
        return None
    fields: dict[str, Any] = {"command": command}
    for key in (*_DURATIONS, "start_interval"):
        if value.get(key) is None:
            continue
        try:
            seconds = parse_duration(value[key])
        except ValueError as exc:
            raise HarborTaskError(task.name, f"{here}.{key}", str(exc)) from None
        field = _DURATIONS.get(key)
        if field is not None and (seconds > 0 or key == "start_period"):
            fields[field] = seconds
    retries = value.get("retries")
    if retries is not None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise HarborTaskError(task.name, f"{here}.retries", "must be a whole number")
        if retries:
            fields["retries"] = retries
    try:
        return Healthcheck(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        key = _KEYS.get(field, "test")
        raise HarborTaskError(task.name, f"{here}.{key}", error["msg"]) from None


def _test(task: HarborTask, where: str, value: Any) -> list[str] | str | None:
    if value is None:
        raise HarborTaskError(
            task.name,
            where,
            "missing: Polar runs no image's own HEALTHCHECK, give the command here",
        )
    if isinstance(value, str):
        if not value.strip():
            raise HarborTaskError(task.name, where, "an empty command")
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
        raise HarborTaskError(task.name, where, "must be a string or a list of strings")
    form, rest = value[0], value[1:]
    if form == "NONE":
        return None
    if form == "CMD" and rest:
        return rest
    if form == "CMD-SHELL" and len(rest) == 1 and rest[0].strip():
        return rest[0]
    raise HarborTaskError(
        task.name,
        where,
        "a list must be [CMD, arg, ...], [CMD-SHELL, 'line'] or [NONE]",
    )


def compose_depends_on(task: HarborTask, where: str, value: Any) -> dict[str, Condition]:
    """A service's `depends_on`: each service it names and the condition it waits for."""
    here = f"{where}.depends_on"
    if value is None:
        return {}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return dict.fromkeys(value, "service_started")
    if not isinstance(value, dict):
        raise HarborTaskError(task.name, here, "must be a list of services or a table")
    found: dict[str, Condition] = {}
    for name, spec in value.items():
        at = f"{here}.{name}"
        spec = {} if spec is None else spec
        if not isinstance(spec, dict):
            raise HarborTaskError(task.name, at, "must be a table (condition, restart)")
        unknown = sorted(set(spec) - {"condition", "restart", "required"})
        if unknown:
            raise HarborTaskError(task.name, f"{at}.{unknown[0]}", "not a depends_on key")
        if spec.get("required", True) is not True:
            raise HarborTaskError(
                task.name, f"{at}.required", "not supported: every dependency is required"
            )
        condition = spec.get("condition", "service_started")
        if condition not in _CONDITIONS:
            raise HarborTaskError(
                task.name, f"{at}.condition", f"{condition!r} is not one of {list(_CONDITIONS)}"
            )
        found[str(name)] = condition
    return found
