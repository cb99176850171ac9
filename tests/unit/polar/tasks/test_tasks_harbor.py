"""The Harbor loader (polar/tasks/harbor.py): the bundled dataset loads into TaskSpecs with
the task's fields; what Polar cannot honour is refused naming the task and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from activities.evaluators.harbor import HarborConfig
from app.cli import app
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_environment import base_images, environment_image, resolved_image_map
from polar.tasks.harbor_images import _mapped_dockerfile
from polar.tasks.harbor_toml import HarborTaskError, read_harbor_task
from polar.tasks.spec import EvaluatorSpec, HarnessSpec, TaskSpec
from tests.support.paths import REPO

EXAMPLES = REPO / "examples" / "harbor"
TPU = 'tpu = { type = "v6e", topology = "2x2" }'


def _copy(tmp_path: Path, name: str = "hello-file") -> Path:
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / name))


def _append(task: Path, text: str) -> None:
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + "\n" + text + "\n")


def test_the_bundled_dataset_loads_with_the_tasks_fields() -> None:
    specs = {s.task_id: s for s in load_harbor_tasks(EXAMPLES)}
    assert {"polar__hello-file", "polar__fix-add", "polar__csv-sum"} <= set(specs)
    hello = specs["polar__hello-file"]
    assert hello.instruction.startswith("Create a file named `hello.txt`")  # canary stripped
    assert hello.runtime.kind == "docker" and hello.runtime.image.startswith("polar/harbor-env:")
    assert (hello.runtime.cpus, hello.runtime.memory, hello.runtime.disk) == (1, "1024m", "2048m")
    assert hello.timeouts.harness_s == 300 and hello.timeouts.evaluate_s == 60 + 300
    assert hello.evaluator.kind == "harbor" and hello.evaluator.harbor is not None
    assert _verifier(hello.evaluator).timeout_s == 60
    assert _verifier(hello.evaluator).tests_dir == str(EXAMPLES.resolve() / "hello-file" / "tests")
    assert hello.metadata["harbor"]["metadata"] == {"difficulty": "easy", "category": "shell"}
    assert hello.metadata["harbor"]["solution_dir"].endswith("hello-file/solution")
    fix = specs["polar__fix-add"]
    assert fix.evaluator.harbor is not None and _verifier(fix.evaluator).user is None  # root
    assert _verifier(fix.evaluator).env == {"PYTHONDONTWRITEBYTECODE": "1"}
    # a TaskSpec as any other: it survives its JSON round trip (the workflow's input)
    for spec in specs.values():
        assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec


def test_the_agent_user_is_the_harness_user_of_the_runtime(tmp_path: Path) -> None:
    """`[agent].user` (a name or a uid, as Harbor takes it) is the runtime's `harness_user`,
    whatever harness is given; the evaluator keeps the verifier's user; a value no engine
    runs as is refused naming the field."""
    (spec,) = load_harbor_tasks(EXAMPLES / "agent-user")
    assert spec.runtime.harness_user == "agent" and _verifier(spec.evaluator).user is None
    assert '"harness_user":"agent"' in spec.runtime.model_dump_json()
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text()
    toml.write_text(text.replace("[agent]\n", "[agent]\nuser = 1000\n", 1))
    (spec,) = load_harbor_tasks(task, harness=HarnessSpec(kind="command", command="true"))
    assert spec.runtime.harness_user == "1000"
    (plain,) = load_harbor_tasks(EXAMPLES / "hello-file")
    assert plain.runtime.harness_user is None
    assert "harness_user" not in plain.runtime.model_dump_json()  # older workers read it
    for bad in ('"a b"', '"-1"', "true", "-5", '"x;rm -rf /"'):
        toml.write_text(text.replace("[agent]\n", f"[agent]\nuser = {bad}\n", 1))
        with pytest.raises(HarborTaskError, match=r"agent\.user"):
            load_harbor_tasks(task)


def test_gpus_are_the_runtimes_and_a_tpu_is_refused_for_this_deployment(tmp_path: Path) -> None:
    """`gpus` and `gpu_types` go to the runtime (placed on workers declaring them); types
    without a count, or a count that is not one, are refused by name; a TPU slice is refused
    for a reason about this deployment."""
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text()

    def with_env(lines: str) -> None:
        toml.write_text(text.replace("[environment]\n", f"[environment]\n{lines}\n", 1))

    with_env('gpus = 2\ngpu_types = ["H100", "A100"]')
    (spec,) = load_harbor_tasks(task)
    assert (spec.runtime.gpus, spec.runtime.gpu_types) == (2, ["H100", "A100"])
    with_env("gpus = 0")
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.gpus == 0 and spec.runtime.gpu_types == []
    for lines, field in (
        ('gpu_types = ["H100"]', "environment.gpu_types"),
        ('gpus = "two"', "environment.gpus"),
        ("gpus = true", "environment.gpus"),
        ("gpus = 1\ngpu_types = [1]", "environment.gpu_types"),
    ):
        with_env(lines)
        with pytest.raises(HarborTaskError, match=field.replace(".", r"\.")):
            load_harbor_tasks(task)
    with_env(TPU)
    with pytest.raises(HarborTaskError, match="environment.tpu.*none of which offers a TPU"):
        load_harbor_tasks(task)


def test_a_single_task_dir_loads_with_the_given_harness(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (spec,) = load_harbor_tasks(
        task, harness=HarnessSpec(kind="command", command="true"), num_sessions=4
    )
    assert spec.harness.kind == "command" and spec.num_sessions == 4


def test_the_image_is_keyed_on_the_environments_content(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    before = environment_image(read_harbor_task(task))
    assert environment_image(read_harbor_task(task)) == before
    (task / "environment" / "extra.txt").write_text("x")
    assert environment_image(read_harbor_task(task)) != before


def test_a_prebuilt_image_is_used_as_is_or_mapped(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'network_mode = "no-network"',
            'network_mode = "no-network"\ndocker_image = "ghcr.io/x/y:1"',
        )
    )
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.image == "ghcr.io/x/y:1"
    (spec,) = load_harbor_tasks(task, image_map={"ghcr.io/x/y:1": "polar/runtime:py311"})
    assert spec.runtime.image == "polar/runtime:py311"


def test_env_templates_resolve_from_the_host(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    _append(task, '[verifier.env]\nA = "${POLAR_T_A}"\nB = "${POLAR_T_B:-dflt}"')
    (spec,) = load_harbor_tasks(task, environ={"POLAR_T_A": "a"})
    assert spec.evaluator.harbor is not None
    assert _verifier(spec.evaluator).env == {"A": "a", "B": "dflt"}
    with pytest.raises(HarborTaskError, match=r"verifier\.env\.A.*POLAR_T_A"):
        load_harbor_tasks(task, environ={})


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ('[[steps]]\nname = "one"\n[steps.agent]\nuser = "a b"', "steps.one.agent.user"),
        ('[[steps]]\nname = "one"\n[steps.verifier]\nsurprise = 1', "steps.one.verifier.surprise"),
        ('[environment]\ntpu = { type = "v6e", topology = "2x2" }', "environment.tpu"),
        ('artifacts = ["/tmp/../etc"]', "artifacts[0]"),
        ('artifacts = [{source = "/x", service = "db"}]', "artifacts[0].service"),
        (
            '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ndocker_image = "x"',
            "verifier.environment",
        ),
        ('[[verifier.collect]]\ncommand = ""', "verifier.collect[0].command"),
        ('[[verifier.collect]]\ncommand = "true"\nwhen = 1', "verifier.collect[0].when"),
        ('[environment.healthcheck]\ncommand = ""', "environment.healthcheck.command"),
        (
            '[environment.healthcheck]\ncommand = "true"\nretries = -1',
            "environment.healthcheck.retries",
        ),
        ('[environment.healthcheck]\ncommand = "true"\nevery = 1', "environment.healthcheck.every"),
        ('[agent]\nnetwork_mode = "dial-up"', "agent.network_mode"),
        ('[verifier]\nallowed_hosts = ["pypi.org"]', "verifier.allowed_hosts"),
        (
            '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["http://x/"]',
            "agent.allowed_hosts",
        ),
        ("[agent]\nsurprise = 1", "agent.surprise"),
        ('[environment]\nos = "windows"', "environment.os"),
    ],
)
def test_what_polar_cannot_honour_is_refused_by_name(tmp_path: Path, edit: str, field: str) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text()
    section = edit.split("\n", 1)[0]
    if section.startswith("[") and not section.startswith("[[") and section in text:
        # add the key to the existing table
        text = text.replace(section, edit, 1)
    elif edit.startswith("artifacts"):
        text = edit + "\n" + text
    else:
        text += "\n" + edit + "\n"
    toml.write_text(text)
    with pytest.raises(HarborTaskError) as info:
        load_harbor_tasks(task)
    assert info.value.field == field and info.value.task == "polar/hello-file", str(info.value)
    assert f"polar/hello-file: {field}" in str(info.value)


def test_harbors_default_network_loads_as_public(tmp_path: Path) -> None:
    """Unset, Harbor's network is `public`: the agent and the verifier both get it (served
    by the worker's egress proxy where the deployment turns it on, refused elsewhere)."""
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"\n', ""))
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.network.mode == "public" and spec.runtime.network.allowed_hosts == []
    assert spec.evaluator.harbor is not None and _verifier(spec.evaluator).network.mode == "public"
    assert spec.metadata["harbor"]["network_mode"] == "public"
    dumped = spec.model_dump(mode="json")
    assert dumped["runtime"]["network"] == {"mode": "public", "allowed_hosts": []}


