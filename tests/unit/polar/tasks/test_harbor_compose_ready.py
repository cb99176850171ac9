"""A compose service's readiness keys read into Polar's own (polar/tasks/harbor_compose_ready.py,
polar/tasks/sidecar_spec.py): durations, the healthcheck's forms, `depends_on`'s forms and
conditions, `main`'s own dependencies; cycles, unknown names and conditions, and a
`service_healthy` on a service with no healthcheck refused, naming the task and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_compose_ready import parse_duration
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.runtime_spec import RuntimeSpec, Sidecar
from polar.tasks.sidecar_spec import Healthcheck, start_order
from tests.support.paths import REPO

TASK = REPO / "examples" / "harbor-features" / "compose-lookup"


def _load(tmp_path: Path, compose: str) -> RuntimeSpec:
    task = Path(shutil.copytree(TASK, tmp_path / "task"))
    (task / "environment" / "docker-compose.yaml").write_text(compose)
    (spec,) = load_harbor_tasks(task)
    return spec.runtime


def _refused(tmp_path: Path, compose: str) -> HarborTaskError:
    with pytest.raises(HarborTaskError) as err:
        _load(tmp_path, compose)
    return err.value


def _service(name: str, extra: str = "") -> str:
    lines = [f"  {name}:", "    image: polar/runtime:py311"]
    lines += [f"    {line}" for line in extra.strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5), ("1m30s", 90), ("500ms", 0.5), ("1.5s", 1.5), ("1h2m3s", 3723), ("0", 0)],
)
def test_compose_durations_are_read_into_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5x", "5", "s", "1m 30s", "-5s", 30, True, None])
def test_what_is_not_a_duration_is_said(text: object) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_a_healthcheck_and_dependencies_are_read(tmp_path: Path) -> None:
    compose = (
        "services:\n  main:\n    depends_on:\n      db:\n        condition: service_healthy\n"
        "      init:\n        condition: service_completed_successfully\n"
        + _service(
            "db",
            """
healthcheck:
  test: ["CMD", "pg_isready", "-q"]
  interval: 1m30s
  timeout: 500ms
  retries: 5
  start_period: 2s
  start_interval: 1s
