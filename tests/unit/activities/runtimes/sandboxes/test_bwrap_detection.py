"""Which sysctls forbid unprivileged user namespaces (the bwrap sandbox's first check)."""

from __future__ import annotations

from activities.runtimes.sandboxes.bwrap import userns_forbidden


def _reads(values: dict[str, str]) -> object:
    return lambda path: values.get(path)


def test_a_host_without_those_sysctls_does_not_forbid_them() -> None:
    assert userns_forbidden(_reads({})) is None  # type: ignore[arg-type]


def test_each_forbidding_sysctl_is_named() -> None:
    cases = {
        "/proc/sys/user/max_user_namespaces": ("0", "user.max_user_namespaces = 0"),
        "/proc/sys/kernel/unprivileged_userns_clone": ("0", "unprivileged_userns_clone = 0"),
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": ("1", "apparmor"),
    }
    for path, (value, named) in cases.items():
        why = userns_forbidden(_reads({path: value}))  # type: ignore[arg-type]
        assert why is not None and named in why, (path, why)
    allowed = {
        "/proc/sys/user/max_user_namespaces": "96364",
        "/proc/sys/kernel/unprivileged_userns_clone": "1",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "0",
    }
    assert userns_forbidden(_reads(allowed)) is None  # type: ignore[arg-type]