def test_a_sealed_task_leaves_network_out_of_its_json() -> None:
    """`no-network` is the sealed session: the field stays out of the JSON (older workers)."""
    spec = next(s for s in load_harbor_tasks(EXAMPLES) if s.task_id == "polar__hello-file")
    assert spec.runtime.network.sealed
    assert "network" not in spec.runtime.model_dump()
    assert spec.evaluator.harbor is not None and "network" not in spec.evaluator.harbor


def test_allowlist_and_phase_overrides_load_as_harbor_resolves_them(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'network_mode = "no-network"',
            'network_mode = "allowlist"\nallowed_hosts = ["PyPI.org.", "*.pythonhosted.org", '
            '"10.1.0.0/16"]',
        )
    )
    (spec,) = load_harbor_tasks(task)
    hosts = ["pypi.org", "*.pythonhosted.org", "10.1.0.0/16"]
    assert spec.runtime.network.mode == "allowlist"
    assert spec.runtime.network.allowed_hosts == hosts
    assert spec.evaluator.harbor is not None
    assert _verifier(spec.evaluator).network == spec.runtime.network  # the verifier inherits it
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec
    # a phase's own mode wins, with its own hosts
    text = toml.read_text()
    text = text.replace("[agent]\n", '[agent]\nnetwork_mode = "no-network"\n', 1)
    text = text.replace(
        "[verifier]\n", '[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.test"]\n', 1
    )
    toml.write_text(text)
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.network.sealed
    assert spec.evaluator.harbor is not None
    assert _verifier(spec.evaluator).network.allowed_hosts == ["a.test"]


