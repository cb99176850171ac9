"""A runtime kind is a name the registry checks (issue 33, item 2): the task spec takes any
kind by name, `check_runtime` (the CLI, the worker before it prepares) refuses one no
runtime serves naming the known kinds, and the lists of kinds come from `RUNTIMES`, so a
kind joins with one registration line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.init_activities import InitActivities
from activities.runtimes import (
    RUNTIMES,
    Runtime,
    RuntimePlace,
    UnknownRuntime,
    check_runtime,
    get_runtime,
)
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.selection import sweep_kinds
from activities.task_kinds import check_task_kinds
from polar.contracts import PrepareRequest
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import RuntimeSpec, TaskSpec
from tests.support.runtime_kinds import every_runtime_kind


def _scratch(root: Path, place: RuntimePlace) -> Runtime:
    """A trivial kind: the local runtime under another name."""
    return LocalRuntime(root, host_id=place.host_id, settings=place.settings)


@pytest.fixture
def scratch() -> Iterator[None]:
    RUNTIMES.register("scratch", _scratch)  # the one registration line
    try:
        yield
    finally:
        RUNTIMES.unregister("scratch")


def _task(runtime: dict[str, object]) -> TaskSpec:
    return TaskSpec.model_validate(
        {"task_id": "t", "harness": {"command": "true"}, "runtime": runtime}
    )


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(UnknownRuntime) as info:
        check_task_kinds(_task({"kind": "scratch"}))
    message = str(info.value)
    assert message.startswith("runtime.kind: unknown runtime kind 'scratch' (known: ")
    assert all(kind in message for kind in RUNTIMES.kinds()) and "'auto'" in message
    check_runtime(RuntimeSpec(kind="auto"))  # `auto` always has a runtime


def test_a_registered_kind_is_checked_listed_and_made(scratch: None, tmp_path: Path) -> None:
    task = check_task_kinds(_task({"kind": "scratch"}))
    assert task.runtime.model_dump_json() == RuntimeSpec(kind="scratch").model_dump_json()
    assert "scratch" in sweep_kinds()  # the host sweep looks at every registered kind
    assert isinstance(get_runtime("scratch", tmp_path), LocalRuntime)
    with pytest.raises(AssertionError, match="not the registered ones"):
        every_runtime_kind(["local", "docker", "podman"])  # a test list missing the new kind


def test_every_kind_the_tests_list_is_registered() -> None:
    assert every_runtime_kind(["local", "bwrap", "docker", "podman-root"])
    with pytest.raises(AssertionError):
        every_runtime_kind(["local", "docker"])


def test_a_runtime_spec_dumps_as_it_did() -> None:
    """The JSON a stored history holds reads back and dumps the same (the kind a name)."""
    stored = (
        '{"kind":"docker","image":"img","cpus":2.0,"memory":"4g","pids":1024,"disk":"10g",'
        '"wall_clock_s":14400.0,"prepare":[]}'
    )
    assert RuntimeSpec.model_validate_json(stored).model_dump_json() == stored


async def test_prepare_refuses_an_unknown_kind_without_retry(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path))
    acts = InitActivities(settings, Storage(settings))
    request = PrepareRequest(session_id="s-x", task_id="t", runtime=RuntimeSpec(kind="lxc"))
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.prepare_runtime, request)
    assert info.value.non_retryable and info.value.type == "InvalidTaskSpec"
    assert info.value.message.startswith("runtime.kind: unknown runtime kind 'lxc'")
    assert not (tmp_path / "runtimes").exists()  # nothing was prepared
