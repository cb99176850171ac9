"""The default data dir lies outside the checkout and the default source roots (issue 21).

A session's pytest looks for its configuration from its workspace (`{data_dir}/runtimes/...`)
upwards; a data dir inside the checkout met the checkout's own `pyproject.toml` (a false zero,
tests/integration/test_pytest_rootdir.py). And a data dir under the worker's working directory
(the default source root) put the stack's secrets within a task's reach.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polar.assets import checkout_root
from polar.settings import Settings, default_data_dir


@pytest.fixture
def user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An ordinary user whose HOME is `tmp_path/home`, no POLAR_DATA_DIR or XDG_STATE_HOME."""
    home = tmp_path / "home"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("POLAR_DATA_DIR", raising=False)
    return home


def test_a_users_default_is_its_xdg_state_dir(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().data_dir == user / ".local" / "state" / "polar"
    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")
    assert Settings().data_dir == Path("/srv/state/polar")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # not absolute: ignored, as XDG says
    assert Settings().data_dir == user / ".local" / "state" / "polar"


def test_roots_default_is_var_lib_polar(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's home is closed to the sandbox users, who must reach their session dirs."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("XDG_STATE_HOME", "/root/.local/state")
    assert default_data_dir() == Path("/var/lib/polar")


def test_polar_data_dir_still_wins(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLAR_DATA_DIR", ".polar")
    assert Settings().data_dir == Path(".polar")


@pytest.mark.parametrize("euid", [0, 1000])
def test_the_default_is_outside_the_checkout_and_the_working_directory(
    euid: int, user: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    data = Settings().data_dir.resolve()
    root = checkout_root()
    assert root is not None  # the unit lane runs in the checkout
    for outside in (root, Path.cwd()):
        assert not data.is_relative_to(outside.resolve()), (data, outside)
