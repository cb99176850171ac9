"""Harbor's `artifacts` and `[[verifier.collect]]` (task-level and per step) read into
`RuntimeSpec.collect` / `TaskStep.collect` as harbor 0.25 reads them (models/task/config.py
ArtifactConfig, VerifierCollectConfig; the implicit /logs/artifacts convention entry)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from polar.tasks.collect_spec import ArtifactPath, CollectCommand, CollectSpec
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.spec import RuntimeSpec, TaskSpec
from tests.support.paths import REPO

FEATURES = REPO / "examples" / "harbor-features"
TASK = FEATURES / "artifact-report"


def _copy(tmp_path: Path, name: str = "artifact-report") -> Path:
    return Path(shutil.copytree(FEATURES / name, tmp_path / name))


def test_the_example_maps_its_artifacts_and_hook() -> None:
    (spec,) = load_harbor_tasks(TASK)
    collect = spec.runtime.collect
    assert collect.artifacts == [
        ArtifactPath(source="/logs/artifacts"),  # Harbor's convention dir, first
        ArtifactPath(source="/srv/report/summary.txt"),
        ArtifactPath(source="/var/snapshot", destination="snapshot", exclude=["*.tmp"]),
    ]
    (hook,) = collect.commands
    assert hook.on == "main" and hook.timeout_s == 30.0 and hook.user is None
    assert [a.kept_as for a in collect.artifacts] == [
        "logs/artifacts",
        "srv/report/summary.txt",
        "snapshot",
    ]
    # it travels in the spec, and a task without any leaves it out (older workers)
    assert spec.model_dump(mode="json")["runtime"]["collect"]["commands"][0]["timeout_s"] == 30
    (plain,) = load_harbor_tasks(REPO / "examples" / "harbor" / "hello-file")
    assert plain.runtime.collect.empty and "collect" not in plain.runtime.model_dump()
    assert plain.collect_for(None) is None


def test_a_relative_source_an_explicit_convention_entry_and_users(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text().replace(
        '"/srv/report/summary.txt",',
        '"srv/report/summary.txt", { source = "/logs/artifacts", exclude = ["*.bin"] },',
    )
    text = text.replace("timeout_sec = 30\n\n", "timeout_sec = 30\nuser = 1000\n\n")
    toml.write_text(text)
    (spec,) = load_harbor_tasks(task)
    sources = [a.source for a in spec.runtime.collect.artifacts]
    # taken from / as docker cp takes it; the task's own convention entry replaces Harbor's
    assert sources == ["/srv/report/summary.txt", "/logs/artifacts", "/var/snapshot"]
    assert spec.runtime.collect.commands[0].user == "1000"


def test_a_steps_collection_comes_after_the_tasks(tmp_path: Path) -> None:
    task = _copy(tmp_path, "two-step-notes")
    toml = task / "task.toml"
    text = toml.read_text().replace(
        '[[steps]]\nname = "extend"',
        '[[steps]]\nname = "extend"\nartifacts = ["/tmp/extend.log"]\n\n'
        '[[steps.verifier.collect]]\ncommand = "date > /tmp/extend.log"',
    )
    toml.write_text(text)
    (spec,) = load_harbor_tasks(task)
    write, extend = spec.steps
    # only a step declares: the convention dir is collected on every step's pass, as Harbor's
    assert [a.source for a in spec.runtime.collect.artifacts] == ["/logs/artifacts"]
    assert write.collect.empty and [a.source for a in extend.collect.artifacts] == [
        "/tmp/extend.log"
    ]
    both = spec.collect_for(extend)
    assert both is not None
    assert [a.source for a in both.artifacts] == ["/logs/artifacts", "/tmp/extend.log"]
    assert [c.command for c in both.commands] == ["date > /tmp/extend.log"]
    assert spec.collect_for(write) == spec.runtime.collect


def test_sidecar_artifacts_and_hooks_name_a_compose_service(tmp_path: Path) -> None:
    task = _copy(tmp_path, "compose-lookup")
    toml = task / "task.toml"
    toml.write_text(
        'artifacts = [{ source = "/srv/word.txt", service = "lookup" }]\n'
        + toml.read_text()
        + '\n[[verifier.collect]]\ncommand = "ls /srv > /srv/listing.txt"\nservice = "lookup"\n'
    )
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.collect.services() == {"lookup"}
    text = toml.read_text().replace('source = "/srv/word.txt"', 'source = "srv/word.txt"')
    toml.write_text(text)
    with pytest.raises(HarborTaskError, match="a sidecar's source is absolute") as info:
        load_harbor_tasks(task)
    assert info.value.field == "artifacts[0].source"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ('{ source = "/x", destination = "manifest.json" }', "artifacts[0]"),
        ('{ source = "/x", destination = "/abs" }', "artifacts[0]"),
        ('{ source = "/x", destination = "a/../../b" }', "artifacts[0]"),
        ('{ destination = "x" }', "artifacts[0].source"),
        ('{ source = "/x", exclude = "*.log" }', "artifacts[0].exclude"),
        ('{ source = "/x", kind = "file" }', "artifacts[0].kind"),
        ('"/"', "artifacts[0]"),
        ("3", "artifacts[0]"),
    ],
)
def test_bad_artifacts_are_refused_naming_the_field(tmp_path: Path, entry: str, field: str) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text()
    start, end = text.index("artifacts = ["), text.index("]\n\n[task]")
    toml.write_text(text[:start] + f"artifacts = [{entry}" + text[end:])
    with pytest.raises(HarborTaskError) as info:
        load_harbor_tasks(task)
    assert info.value.field == field and info.value.task == "polar/artifact-report", str(info.value)


def test_the_spec_checks_services_and_runtimes() -> None:
    collect = CollectSpec(commands=[CollectCommand(command="true", service="db")])
    with pytest.raises(ValidationError, match="not sidecars of the runtime"):
        RuntimeSpec(kind="docker", collect=collect)
    with pytest.raises(ValidationError, match="for container runtimes"):
        RuntimeSpec(kind="local", collect=CollectSpec(artifacts=[ArtifactPath(source="/x")]))
    (spec,) = load_harbor_tasks(TASK)
    data = spec.model_dump(mode="json")
    data["steps"] = [
        {
            "name": "a",
            "instruction": "x",
            "collect": {"artifacts": [{"source": "/y", "service": "db"}]},
        }
    ]
    with pytest.raises(ValidationError, match=r"steps\.a: collect names services"):
        TaskSpec.model_validate(data)