@pytest.mark.parametrize(("allow", "mode"), [("true", "public"), ("false", "none")])
def test_the_deprecated_allow_internet_sets_the_baseline(
    tmp_path: Path, allow: str, mode: str
) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace('network_mode = "no-network"', f"allow_internet = {allow}")
    )
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.network.mode == mode


@pytest.mark.parametrize(
    ("dockerfile", "workdir"),
    [
        ("FROM polar/runtime:py311\nWORKDIR /app\n", "/app"),
        ("FROM polar/runtime:py311\nWORKDIR /srv\nWORKDIR app/src\n", "/srv/app/src"),
        ('FROM polar/runtime:py311\nWORKDIR "/opt/project"\nRUN true\n', "/opt/project"),
        # the final stage's: a stage built from an earlier one starts in its WORKDIR
        ("FROM polar/runtime:py311 AS b\nWORKDIR /build\nFROM b\nRUN true\n", "/build"),
        ("FROM polar/runtime:py311 AS b\nWORKDIR /build\nFROM polar/runtime:py311\n", None),
        ("FROM polar/runtime:py311\n", None),
    ],
)
def test_the_dockerfiles_workdir_is_the_sessions_workspace(
    tmp_path: Path, dockerfile: str, workdir: str | None
) -> None:
    task = _copy(tmp_path)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.workdir == (workdir or "/workspace")
    assert ("workdir" in spec.runtime.model_dump()) == (workdir is not None)


