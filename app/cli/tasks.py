"""`polar tasks`: task datasets read into TaskSpec files (load) and audited for reward hacks."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from app.cli.main import console
from app.cli.task_files import harness_override, load_harbor_dir, warn_verifier

if TYPE_CHECKING:
    from app.task_audit import AuditReport, AuditTarget

tasks_app = typer.Typer(help="Task datasets: audit them for reward hacks before training.")


@tasks_app.command("load")
def tasks_load(
    path: Annotated[Path, typer.Argument(help="a Harbor task dir, or a dataset dir of them")],
    out: Annotated[Path, typer.Option(help="where the TaskSpec JSON files go")] = Path("tasks"),
    harness: Annotated[str, typer.Option(help="the harness kind")] = "pi",
    command: Annotated[str | None, typer.Option(help="the command of `--harness command`")] = None,
    model: Annotated[str | None, typer.Option(help="the model name the harness is told")] = None,
    harness_env: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the harness (repeat)")
    ] = None,
    sessions: Annotated[int, typer.Option(min=1, help="sessions per task")] = 1,
    build: Annotated[bool, typer.Option(help="build the environments' images now")] = True,
    strict: Annotated[
        bool, typer.Option(help="stop at the first refused task (else the rest are loaded)")
    ] = False,
) -> None:
    """Read Harbor tasks into TaskSpec JSON files (`polar submit FILE` takes each), their
    environment images built on this host first (cached by content). Every task Polar
    refuses is reported with every field it refuses; the rest are loaded."""
    override = harness_override(harness, command, model, harness_env)
    specs = load_harbor_dir(path, override, sessions, build, strict)
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        warn_verifier(spec)
        target = out / f"{spec.task_id}.json"
        target.write_text(spec.model_dump_json(indent=2) + "\n")
        console.print(f"{spec.task_id} -> {target}", markup=False)


@tasks_app.command("audit")
def tasks_audit(
    path: Annotated[
        Path, typer.Argument(help="a Harbor task or dataset dir, SWE-bench JSONL, TaskSpec JSON")
    ],
    source_root: Annotated[
        Path | None,
        typer.Option(
            help="SWE-bench: local clones, {root}/owner__name (default: PATH's sibling "
            "repos/ if any, else GitHub)"
        ),
    ] = None,
    runtime: Annotated[str, typer.Option(help="SWE-bench: the sessions' runtime kind")] = "docker",
    image: Annotated[str | None, typer.Option(help="SWE-bench: the docker image")] = None,
    oracle: Annotated[
        str | None, typer.Option(help="TaskSpec JSON: the oracle's harness command")
    ] = None,
    parallel: Annotated[int, typer.Option(min=1, help="sessions at once")] = 4,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="also write the report as JSON here")
    ] = None,
) -> None:
    """Run each task with its oracle, a no-op and built-in hacks; flag the hackable ones.

    Exit 0 when every task is sound, 1 when one is flagged or broken. The verdicts go to
    `.polar-audit.json` beside PATH, where `polar submit` finds them."""
    from app import task_audit as au
    from app import task_audit_report as audit_report
    from polar.client.sdk import PolarClient

    builds: dict[str, str] = {}
    try:
        targets = audit_targets(path, source_root, runtime, image, oracle, builds)
    except (OSError, ValueError, ImportError) as exc:
        console.print(f"cannot audit {path}: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc

    probes = sum(len(t.probes) for t in targets)
    done: list[str] = []
    console.print(f"auditing {len(targets)} task(s): {probes} sessions, {parallel} at once")

    def probe_done(task_id: str, result: au.ProbeResult) -> None:
        done.append(task_id)
        line = f"  [{len(done)}/{probes}] {task_id}: {result.probe} {au.scored(result)}"
        console.print(f"{line} ({result.seconds:g} s)", markup=False)

    def task_done(audit: au.TaskAudit) -> None:
        console.print(
            f"{audit.task_id}: {audit.verdict} (wall {audit.wall_seconds:g} s, "
            f"{audit.seconds:g} session-s)",
            markup=False,
        )

    async def go() -> au.AuditReport:
        polar = await PolarClient.connect()
        return await au.run_audit(
            polar, targets, parallel=parallel, on_task=task_done, on_probe=probe_done
        )

    report = asyncio.run(go())
    for audit in report.tasks:
        audit.build = builds.get(audit.task_id)
    print_audit_report(report, path)
    saved = au.save_verdicts(report, path)
    console.print(f"verdicts: {saved}", markup=False)
    if json_out is not None:
        json_out.write_text(json.dumps(audit_report.report_json(report), indent=2) + "\n")
    if report.flagged:
        raise typer.Exit(1)


def audit_targets(
    path: Path,
    source_root: Path | None,
    runtime: str,
    image: str | None,
    oracle: str | None,
    builds: dict[str, str],
) -> list[AuditTarget]:
    """What `polar tasks audit` runs for PATH: SWE-bench JSONL, a TaskSpec JSON, or a Harbor
    task or dataset dir (its images built first, each build noted in `builds` by task id)."""
    from activities.runtimes import check_runtime
    from app import task_audit as au
    from polar.settings import ClientSettings, get_settings
    from polar.tasks.harbor import task_id_of
    from polar.tasks.spec import RuntimeSpec

    if path.is_file() and path.suffix == ".jsonl":
        spec = RuntimeSpec.model_validate({"kind": runtime, **({"image": image} if image else {})})
        check_runtime(spec)
        if source_root is None and (path.parent / "repos").is_dir():
            source_root = path.parent / "repos"
        return au.swe_targets(path, source_root=source_root, runtime=spec)
    if path.is_file() and path.suffix == ".json":
        return [au.taskspec_target(path, oracle)]
    from polar.tasks.harbor_images import ensure_images

    image_map = get_settings(ClientSettings).harbor_image_map
    targets = au.harbor_targets(path, image_map)
    for built in ensure_images(path, image_map=image_map, log=console.print):
        builds[task_id_of(built.task)] = f"{built.how}, {built.seconds:g} s"
        console.print(f"{built.task}: {built.image} ({builds[task_id_of(built.task)]})")
    return targets


def print_audit_report(report: AuditReport, path: Path) -> None:
    """The audit's table (a terminal) or Markdown table (a pipe), then each flagged task."""
    from app import task_audit_report as audit_report

    if sys.stdout.isatty():
        header, rows = audit_report.report_rows(report)
        table = Table(title=f"audit of {path}")
        for col in header:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        console.print(table, markup=False)
    else:  # a pipe or CI log: the Markdown table, never truncated
        console.print(audit_report.markdown_table(report), markup=False, soft_wrap=True)
    for t in report.flagged:
        console.print(f"{t.task_id}: {t.verdict}: {'; '.join(t.reasons)}", markup=False)
