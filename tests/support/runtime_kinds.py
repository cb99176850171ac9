"""The runtime kinds a test runs in, checked against the registry (activities/runtimes:
`RUNTIMES`): a test that lists the kinds it covers, each with its own setup, fails to collect
once a kind is registered that it does not list, so a new kind is never silently untested."""

from __future__ import annotations

from activities.runtimes import RUNTIMES

__all__ = ["every_runtime_kind"]


def every_runtime_kind(kinds: list[str], variants: tuple[str, ...] = ("bwrap",)) -> list[str]:
    """`kinds`, checked to name every registered runtime kind and no other: `podman-root`
    counts as `podman`, and `variants` (`bwrap`: the local runtime in the sandbox of a
    worker that is not root) are extra ways of running a registered kind."""
    named = {kind.split("-", 1)[0] for kind in kinds} - set(variants)
    registered = set(RUNTIMES.kinds())
    if named != registered:
        raise AssertionError(
            f"the test's runtime kinds {sorted(named)} are not the registered ones "
            f"{sorted(registered)}: give the missing kinds their setup here"
        )
    return kinds