def test_environment_workdir_wins_and_a_bad_workdir_is_named(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace("[environment]\n", '[environment]\nworkdir = "/srv/x"\n')
    )
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.workdir == "/srv/x"
    toml.write_text(toml.read_text().replace('workdir = "/srv/x"\n', 'workdir = "/etc"\n'))
    with pytest.raises(HarborTaskError, match="environment.workdir.*system or reserved"):
        load_harbor_tasks(task)
    toml.write_text(toml.read_text().replace('workdir = "/etc"\n', ""))
    for line, why in (("WORKDIR /", "root directory"), ("WORKDIR $HOME/app", "uses a variable")):
        (task / "environment" / "Dockerfile").write_text(f"FROM polar/runtime:py311\n{line}\n")
        with pytest.raises(HarborTaskError, match=f"Dockerfile WORKDIR.*{why}"):
            load_harbor_tasks(task)


def test_a_missing_verifier_and_a_non_task_dir_are_named(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(HarborTaskError, match="tests/test.sh"):
        load_harbor_tasks(task)
    with pytest.raises(HarborTaskError, match="neither a task"):
        load_harbor_tasks(tmp_path / "hello-file" / "tests")


def test_base_images_and_the_mapped_dockerfile(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "environment" / "Dockerfile").write_text(
        "# a comment naming FROM nothing\n"
        "FROM --platform=linux/amd64 python:3.12-slim AS build\n"
        "RUN true\n"
        "FROM build\n"
        "FROM scratch AS empty\n"
        "from debian:bookworm\n"
        "WORKDIR /workspace\n"
    )
    read = read_harbor_task(task)
    assert base_images(read) == ["python:3.12-slim", "debian:bookworm"]
    mapped = _mapped_dockerfile(
        (task / "environment" / "Dockerfile").read_text(),
        {"python:3.12-slim": "polar/runtime:py311"},
    )
    assert "FROM --platform=linux/amd64 polar/runtime:py311 AS build" in mapped
    assert "from debian:bookworm" in mapped and "FROM build" in mapped
    # the map a FROM line uses is part of the image's key; an unused entry is not
    plain = environment_image(read)
    assert environment_image(read, {"unused:1": "x"}) == plain
    assert environment_image(read, {"debian:bookworm": "polar/base:bookworm"}) != plain


def test_copy_from_an_image_uses_the_map_like_from(tmp_path: Path) -> None:
    """`COPY --from=<image>` pulls an image as FROM does: it is a base image, mapped, and
    part of the image's key; `--from=<stage>` and `--from=<index>` are not."""
    task = _copy(tmp_path)
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm AS build\n"
        "FROM polar/runtime:py311\n"
        "COPY --from=build /etc/hostname /a\n"
        "COPY --from=0 /etc/hostname /b\n"
        "COPY --chown=1:1 --from=ghcr.io/astral-sh/uv:0.9 /uv /bin/uv\n"
    )
    read = read_harbor_task(task)
    assert base_images(read) == [
        "debian:bookworm",
        "polar/runtime:py311",
        "ghcr.io/astral-sh/uv:0.9",
    ]
    mapped = _mapped_dockerfile(
        (task / "environment" / "Dockerfile").read_text(),
        {"ghcr.io/astral-sh/uv:0.9": "polar/uv:local", "debian:bookworm": "polar/base:bookworm"},
    )
    assert "COPY --chown=1:1 --from=polar/uv:local /uv /bin/uv" in mapped
    assert "COPY --from=build /etc/hostname /a" in mapped and "--from=0 " in mapped
    assert "FROM polar/base:bookworm AS build" in mapped
    plain = environment_image(read)
    assert environment_image(read, {"ghcr.io/astral-sh/uv:0.9": "polar/uv:local"}) != plain