depends_on: [init]
""",
        )
        + _service("init", "healthcheck:\n  disable: true")
        + _service("web", "healthcheck:\n  test: curl -f localhost\ndepends_on:\n  db: {}")
        + _service("quiet", "healthcheck:\n  test: [NONE]")
        + _service("sh", "healthcheck:\n  test: [CMD-SHELL, 'test -f /ok']\n  retries: 0")
    )
    runtime = _load(tmp_path, compose)
    db, init, web, quiet, sh = runtime.sidecars
    assert db.healthcheck == Healthcheck(
        command=["pg_isready", "-q"], interval_s=90, timeout_s=0.5, retries=5, start_period_s=2
    )
    assert db.depends_on == {"init": "service_started"}  # the short form
    assert init.healthcheck is None and quiet.healthcheck is None  # disable, [NONE]
    # a string is a shell line; docker's defaults for what is left out (retries 0 too)
    assert web.healthcheck == Healthcheck(command="curl -f localhost")
    assert web.healthcheck.test() == ["CMD-SHELL", "curl -f localhost"]
    assert web.depends_on == {"db": "service_started"}
    assert sh.healthcheck is not None and sh.healthcheck.command == "test -f /ok"
    assert sh.healthcheck.retries == 3 and db.healthcheck.test()[0] == "CMD"
    assert runtime.depends_on == {"db": "service_healthy", "init": "service_completed_successfully"}
    assert [s.name for s in start_order(runtime.sidecars)] == ["init", "db", "web", "quiet", "sh"]
    # the spec round-trips through JSON (as Temporal carries it)
    assert RuntimeSpec.model_validate_json(runtime.model_dump_json()) == runtime


@pytest.mark.parametrize(
    ("lookup", "field", "reason"),
    [
        ("healthcheck:\n  test: [CMD]", "lookup.healthcheck.test", "a list must be"),
        ("healthcheck:\n  test: [RUN, x]", "lookup.healthcheck.test", "a list must be"),
        ("healthcheck:\n  interval: 5s", "lookup.healthcheck.test", "no image's own"),
        ("healthcheck:\n  test: 'true'\n  interval: 5x", "lookup.healthcheck.interval", "5x"),
        ("healthcheck:\n  test: 'true'\n  timeout: 30", "lookup.healthcheck.timeout", "string"),
        ("healthcheck:\n  test: 'true'\n  interval: 1h", "lookup.healthcheck.interval", "240"),
        ("healthcheck:\n  test: 'true'\n  retries: two", "lookup.healthcheck.retries", "whole"),
        ("healthcheck:\n  test: 'true'\n  every: 5s", "lookup.healthcheck.every", "not a"),
        (
            "depends_on:\n  other:\n    condition: service_ready",
            "lookup.depends_on.other.condition",
            "'service_ready' is not one of",
        ),
        ("depends_on:\n  other:\n    required: false", "lookup.depends_on.other.required", ""),
        ("depends_on: other", "lookup.depends_on", "a list of services or a table"),
    ],
)
def test_what_cannot_be_read_is_named(tmp_path: Path, lookup: str, field: str, reason: str) -> None:
    compose = "services:\n" + _service("lookup", lookup) + _service("other")
    err = _refused(tmp_path, compose)
    assert err.field is not None and err.field.endswith(field), err
    assert reason in err.reason, err


@pytest.mark.parametrize(
    ("compose", "reason"),
    [
        (
            _service("a", "depends_on: [b]")
            + _service("b", "depends_on: [c]")
            + _service("c", "depends_on: [a]"),
            "cycle: a -> b -> c -> a",
        ),
        (_service("a", "depends_on: [a]"), "depends on itself"),
        (_service("a", "depends_on: [nope]"), "'nope', which is not a sidecar"),
        (
            "  main:\n    depends_on:\n      a:\n        condition: service_healthy\n"
            + _service("a"),
            "has no healthcheck",
        ),
        ("  main:\n    depends_on: [ghost]\n" + _service("a"), "'ghost', which is not a"),
    ],
)
def test_dependencies_that_cannot_be_met_are_refused(
    tmp_path: Path, compose: str, reason: str
) -> None:
    err = _refused(tmp_path, "services:\n" + compose)
    assert err.field is not None and err.field.endswith("depends_on"), err
    assert reason in err.reason, err


def test_a_runtime_spec_checks_its_sidecars_dependencies() -> None:
    """The same rules where a spec is written by hand (or sent by an SDK)."""
    check = Healthcheck(command=["true"], interval_s=1)
    a = Sidecar(name="a", image="i", depends_on={"b": "service_healthy"})
    b = Sidecar(name="b", image="i", healthcheck=check, depends_on={"a": "service_started"})
    with pytest.raises(ValidationError, match="cycle: a -> b -> a"):
        RuntimeSpec(kind="docker", sidecars=[a, b])
    b = b.model_copy(update={"depends_on": {}})
    assert RuntimeSpec(kind="docker", sidecars=[a, b], depends_on={"a": "service_started"})
    with pytest.raises(ValidationError, match="'c', which is not a sidecar"):
        RuntimeSpec(kind="docker", sidecars=[a, b], depends_on={"c": "service_started"})
    with pytest.raises(ValidationError, match="'a' has no healthcheck"):
        RuntimeSpec(kind="docker", sidecars=[a, b], depends_on={"a": "service_healthy"})
    with pytest.raises(ValidationError, match="condition|literal"):
        Sidecar.model_validate({"name": "x", "image": "i", "depends_on": {"a": "ready"}})
    # none of it in the JSON of a spec without it: older workers read the spec
    assert "depends_on" not in RuntimeSpec(kind="docker").model_dump()
    assert set(Sidecar(name="x", image="i").model_dump()) >= {"name"}
    assert "healthcheck" not in Sidecar(name="x", image="i").model_dump()
    # its bound: start period, then (retries + 1) probes of interval + timeout, capped
    assert check.bound_s() == pytest.approx(0 + 4 * (1 + 30) + 5)
    assert Healthcheck(command="x", interval_s=200, retries=100).bound_s() == 240
