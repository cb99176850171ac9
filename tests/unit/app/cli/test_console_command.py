"""`polar console` is a command, and `polar dev up` runs the console beside the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.devstack import DevStack
from app.devstack.services import console_service
from polar.settings import Settings


def test_polar_console_is_a_command() -> None:
    result = CliRunner().invoke(app, ["console", "--help"])
    assert result.exit_code == 0, result.output
    assert "--port" in result.output and "read-only" in result.output


def test_the_dev_stack_runs_the_console_with_the_served_models_tokenizer(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, console_port=9555, model_dir=tmp_path / "model")
    service = console_service(settings, {"POLAR_X": "1"})
    assert service.argv[-2:] == ["app.cli", "console"]
    assert service.env == {"POLAR_X": "1", "POLAR_CONSOLE_TOKENIZER_DIR": str(tmp_path / "model")}
    assert not service.ready()  # nothing listens on 9555
    own = Settings(data_dir=tmp_path, console_tokenizer_dir=tmp_path / "tok", model_dir=tmp_path)
    assert "POLAR_CONSOLE_TOKENIZER_DIR" not in console_service(own, {}).env
    stack = DevStack(settings, with_model=False, workers=1)
    names = [s.name for s in stack.services()]
    assert names.index("gateway") < names.index("console") < names.index("worker")
    assert "console" in stack.services_names()


def test_the_demo_links_its_task_page(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli.demo import console_link
    from polar.settings import get_settings

    monkeypatch.setenv("POLAR_CONSOLE_PUBLIC_URL", "https://console.example/")
    get_settings.cache_clear()
    try:
        assert console_link("task-demo-1a2b") == "https://console.example/tasks/task-demo-1a2b"
    finally:
        get_settings.cache_clear()
