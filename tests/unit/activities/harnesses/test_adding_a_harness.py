"""Adding a harness kind is its own module and one registration line (issue 33, item 2).

The `echo` kind below is defined wholly in this file (its config model and its adapter) and
joins with one line, `ADAPTERS.register("echo", ...)`: no product file is touched. With it,
the task spec takes `{"kind": "echo", "echo": {...}}`, the worker's and the CLI's checks
validate the config by the kind's own model, the kinds are listed from the registry, and an
unknown kind or an invalid config is refused with a message naming the known kinds or the
field.
"""

from __future__ import annotations

import inspect
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import Field
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.harnesses import (
    ADAPTERS,
    HarnessConfig,
    HarnessContext,
    InvalidKindConfig,
    Launch,
    UnknownHarness,
    check_harness,
    get_adapter,
)
from activities.harnesses.base import polar_env
from activities.run_activities import RunActivities
from activities.task_kinds import check_task_kinds
from polar.contracts import HarnessRequest, RuntimeHandle
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import HarnessSpec, TaskSpec


class EchoConfig(HarnessConfig):
    """`{"kind": "echo", "echo": {"text": "hi"}}`."""

    text: str = Field(min_length=1)
    times: int = Field(default=1, ge=1)


class EchoAdapter:
    """Echoes its text (a trivial kind: no config files, no native logs)."""

    kind: ClassVar[str] = "echo"
    config_model: ClassVar[type[HarnessConfig]] = EchoConfig

    def prepare(self, home: Path, workdir: str, ctx: HarnessContext) -> Launch:
        config = EchoConfig.of(ctx.spec)
        command = "; ".join([f"echo {shlex.quote(config.text)}"] * config.times)
        return Launch(command=command, env=polar_env(ctx))

    def native_logs(self, home: Path) -> list[tuple[str, Path]]:
        return []


@pytest.fixture
def echo() -> Iterator[None]:
    ADAPTERS.register("echo", EchoAdapter())  # the one registration line
    try:
        yield
    finally:
        ADAPTERS.unregister("echo")


def _task(harness: dict[str, object]) -> TaskSpec:
    return TaskSpec.model_validate({"task_id": "t", "instruction": "x", "harness": harness})


def test_the_kind_is_defined_in_this_file_alone() -> None:
    """The files the new kind needed: this test only, no product file."""
    files = {Path(inspect.getfile(c)) for c in (EchoConfig, EchoAdapter)}
    product_files_touched = files - {Path(__file__)}
    assert len(product_files_touched) == 0


def test_a_registered_kind_is_validated_by_its_own_model(echo: None, tmp_path: Path) -> None:
    task = _task({"kind": "echo", "echo": {"text": "hi"}, "args": ["-n"]})
    checked = check_task_kinds(task)  # what `polar submit` runs
    config = check_harness(checked.harness)  # what the worker runs before the harness
    assert isinstance(config, EchoConfig) and config.text == "hi"
    # written back as its model writes it, under the kind's key; the shared fields kept
    dumped = checked.harness.model_dump()
    assert dumped["echo"] == {"text": "hi", "times": 1} and dumped["args"] == ["-n"]
    assert "echo" in ADAPTERS.kinds()
    ctx = HarnessContext(
        spec=checked.harness,
        instruction="x",
        gateway_url="http://127.0.0.1:1",
        api_key="k",
        session_id="s",
        task_id="t",
    )
    assert get_adapter("echo").prepare(tmp_path, str(tmp_path), ctx).command == "echo hi"


def test_an_invalid_config_names_the_field(echo: None) -> None:
    with pytest.raises(InvalidKindConfig, match=r"harness\.echo\.times: Input should"):
        check_task_kinds(_task({"kind": "echo", "echo": {"text": "hi", "times": 0}}))
    with pytest.raises(InvalidKindConfig, match=r"harness\.echo\.text: Field required"):
        check_task_kinds(_task({"kind": "echo"}))
    with pytest.raises(InvalidKindConfig, match="'command' is only for kind 'command'"):
        check_task_kinds(_task({"kind": "echo", "echo": {"text": "hi"}, "command": "true"}))
    with pytest.raises(ValueError, match="unknown field 'echo'.*here 'command'"):
        _task({"kind": "command", "command": "true", "echo": {"text": "hi"}})


def test_an_unknown_kind_names_the_known_ones() -> None:
    """Without its registration line the kind is unknown; the message lists the registry."""
    with pytest.raises(UnknownHarness) as info:
        check_task_kinds(_task({"kind": "echo", "echo": {"text": "hi"}}))
    message = str(info.value)
    assert message.startswith("harness.kind: unknown harness kind 'echo'")
    assert all(kind in message for kind in ADAPTERS.kinds())


async def test_the_run_activity_refuses_an_invalid_config_without_retry(
    echo: None, tmp_path: Path
) -> None:
    settings = Settings(data_dir=str(tmp_path))
    acts = RunActivities(settings, Storage(settings))
    request = HarnessRequest(
        session_id="s-echo",
        task_id="t",
        runtime=RuntimeHandle(kind="local", session_id="s-echo", workdir="", host=""),
        harness=HarnessSpec.model_validate({"kind": "echo", "echo": {"text": ""}}),
        instruction="x",
        budget_s=60,
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.run_harness, request)
    assert info.value.non_retryable and info.value.type == "InvalidTaskSpec"
    assert "harness.echo.text" in info.value.message
    assert not (tmp_path / "runtimes").exists()  # no runtime was touched
