"""`polar generate`: a harness run over a SWE-bench dataset, the resolved sessions kept; its
specs from the flags, its progress bar and its summary tables."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli.main import console

if TYPE_CHECKING:
    from polar.client.generate import GenerateSummary
    from polar.tasks.spec import HarnessSpec, RuntimeSpec
    from polar.tasks.swe import SweInstance


def generate(
    dataset: Annotated[Path, typer.Argument(help="SWE-bench / SWE-Gym instances (JSONL)")],
    harness: Annotated[
        str, typer.Option(help="a harness kind: command, or an agent CLI (docs/harnesses.md)")
    ] = "command",
    command: Annotated[str | None, typer.Option(help="the command harness's shell line")] = None,
    model: Annotated[str, typer.Option(help="model name the harness asks the backend for")] = (
        "policy"
    ),
    sessions: Annotated[int, typer.Option(help="sessions per instance")] = 1,
    runtime: Annotated[
        str, typer.Option(help="a runtime kind: local, a container one or auto (docs/runtimes.md)")
    ] = "local",
    image: Annotated[str | None, typer.Option(help="docker: the session image")] = None,
    source_root: Annotated[
        str | None,
        typer.Option(
            help="local clones ({root}/owner__name) or a git URL root "
            "(default: DATASET's sibling repos/ if any, else GitHub)"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("generated"),
    limit: Annotated[int | None, typer.Option(help="only the first N instances")] = None,
    ids: Annotated[list[str] | None, typer.Option("--id", help="only these instance ids")] = None,
    concurrency: Annotated[int, typer.Option(help="tasks in flight")] = 8,
    harness_timeout: Annotated[float | None, typer.Option(help="harness budget, seconds")] = None,
    task_timeout: Annotated[float | None, typer.Option(help="seconds to wait per task")] = None,
) -> None:
    """Run a harness over a dataset; keep the sessions whose patches resolve their instance."""
    instances = load_dataset(dataset, ids, limit)
    harness_spec, runtime_spec = generate_specs(
        harness, model, command, runtime, image, concurrency, sessions
    )
    if source_root is None and (dataset.parent / "repos").is_dir():
        source_root = str(dataset.parent / "repos")
    summary = run_with_progress(
        instances,
        harness=harness_spec,
        sessions_per_instance=sessions,
        runtime=runtime_spec,
        source_root=source_root,
        out=out,
        timeouts={"harness_s": harness_timeout} if harness_timeout else None,
        concurrency=concurrency,
        task_timeout_s=task_timeout,
        dataset=dataset,
    )
    print_summary(summary, harness_spec, out)


def load_dataset(dataset: Path, ids: list[str] | None, limit: int | None) -> list[SweInstance]:
    """The instances to run (the first `limit` of those `ids` names), or exit 2 saying why
    there are none."""
    from polar.tasks.swe import InvalidInstance, load_instances

    try:
        instances = load_instances(dataset, ids=ids)
    except (OSError, InvalidInstance) as exc:
        console.print(f"cannot read the dataset {dataset}: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc
    instances = instances[:limit] if limit is not None else instances
    if not instances:
        console.print(f"[red]no instances to run in {dataset}[/red]")
        raise typer.Exit(2)
    return instances


def generate_specs(
    harness: str,
    model: str,
    command: str | None,
    runtime: str,
    image: str | None,
    concurrency: int,
    sessions: int,
) -> tuple[HarnessSpec, RuntimeSpec]:
    """The harness and runtime the flags describe, or exit 2 with what is wrong with them."""
    from activities.harnesses import check_harness
    from activities.runtimes import check_runtime
    from polar.tasks.spec import HarnessSpec, RuntimeSpec

    if harness == "command" and not command:
        console.print("[red]--harness command needs --command[/red]")
        raise typer.Exit(2)
    try:
        harness_spec = HarnessSpec.model_validate(
            {"kind": harness, "model": model, **({"command": command} if command else {})}
        )
        runtime_spec = RuntimeSpec.model_validate(
            {"kind": runtime, **({"image": image} if image else {})}
        )
        check_harness(harness_spec)  # a kind the worker knows, its config valid
        check_runtime(runtime_spec)
        if concurrency < 1 or sessions < 1:
            raise ValueError("--concurrency and --sessions must be at least 1")
    except ValueError as exc:  # pydantic's ValidationError, UnknownKind: ValueErrors
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    return harness_spec, runtime_spec


def run_with_progress(instances: list[SweInstance], **options: Any) -> GenerateSummary:
    """polar.client.generate over `instances` (with `options`), behind a progress bar of the
    instances done and the sessions resolved."""
    from polar.client.generate import generate as run_generate

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("resolved {task.fields[resolved]}/{task.fields[attempted]} sessions"),
        TimeElapsedColumn(),
    )

    async def go() -> GenerateSummary:
        from polar.client.sdk import PolarClient

        polar = await PolarClient.connect()
        with Progress(*columns, console=console) as bar:
            job = bar.add_task("instances", total=len(instances), resolved=0, attempted=0)

            def progress(s: GenerateSummary) -> None:
                bar.update(
                    job, completed=s.instances_done, resolved=s.resolved, attempted=s.attempted
                )

            return await run_generate(polar, instances, on_progress=progress, **options)

    return asyncio.run(go())


def summary_table(summary: GenerateSummary, harness: HarnessSpec, out: Path) -> Table:
    """Instances, sessions and their outcomes per repository, and for all of them."""
    table = Table(title=f"polar generate: {harness.kind} ({harness.model}) → {out}")
    for col in ("repository", "instances", "sessions", "resolved", "failed", "errored", "rate"):
        table.add_column(col)
    for repo, c in sorted(summary.per_repo.items()):
        table.add_row(
            repo,
            f"{c.resolved_instances}/{c.instances}",
            str(c.attempted),
            str(c.resolved),
            str(c.failed),
            str(c.errored),
            f"{c.acceptance_rate:.1%}",
        )
    table.add_row(
        "[bold]all[/bold]",
        f"{summary.resolved_instances}/{summary.instances}",
        str(summary.attempted),
        str(summary.resolved),
        str(summary.failed),
        str(summary.errored),
        f"{summary.acceptance_rate:.1%}",
    )
    return table


def print_summary(summary: GenerateSummary, harness: HarnessSpec, out: Path) -> None:
    """The summary table, the acceptance rate and what was kept, each task error, the files."""
    console.print(summary_table(summary, harness, out))
    console.print(
        f"attempted {summary.attempted}, resolved {summary.resolved}, "
        f"acceptance rate {summary.acceptance_rate:.1%}; kept {len(summary.kept_sessions)} "
        f"sessions: {summary.rl_rows} RL rows, {summary.sft_rows} SFT conversations"
    )
    for err in summary.task_errors:
        console.print(f"{err['instance_id']}: {err['error']}", style="yellow", markup=False)
    for kind, path in summary.files.items():
        console.print(f"  {kind}: {path}")
