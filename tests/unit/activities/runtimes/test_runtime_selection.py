"""activities/runtimes/selection.py: what `kind: auto` stands for, in its order of preference.

The host probes are replaced here (a unit test reaches no engine); the real probes run in
tests/system/test_bwrap_sandbox.py, as a worker that is not root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from activities.runtimes import get_runtime, selection
from activities.runtimes.kinds.local import LocalRuntime
from polar.tasks.spec import RuntimeSpec


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    selection.resolve_auto.cache_clear()
    yield
    selection.resolve_auto.cache_clear()


def _host(monkeypatch: pytest.MonkeyPatch, docker: bool, podman: bool) -> None:
    monkeypatch.setattr(selection, "docker_reachable", lambda: (docker, "docker probe"))
    monkeypatch.setattr(selection, "podman_usable", lambda: (podman, "podman probe"))


@pytest.mark.parametrize(
    ("docker", "podman", "kind"),
    [(True, True, "docker"), (False, True, "podman"), (False, False, "local")],
)
def test_auto_prefers_docker_then_podman_then_local(
    monkeypatch: pytest.MonkeyPatch, docker: bool, podman: bool, kind: str
) -> None:
    _host(monkeypatch, docker, podman)
    choice = selection.resolve_auto()
    assert choice.kind == kind
    assert selection.concrete("auto") == kind
    assert selection.concrete("podman") == "podman"  # a named kind is never replaced


def test_local_choice_says_why_the_engines_were_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _host(monkeypatch, False, False)
    why = selection.resolve_auto().why
    assert "docker probe" in why and "podman probe" in why and "sealed by" in why


def test_auto_is_probed_once_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(selection, "docker_reachable", lambda: calls.append(1) or (False, "x"))
    monkeypatch.setattr(selection, "podman_usable", lambda: (False, "y"))
    for _ in range(3):
        selection.resolve_auto()
    assert calls == [1]


def test_get_runtime_and_the_task_spec_take_auto(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    _host(monkeypatch, False, False)
    assert RuntimeSpec.model_validate({"kind": "auto"}).kind == "auto"
    runtime = get_runtime("auto", tmp_path)  # type: ignore[arg-type]
    assert isinstance(runtime, LocalRuntime) and runtime.kind == "local"
