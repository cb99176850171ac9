"""Bad input at the task API: generated TaskSpec-like dicts and files, never a traceback.

A wrong spec is refused by `TaskSpec` validation with an error naming the
field; `polar submit FILE` (through `load_task_file`) turns any unusable file
(bad JSON, wrong shapes, not UTF-8, missing, a directory) into a clean message
and exit code 2, never a traceback and never a submission.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from app.cli import app
from app.cli.task_files import load_task_file
from polar.host_paths import FORBIDDEN_HOST_DIRS
from polar.tasks.spec import TaskSpec

VALID: dict[str, Any] = {
    "task_id": "fuzz-task",
    "instruction": "Write a haiku about rollouts to answer.txt.",
    "num_sessions": 4,
    "source": {"type": "dir", "path": "examples/demo/repo"},
    "runtime": {"kind": "local"},
    "harness": {"kind": "command", "command": "python agent.py", "model": "policy"},
    "builder": {"name": "per_request"},
    "evaluator": {"kind": "command", "command": "test -s answer.txt"},
    "timeouts": {"harness_s": 300, "heartbeat_s": 20},
    "metadata": {"dataset": "demo"},
    "min_usable_sessions": 2,
    "priority": 1,
}
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [prefix + (k,), *leaf_paths(v, prefix + (k,))]]
    return []


PATHS = leaf_paths(VALID)


@st.composite
def specs(draw: st.DrawFn) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """VALID with one field (top-level or nested) replaced, removed, or an unknown one added."""
    spec = json.loads(json.dumps(VALID))
    path = draw(st.sampled_from(PATHS))
    node = spec
    for key in path[:-1]:
        node = node[key]
    action = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
    if action == "replace":
        node[path[-1]] = draw(json_values)
    elif action == "remove":
        del node[path[-1]]
    else:
        node[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    return spec, path


def test_the_base_spec_is_valid() -> None:
    TaskSpec.model_validate(VALID)


@given(case=specs())
@settings(max_examples=300, deadline=None, derandomize=True)
def test_generated_specs_validate_or_name_the_field(case: tuple[dict[str, Any], tuple]) -> None:
    spec, _ = case
    try:
        TaskSpec.model_validate(spec)
    except ValidationError as exc:
        for err in exc.errors():
            assert err["msg"], err
        assert str(exc).strip()  # the rendering itself never raises


@given(case=specs())
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_load_task_file_is_clean(case: tuple[dict[str, Any], tuple], tmp_path: Path) -> None:
    spec, path = case
    file = tmp_path / "task.json"
    file.write_text(json.dumps(spec))
    try:
        loaded = load_task_file(file)
    except typer.Exit as exc:
        assert exc.exit_code == 2
    else:
        assert isinstance(loaded, TaskSpec)


runner = CliRunner()
BAD_FILES: dict[str, bytes | None] = {
    "not-json": b"{task_id: nope",
    "empty": b"",
    "array": b"[1, 2, 3]",
    "string": b'"a task"',
    "not-utf8": b"\xff\xfe\x00{\x00}",
    "huge-int": b'{"task_id": "t", "num_sessions": 1' + b"0" * 5000 + b', "harness": {}}',
    "deep": b"[" * 5000 + b"]" * 5000,
    "wrong-types": json.dumps(VALID | {"num_sessions": "four", "harness": []}).encode(),
    "missing": None,
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_submit_cli_refuses_bad_files_cleanly(name: str, tmp_path: Path) -> None:
    file = tmp_path / f"{name}.json"
    content = BAD_FILES[name]
    if content is not None:
        file.write_bytes(content)
    result = runner.invoke(app, ["submit", str(file), "--no-wait"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert str(file.name) in result.output.replace("\n", "")


def test_submit_cli_names_the_bad_field(tmp_path: Path) -> None:
    file = tmp_path / "task.json"
    file.write_text(json.dumps(VALID | {"num_sessions": 0}))
    result = runner.invoke(app, ["submit", str(file), "--no-wait"])
    assert result.exit_code == 2
    assert "num_sessions" in result.output


# --------------------------------------------------------------------------- injections

BASE: dict[str, Any] = {"task_id": "t", "harness": {"command": "true"}}
name_parts = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=8)


@st.composite
def system_paths(draw: st.DrawFn) -> str:
    """`/` or a path at or under a forbidden dir, spelled with extra slashes and `.` parts."""
    top = draw(st.sampled_from(["/", *FORBIDDEN_HOST_DIRS]))
    parts = draw(st.lists(st.just(".") if top == "/" else name_parts | st.just("."), max_size=3))
    sep = draw(st.sampled_from(["/", "//", "/./"]))
    return draw(st.sampled_from(["", "/"])) + top + "".join(sep + p for p in parts)


def _refused(spec: dict[str, Any], field: str) -> list[str]:
    """Validate `spec`, which must fail on `field` only; the error messages."""
    with pytest.raises(ValidationError) as info:
        TaskSpec.model_validate(spec)
    errors = info.value.errors()
    assert {".".join(map(str, e["loc"])) for e in errors} == {field}, errors
    return [e["msg"] for e in errors]


@given(path=system_paths(), where=st.sampled_from(["dir", "git", "upload"]))
@settings(max_examples=200, deadline=None, derandomize=True)
def test_system_paths_are_refused_wherever_a_task_names_a_host_path(path: str, where: str) -> None:
    if where == "dir":
        spec, field = BASE | {"source": {"type": "dir", "path": path}}, "source.dir.path"
    elif where == "git":
        spec, field = BASE | {"source": {"type": "git", "url": path}}, "source.git.url"
    else:
        upload = {"type": "upload", "src": path, "dest": "x"}
        spec, field = BASE | {"runtime": {"prepare": [upload]}}, "runtime.prepare.0.upload.src"
    (message,) = _refused(spec, field)
    assert "a task may not read / or a system directory" in message


@given(tail=st.text(max_size=20), where=st.sampled_from(["url", "ref"]))
@settings(max_examples=150, deadline=None, derandomize=True)
def test_git_arguments_that_are_options_are_refused(tail: str, where: str) -> None:
    source = {"type": "git", "url": "https://example.com/r.git", where: "-" + tail}
    (message,) = _refused(BASE | {"source": source}, f"source.git.{where}")
    assert "-" in message


@given(helper=st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,8}", fullmatch=True), rest=st.text())
@settings(max_examples=150, deadline=None, derandomize=True)
def test_remote_helper_urls_are_refused(helper: str, rest: str) -> None:
    _refused(BASE | {"source": {"type": "git", "url": f"{helper}::{rest}"}}, "source.git.url")


timeout_fields = st.sampled_from(
    ["prepare_s", "harness_s", "build_s", "evaluate_s", "teardown_s", "heartbeat_s"]
)


@given(field=timeout_fields, value=st.floats(allow_nan=True, allow_infinity=True))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_timeouts_are_finite_and_bounded(field: str, value: float) -> None:
    spec = BASE | {"timeouts": {field: value}}
    if math.isfinite(value) and 1 <= value <= 7 * 86400:
        assert getattr(TaskSpec.model_validate(spec).timeouts, field) == value
    else:
        _refused(spec, f"timeouts.{field}")


@given(cpus=st.floats(allow_nan=False, allow_infinity=False, max_value=1e6))
@settings(max_examples=150, deadline=None, derandomize=True)
def test_cpus_are_sane(cpus: float) -> None:
    spec = BASE | {"runtime": {"cpus": cpus}}
    if 0.1 <= cpus <= 512:
        TaskSpec.model_validate(spec)
    else:
        _refused(spec, "runtime.cpus")