def test_the_tasks_own_image_map_wins(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    _append(task, '[metadata.polar.image_map]\n"a:1" = "task-a"')
    read = read_harbor_task(task)
    assert resolved_image_map(read, {"a:1": "dep-a", "b:1": "dep-b"}) == {
        "a:1": "task-a",
        "b:1": "dep-b",
    }


def test_the_cli_writes_the_specs_and_refuses_by_name(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "specs"
    result = runner.invoke(app, ["tasks", "load", str(EXAMPLES), "--no-build", "--out", str(out)])
    assert result.exit_code == 0, result.output
    spec = TaskSpec.model_validate_json((out / "polar__fix-add.json").read_text())
    assert spec.evaluator.kind == "harbor" and spec.harness.kind == "pi"
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", f"[environment]\n{TPU}\n", 1))
    roots = {"POLAR_SOURCE_ROOTS": f"{tmp_path},{REPO}"}
    for argv in (["tasks", "load", str(task), "--no-build"], ["submit", str(task), "--no-wait"]):
        result = runner.invoke(app, argv, env=roots)
        assert result.exit_code == 2, result.output
        assert "harbor task polar/hello-file: environment.tpu: not supported" in result.output


# ------------------------------------------------ a verifier that runs the agent's code


def test_a_verifier_that_runs_the_agents_code_as_the_reward_owner_is_warned_about() -> None:
    """The loader's warning (polar/tasks/harbor_verifier.py, verifier_runs_agent_code): on the
    hackable tasks whose test.sh imports or runs the workspace's code, never on the sound
    ones (fix-add and app-workdir run it as `nobody`, test.sh as root)."""
    risks = {
        s.task_id: s.metadata["harbor"].get("verifier_runs_agent_code")
        for s in load_harbor_tasks(EXAMPLES)
    }
    flagged = {task for task, risk in risks.items() if risk}
    assert flagged == {"polar__hackable-self-report", "polar__hackable-workspace-tests"}, risks
    assert "tests/test.sh:4" in risks["polar__hackable-workspace-tests"]  # cd /workspace


@pytest.mark.parametrize(
    ("check", "user", "found"),
    [
        # the module under test imported by the process that writes the reward
        ('import sys\nsys.path.insert(0, "/app")\nfrom slug import slugify\n', "nobody", "py:2"),
        ("import subprocess\nsubprocess.run(['python3', '/app/slug.py'])\n", None, "py:2"),
        # the same, as root, the code under test run as `nobody` by test.sh: no warning
        (
            "import subprocess\nCHILD = 'import sys; sys.path.insert(0, \"/app\")'\n"
            "subprocess.run(['setpriv', '--reuid=65534', '--', 'python3', '-c', CHILD])\n",
            None,
            None,
        ),
        ("print(open('/app/out.txt').read())\n", "nobody", None),  # reads data, runs nothing
    ],
)
def test_the_warning_names_the_line(
    tmp_path: Path, check: str, user: str | None, found: str | None
) -> None:
    task = Path(shutil.copytree(EXAMPLES / "app-workdir", tmp_path / "app-workdir"))
    (task / "tests" / "test_slug.py").write_text(check)
    if user:
        _append(task, "")
        toml = task / "task.toml"
        toml.write_text(
            toml.read_text().replace(
                "timeout_sec = 120.0\n", f'timeout_sec = 120.0\nuser = "{user}"\n'
            )
        )
    (spec,) = load_harbor_tasks(task)
    risk = spec.metadata["harbor"].get("verifier_runs_agent_code")
    assert (risk is None) if found is None else f"tests/test_slug.{found}" in risk, risk


def test_a_test_runner_started_in_the_workspace_is_warned_about(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    script = task / "tests" / "test.sh"
    script.write_text("#!/bin/bash\nuv run pytest /tests/test_outputs.py -rA\n")
    (spec,) = load_harbor_tasks(task)
    assert (
        "tests/test.sh:2 starts a test runner"
        in spec.metadata["harbor"]["verifier_runs_agent_code"]
    )
    script.write_text("#!/bin/bash\ncd /tmp\npython3 -m pytest /tests/test_outputs.py\n")
    (spec,) = load_harbor_tasks(task)
    assert "verifier_runs_agent_code" not in spec.metadata["harbor"]


def test_the_cli_prints_the_warning_when_it_loads_the_task(tmp_path: Path) -> None:
    task = _copy(tmp_path, "hackable-workspace-tests")
    result = CliRunner().invoke(
        app,
        ["tasks", "load", str(task), "--no-build", "--out", str(tmp_path / "o")],
        env={"POLAR_SOURCE_ROOTS": f"{tmp_path},{REPO}"},
    )
    assert result.exit_code == 0, result.output
    assert "warning: Harbor task polar/hackable-workspace-tests: its verifier seems to run" in (
        result.output
    )


def _verifier(evaluator: EvaluatorSpec) -> HarborConfig:
    """The harbor config a loaded task holds, read with the kind's model."""
    return HarborConfig.of(evaluator)
