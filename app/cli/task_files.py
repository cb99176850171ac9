"""Reading tasks for `polar submit` and `polar tasks load`: a TaskSpec file, a Harbor dir,
the workflow id option, and the warnings of their audit, verifier and source (on stderr)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from app.cli.exit_codes import ExitCode
from app.cli.main import err_console

if TYPE_CHECKING:
    from polar.tasks.spec import TaskSpec


def load_task_file(path: Path) -> TaskSpec:
    """The TaskSpec in `path`; any unusable file (a builder that does not import, a kind's
    missing field such as a CLI harness's instruction included) is a clean message and exit
    code 2."""
    from activities.task_kinds import check_task_kinds
    from polar.builders import check_builder
    from polar.tasks.spec import TaskSpec

    try:
        data = path.read_bytes()
    except OSError as exc:  # missing, a directory, unreadable
        err_console.print(f"cannot read the TaskSpec file {path}: {exc}", markup=False)
        raise typer.Exit(ExitCode.INVALID_INPUT) from exc
    try:  # not JSON, not UTF-8, invalid fields, a builder or kind that does not resolve
        spec = TaskSpec.model_validate_json(data)
        check_builder(spec.builder)
        return check_task_kinds(spec)
    except ValueError as exc:
        err_console.print(f"invalid TaskSpec in {path}:", style="red", markup=False)
        err_console.print(str(exc), markup=False)
        raise typer.Exit(ExitCode.INVALID_INPUT) from exc


def load_harbor_dir(
    path: Path, harness: dict[str, Any], sessions: int = 1, build: bool = True, strict: bool = False
) -> list[TaskSpec]:
    """The TaskSpecs of a Harbor task or dataset dir, their images present on this host's
    engine (built now where needed, unless `build` is off). `harness` overrides the agent
    (`{"kind": "command", "command": ...}`). Every task Polar cannot honour is reported with
    every field it refuses, and a task outside the source roots with the setting to change;
    the rest are loaded. With `strict`, or when none is left, that is exit code 2."""
    import os

    from activities.task_kinds import check_task_kinds
    from polar.host_paths import outside_roots, source_roots
    from polar.settings import ClientSettings, get_settings
    from polar.tasks.harbor import load_harbor_dataset
    from polar.tasks.harbor_images import ensure_images
    from polar.tasks.spec import HarnessSpec

    image_map = get_settings(ClientSettings).harbor_image_map
    try:
        harness_spec = HarnessSpec.model_validate(harness)
        dataset = load_harbor_dataset(
            path, harness=harness_spec, num_sessions=sessions, image_map=image_map
        )
        roots = source_roots(os.environ.get("POLAR_SOURCE_ROOTS"))
    except ValueError as exc:  # not a task dir, an invalid harness
        err_console.print(str(exc), style="red", markup=False)
        raise typer.Exit(ExitCode.INVALID_INPUT) from exc
    refused = [str(exc) for exc in dataset.refused]
    specs = []
    for spec in dataset.specs:
        harbor = spec.metadata.get("harbor") or {}
        name, task_dir = harbor.get("name", spec.task_id), Path(harbor.get("dir", path))
        problem = outside_roots(task_dir, roots)
        try:
            if problem is not None:
                raise ValueError(f"harbor task {name}: its dir {problem}")
            check_task_kinds(spec)  # a kind's config (the harness override, say)
            for image in (
                ensure_images(task_dir, image_map=image_map, log=err_console.print) if build else []
            ):
                err_console.print(f"{name}: {image.image} ({image.how}, {image.seconds:g} s)")
        except ValueError as exc:  # HarborTaskError (an image that cannot be had), a config
            text = str(exc)
            refused.append(
                text if text.startswith("harbor task") else f"harbor task {name}: {text}"
            )
            continue
        specs.append(spec)
        warn_dockerfile(spec)
    for line in refused:
        err_console.print(f"refused: {line}", style="red", markup=False)
    if refused and (strict or not specs):
        why = "--strict" if specs else "no task left"
        err_console.print(f"{len(refused)} task(s) refused ({why})", style="red")
        raise typer.Exit(ExitCode.INVALID_INPUT)
    if refused:
        err_console.print(
            f"{len(refused)} task(s) refused, {len(specs)} loaded", style="yellow", markup=False
        )
    return specs


def harness_override(
    kind: str, command: str | None, model: str | None, env: list[str] | None
) -> dict[str, Any]:
    """The harness a Harbor dir's tasks run, from the CLI's flags (`--harness command
    --command 'python solve.py' --model m --harness-env KEY=VALUE`); a malformed `--harness-env`
    is a clean message and exit code 2."""
    harness: dict[str, Any] = {"kind": kind}
    if command is not None:
        harness["command"] = command
    if model is not None:
        harness["model"] = model
    for pair in env or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            err_console.print(f"--harness-env: KEY=VALUE, not {pair!r}", style="red", markup=False)
            raise typer.Exit(ExitCode.INVALID_INPUT)
        harness.setdefault("env", {})[key] = value
    return harness


def warn_dockerfile(spec: TaskSpec) -> None:
    """Warn about a Harbor task with both a docker_image and a Dockerfile (the image runs)."""
    from polar.tasks.harbor import dockerfile_warning

    text = dockerfile_warning(spec)
    if text is not None:
        err_console.print(f"warning: {text}", style="yellow", markup=False)


def check_audit(spec: TaskSpec, near: Path, strict: bool) -> None:
    """Warn about a task an audit flagged or found broken (app/task_audit.py), or with
    `strict` refuse it (exit 3)."""
    from app.task_audit import find_verdict

    audit = find_verdict(spec, near)
    if audit is None or audit.verdict == "sound":
        return
    why = "; ".join(audit.reasons) or audit.verdict
    text = f"task {spec.task_id} was {audit.verdict} by its audit ({audit.origin}): {why}"
    if strict:
        err_console.print(f"refused (--strict): {text}", style="red", markup=False)
        raise typer.Exit(ExitCode.REFUSED)
    err_console.print(f"warning: {text}", style="yellow", markup=False)


def warn_verifier(spec: TaskSpec) -> None:
    """Warn about a Harbor task whose verifier seems to run the agent's code as the owner of
    its reward files (polar/tasks/harbor_verifier.py, verifier_runs_agent_code)."""
    from polar.tasks.harbor import verifier_warning

    text = verifier_warning(spec)
    if text is not None:
        err_console.print(f"warning: {text}", style="yellow", markup=False)


def warn_no_source(spec: TaskSpec) -> None:
    """Warn about a task that names no source on the default image: its sessions start in an
    empty workspace (polar/client/submit_checks.py; `"source": null` says it is meant)."""
    from polar.client.submit_checks import missing_source

    text = missing_source(spec)
    if text is not None:
        err_console.print(f"warning: {text}", style="yellow", markup=False)


def checked_workflow_id_option(workflow_id: str, tasks: int) -> str:
    """`--workflow-id`, a valid id (polar/ids.py) for one task; else a clean message and exit
    code 2."""
    from polar.ids import InvalidId, checked_workflow_id

    if tasks != 1:
        err_console.print(f"--workflow-id names one task, not {tasks}", style="red")
        raise typer.Exit(ExitCode.INVALID_INPUT)
    try:
        return checked_workflow_id(workflow_id)
    except InvalidId as exc:
        err_console.print(f"--workflow-id: {exc}", style="red", markup=False)
        raise typer.Exit(ExitCode.INVALID_INPUT) from exc
