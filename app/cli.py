"""The `polar` command line: the dev stack, submitting and following tasks, processes."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from polar.contracts import TaskResult
from polar.settings import Settings, get_settings
from polar.tasks.spec import HarnessSpec, TaskSpec

TEMPORAL_BRIDGE = "temporalio.bridge.temporal_sdk_bridge"
"""The Temporal SDK's native module: loaded once a command has used a Temporal client."""


def exit_process(code: int | str | None) -> NoReturn:
    """End the `polar` process with `code` (SystemExit's meaning).

    Once the Temporal SDK's native bridge is loaded, its Tokio threads may still
    call into Python while the interpreter finalises, which aborts the process
    after a complete result (exit 134, `Fatal Python error: PyGILState_Release`;
    temporalio/sdk-python#300, the SDK has no way to close a client). Then it does
    what a normal exit does first (Python threads joined, exit handlers run,
    stdout and stderr flushed) and ends without the finalisation (`os._exit`)."""
    if TEMPORAL_BRIDGE not in sys.modules:
        sys.exit(code)
    if isinstance(code, str):  # SystemExit("message"): the message, exit 1
        print(code, file=sys.stderr)
    # what a normal exit does before finalising: join the threads (and shut the executors
    # down), then run the exit handlers (logging, finalizers)
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            continue
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def plain_error(exc: Exception) -> str | None:
    """A one-line message for errors of the user's situation (no Temporal there, no such
    workflow), None for anything else (a bug: its traceback is shown)."""
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
        return f"not found: {exc.message}"
    if isinstance(exc, RuntimeError) and str(exc).startswith("Failed client connect"):
        address = get_settings().temporal_address
        return (
            f"cannot reach Temporal at {address} (is the stack up? `polar dev up`, or set "
            "POLAR_TEMPORAL_ADDRESS)"
        )
    return None


class PolarApp(typer.Typer):
    """The `polar` app; run as a process (the console script, `python -m app.cli`) it ends
    through `exit_process`. CliRunner tests call its click command and never get here."""

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        try:
            super().__call__(*args, **kwargs)
        except SystemExit as exc:
            exit_process(exc.code)
        except KeyboardInterrupt:
            exit_process(130)
        except Exception as exc:  # noqa: BLE001 - said plainly, or Typer's traceback; exit 1
            message = plain_error(exc)
            if message is None:
                sys.excepthook(*sys.exc_info())
            else:
                print(f"polar: {message}", file=sys.stderr)
            exit_process(1)
        exit_process(0)


app = PolarApp(help="Polar: rollouts of real agent harnesses on Temporal.", no_args_is_help=True)
dev = typer.Typer(help="The embedded dev stack (Temporal, SeaweedFS, vLLM, gateway, worker).")
app.add_typer(dev, name="dev")
keys_app = typer.Typer(help="Session keys, for running a harness by hand against a gateway.")
app.add_typer(keys_app, name="key")
tasks_app = typer.Typer(help="Task datasets: audit them for reward hacks before training.")
app.add_typer(tasks_app, name="tasks")
# a pipe or CI log gets wide lines instead of 80 columns of wrapped ids
console = Console(width=None if sys.stdout.isatty() else 160)


@app.callback()
def main(
    data_dir: Annotated[Path | None, typer.Option(help="state and logs [POLAR_DATA_DIR]")] = None,
    temporal_address: Annotated[str | None, typer.Option(help="[POLAR_TEMPORAL_ADDRESS]")] = None,
    s3_endpoint: Annotated[str | None, typer.Option(help="[POLAR_S3_ENDPOINT]")] = None,
    upstream_urls: Annotated[
        str | None, typer.Option(help="model backends, comma-separated [POLAR_UPSTREAM_URLS]")
    ] = None,
    gateway_port: Annotated[int | None, typer.Option(help="[POLAR_GATEWAY_PORT]")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="HF model dir [POLAR_MODEL_DIR]")] = None,
) -> None:
    """Flags override the POLAR_* environment, for this process and the ones it starts."""
    overrides = {
        "POLAR_DATA_DIR": data_dir,
        "POLAR_TEMPORAL_ADDRESS": temporal_address,
        "POLAR_S3_ENDPOINT": s3_endpoint,
        "POLAR_UPSTREAM_URLS": upstream_urls,
        "POLAR_GATEWAY_PORT": gateway_port,
        "POLAR_MODEL_DIR": model_dir,
    }
    for name, value in overrides.items():
        if value is not None:
            os.environ[name] = str(value)
    get_settings.cache_clear()


# ---------------------------------------------------------------------------- dev stack


def default_model_dir(settings: Settings) -> Path:
    """The tiny model: the data dir's if one was built there, else a checkout's
    `.polar/models/tiny-qwen3` (infra/setup.sh builds it there; the data dir is elsewhere)."""
    from polar.assets import checkout_root

    mine = (settings.data_dir / "models" / "tiny-qwen3").resolve()
    root = checkout_root()
    if (mine / ".complete").exists() or root is None:
        return mine
    return (root / ".polar" / "models" / "tiny-qwen3").resolve()


def vllm_python(settings: Settings) -> Path:
    """The CPU vLLM venv's python (checkout-only: infra/setup.sh), or exit 1 saying so."""
    if not Path(settings.vllm_python).exists():
        console.print(
            f"[red]no vLLM environment at {settings.vllm_python}: run infra/setup.sh in a "
            "checkout, or set POLAR_VLLM_PYTHON (or start the stack with --no-model)[/red]"
        )
        raise typer.Exit(1)
    return Path(settings.vllm_python)


def ensure_tiny_model(settings: Settings) -> Path:
    """Build the project's tiny model (tokenizer, template, random weights) unless present."""
    from polar.assets import AssetMissing, asset_dir

    target = default_model_dir(settings)
    if not (target / ".complete").exists():
        python = vllm_python(settings)
        try:
            script = asset_dir("tiny_model") / "build_tiny_model.py"
        except AssetMissing as exc:
            console.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from exc
        console.print(f"building the tiny test model in {target} …")
        subprocess.run([str(python), str(script), str(target)], check=True)
    return target


def _stack(with_model: bool = True, workers: int = 1) -> Any:
    from app.devstack import DevStack

    settings = get_settings()
    if with_model and settings.model_dir is None and settings.upstream_model:
        vllm_python(settings)
        os.environ["POLAR_MODEL_DIR"] = str(ensure_tiny_model(settings))
        get_settings.cache_clear()
        settings = get_settings()
    return DevStack(settings, with_model=with_model, workers=workers)


@dev.command("up")
def dev_up(
    model: Annotated[bool, typer.Option(help="also serve the model with vLLM")] = True,
    workers: Annotated[int, typer.Option(help="worker processes")] = 1,
) -> None:
    """Start every part of the embedded stack (idempotent)."""
    from app.devstack import StackError

    stack = _stack(model, workers)
    try:
        stack.up(log=console.print)
    except StackError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    s = stack.settings
    console.print(f"Temporal Web UI: http://127.0.0.1:{s.temporal_ui_port}")
    console.print(f"gateway: {s.gateway_base_url}  S3: {s.s3_endpoint}/{s.s3_bucket}")


@dev.command("down")
def dev_down() -> None:
    """Stop every part of the embedded stack."""
    _stack(False).down(log=console.print)


@dev.command("status")
def dev_status() -> None:
    """Show which parts of the stack run."""
    for name, state in _stack(False).status().items():
        console.print(f"{name:10} {state}")


@dev.command("model")
def dev_model() -> None:
    """Build the tiny local model the dev stack serves (no download)."""
    console.print(str(ensure_tiny_model(get_settings())))


# ---------------------------------------------------------------------------- processes


@contextlib.contextmanager
def refused_cleanly() -> Iterator[None]:
    """A process that refuses to start (weak secrets) says why and exits 2, no traceback."""
    from polar.credentials import WeakSecret

    try:
        yield
    except WeakSecret as exc:
        console.print(f"[red]{exc}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None


@app.command()
def gateway() -> None:
    """Run the gateway proxy in the foreground."""
    from proxy.server import serve

    with refused_cleanly():
        serve(get_settings())


@app.command()
def worker(
    queues: Annotated[str, typer.Option(help="workflow,init,run,postrun or a subset")] = (
        "workflow,init,run,postrun"
    ),
    max_init: Annotated[int | None, typer.Option()] = None,
    max_run: Annotated[int | None, typer.Option()] = None,
    max_postrun: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Run a worker serving the chosen queues in the foreground."""
    from activities.worker import run_worker
    from polar.logs import configure_logging

    caps = {"max_init": max_init, "max_run": max_run, "max_postrun": max_postrun}
    settings = get_settings().model_copy(update={k: v for k, v in caps.items() if v is not None})
    configure_logging(settings.log_format)
    with refused_cleanly():
        asyncio.run(run_worker(settings, tuple(q.strip() for q in queues.split(",") if q.strip())))


# ---------------------------------------------------------------------------- tasks


def load_task_file(path: Path) -> TaskSpec:
    """The TaskSpec in `path`; any unusable file (a builder that does not import included) is
    a clean message and exit code 2."""
    from polar.builders import check_builder

    try:
        data = path.read_bytes()
    except OSError as exc:  # missing, a directory, unreadable
        console.print(f"cannot read the TaskSpec file {path}: {exc}", markup=False)
        raise typer.Exit(2) from exc
    try:  # not JSON, not UTF-8, invalid fields, a builder that does not resolve
        spec = TaskSpec.model_validate_json(data)
        check_builder(spec.builder)
        return spec
    except ValueError as exc:
        console.print(f"invalid TaskSpec in {path}:", style="red", markup=False)
        console.print(str(exc), markup=False)
        raise typer.Exit(2) from exc


async def _follow_and_print(run: Any) -> TaskResult:
    from polar.client.sdk import PolarClient

    polar = await PolarClient.connect()
    console.print(f"submitted [bold]{run.workflow_id}[/bold]  Web UI: {polar.web_ui_url(run)}")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        job = bar.add_task("sessions", total=None)
        async for status in polar.follow(run, every_s=1.0):
            stages = ", ".join(f"{s.stage}" for s in status.sessions) or "starting"
            bar.update(
                job,
                total=status.total or None,
                completed=status.done,
                description=f"sessions [{stages}]",
            )
    result = await polar.wait(run)
    print_result(result, polar)
    return result


def print_result(result: TaskResult, polar: Any) -> None:
    table = Table(title=f"task {result.task_id}")
    for col in ("session", "status", "reward", "calls", "traces", "tokens", "trace bytes"):
        table.add_column(col)
    for s in result.sessions:
        table.add_row(
            s.session_id,
            s.status.value,
            "-" if s.reward is None else f"{s.reward:g}",
            str(s.num_completions),
            str(s.num_traces),
            str(s.num_response_tokens),
            str(s.trace_bytes),
        )
    console.print(table)
    for s in result.sessions:
        if s.error:
            console.print(f"[yellow]{s.session_id}: {s.error}[/yellow]")
        if s.traces_key:
            console.print(f"traces: {polar.traces_url(s)}")
    mean = result.mean_reward
    console.print(f"mean reward: {'-' if mean is None else f'{mean:.3f}'}")


@app.command()
def submit(
    task_file: Annotated[
        Path, typer.Argument(help="a TaskSpec JSON file, or a Harbor task or dataset dir")
    ],
    wait: Annotated[bool, typer.Option(help="follow the task and print its result")] = True,
    strict: Annotated[
        bool, typer.Option(help="refuse a task `polar tasks audit` flagged (else a warning)")
    ] = False,
    harness: Annotated[str, typer.Option(help="Harbor dirs: the harness kind")] = "pi",
) -> None:
    """Submit a TaskSpec JSON file (the same file `temporal workflow start` takes), or every
    task of a Harbor task or dataset dir (its images built first: docs/harbor.md)."""
    from polar.client.sdk import PolarClient

    is_harbor = task_file.is_dir()
    specs = load_harbor_dir(task_file, harness) if is_harbor else [load_task_file(task_file)]
    for spec in specs:
        check_audit(spec, task_file, strict)
        warn_verifier(spec)

    async def go() -> None:
        polar = await PolarClient.connect()
        for spec in specs:
            run = await polar.submit(spec)
            if wait:
                await _follow_and_print(run)
            else:
                console.print(run.workflow_id)

    asyncio.run(go())


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
        console.print(f"refused (--strict): {text}", style="red", markup=False)
        raise typer.Exit(3)
    console.print(f"warning: {text}", style="yellow", markup=False)


def warn_verifier(spec: TaskSpec) -> None:
    """Warn about a Harbor task whose verifier seems to run the agent's code as the owner of
    its reward files (polar/tasks/harbor.py, verifier_runs_agent_code)."""
    from polar.tasks.harbor import verifier_warning

    text = verifier_warning(spec)
    if text is not None:
        console.print(f"warning: {text}", style="yellow", markup=False)


def load_harbor_dir(
    path: Path, harness: str, sessions: int = 1, build: bool = True
) -> list[TaskSpec]:
    """The TaskSpecs of a Harbor task or dataset dir, their images present on this host's
    engine (built now where needed, unless `build` is off); a task Polar cannot honour is a
    clean message naming it and the field, and exit code 2."""
    from polar.settings import get_settings
    from polar.tasks.harbor import load_harbor_tasks
    from polar.tasks.harbor_images import ensure_images

    image_map = get_settings().harbor_image_map
    try:
        harness_spec = HarnessSpec.model_validate({"kind": harness})
        specs = load_harbor_tasks(
            path, harness=harness_spec, num_sessions=sessions, image_map=image_map
        )
        if build:
            for image in ensure_images(path, image_map=image_map, log=console.print):
                console.print(f"{image.task}: {image.image} ({image.how}, {image.seconds:g} s)")
    except ValueError as exc:  # HarborTaskError, or a harness kind that needs a command
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    return specs


@tasks_app.command("load")
def tasks_load(
    path: Annotated[Path, typer.Argument(help="a Harbor task dir, or a dataset dir of them")],
    out: Annotated[Path, typer.Option(help="where the TaskSpec JSON files go")] = Path("tasks"),
    harness: Annotated[str, typer.Option(help="the harness kind")] = "pi",
    sessions: Annotated[int, typer.Option(min=1, help="sessions per task")] = 1,
    build: Annotated[bool, typer.Option(help="build the environments' images now")] = True,
) -> None:
    """Read Harbor tasks into TaskSpec JSON files (`polar submit FILE` takes each), their
    environment images built on this host first (cached by content)."""
    specs = load_harbor_dir(path, harness, sessions, build)
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
    from polar.client.sdk import PolarClient
    from polar.tasks.harbor import task_id_of
    from polar.tasks.spec import RuntimeSpec

    builds: dict[str, str] = {}
    try:
        if path.is_file() and path.suffix == ".jsonl":
            spec = RuntimeSpec(kind=runtime, **({"image": image} if image else {}))  # type: ignore[arg-type]
            if source_root is None and (path.parent / "repos").is_dir():
                source_root = path.parent / "repos"
            targets = au.swe_targets(path, source_root=source_root, runtime=spec)
        elif path.is_file() and path.suffix == ".json":
            targets = [au.taskspec_target(path, oracle)]
        else:
            from polar.tasks.harbor_images import ensure_images

            image_map = get_settings().harbor_image_map
            targets = au.harbor_targets(path, image_map)
            for built in ensure_images(path, image_map=image_map, log=console.print):
                builds[task_id_of(built.task)] = f"{built.how}, {built.seconds:g} s"
                console.print(f"{built.task}: {built.image} ({builds[task_id_of(built.task)]})")
    except (OSError, ValueError, ImportError) as exc:
        console.print(f"cannot audit {path}: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc

    def progress(audit: au.TaskAudit) -> None:
        console.print(f"{audit.task_id}: {audit.verdict} ({audit.seconds:g}s)", markup=False)

    async def go() -> au.AuditReport:
        polar = await PolarClient.connect()
        return await au.run_audit(polar, targets, parallel=parallel, on_task=progress)

    report = asyncio.run(go())
    for audit in report.tasks:
        audit.build = builds.get(audit.task_id)
    if sys.stdout.isatty():
        header, rows = au.report_rows(report)
        table = Table(title=f"audit of {path}")
        for col in header:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        console.print(table, markup=False)
    else:  # a pipe or CI log: the Markdown table, never truncated
        console.print(au.markdown_table(report), markup=False, soft_wrap=True)
    for t in report.flagged:
        console.print(f"{t.task_id}: {t.verdict}: {'; '.join(t.reasons)}", markup=False)
    saved = au.save_verdicts(report, path)
    console.print(f"verdicts: {saved}", markup=False)
    if json_out is not None:
        json_out.write_text(json.dumps(au.report_json(report), indent=2) + "\n")
    if report.flagged:
        raise typer.Exit(1)


@app.command()
def status(workflow_id: str) -> None:
    """Show a task's status and its sessions' stages."""
    from polar.client.sdk import PolarClient

    async def go() -> None:
        st = await (await PolarClient.connect()).status(workflow_id)
        console.print(f"{st.workflow_id}: {st.status} ({st.done}/{st.total} sessions done)")
        for s in st.sessions:
            console.print(f"  {s.session_id}: {s.stage} {s.status or ''}")

    asyncio.run(go())


@app.command()
def result(workflow_id: str, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Wait for a task and print its result."""
    from polar.client.sdk import PolarClient

    async def go() -> None:
        polar = await PolarClient.connect()
        res = await polar.wait(workflow_id)
        if as_json:
            print(json.dumps(res.model_dump(mode="json"), indent=2))
        else:
            print_result(res, polar)

    asyncio.run(go())


@app.command()
def export(
    out: Annotated[Path, typer.Option(help="output directory")],
    workflow_id: Annotated[str | None, typer.Argument(help="the task's workflow id")] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="jsonl | hf | sft | verl | trl | slime | all, or several: jsonl,verl"
        ),
    ] = "all",
    min_reward: Annotated[float, typer.Option(help="SFT view: least session reward")] = 1.0,
    traces: Annotated[
        list[str] | None,
        typer.Option(help="offline: a traces JSONL file or S3 key, instead of a workflow id"),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="seconds to wait for the task")] = None,
) -> None:
    """Write a task's traces for trainers: JSONL, a Hugging Face dataset, an SFT view, and
    verl, TRL and slime layouts (polar/client/export.py, polar/client/layouts.py)."""
    from polar.client import export as ex

    try:
        formats = ex.expand_formats([fmt])
    except ValueError as exc:
        names = [f.value for f in ex.ExportFormat]
        console.print(f"[red]--format must be one of {names}, or several joined by ','[/red]")
        raise typer.Exit(2) from exc
    if (workflow_id is None) == (not traces):
        console.print("[red]give either a workflow id or --traces[/red]")
        raise typer.Exit(2)
    sft = bool(ex.NEEDS_RECORDS.intersection(formats))

    async def from_workflow(wid: str) -> ex.Collected:
        from polar.client.sdk import PolarClient

        polar = await PolarClient.connect()
        return await ex.collect_workflow(polar, wid, timeout_s=timeout, with_records=sft)

    if workflow_id is not None:
        got = asyncio.run(from_workflow(workflow_id))
    else:
        from polar.storage import Storage

        sources = traces or []
        storage = None if all(Path(s).exists() for s in sources) else Storage(get_settings())
        got = ex.collect_files(sources, storage, with_records=sft)
    summary = ex.export_traces(
        got.traces,
        out,
        formats,
        min_reward=min_reward,
        rewards=got.rewards,
        records=got.records,
        source=got.source,
    )
    console.print(
        f"{summary.traces} traces from {summary.sessions} sessions → {out}: "
        f"{summary.rl_rows} RL rows, {summary.sft_rows} SFT conversations "
        f"({summary.resolved_sessions} resolved sessions, reward ≥ {min_reward:g})"
    )
    if summary.sft_skipped:
        console.print(
            f"[yellow]{summary.sft_skipped} merged traces left out of the SFT view: "
            "their CompletionRecords were not available[/yellow]"
        )
    for kind, path in summary.files.items():
        console.print(f"  {kind}: {path}")


@app.command()
def generate(
    dataset: Annotated[Path, typer.Argument(help="SWE-bench / SWE-Gym instances (JSONL)")],
    harness: Annotated[
        str, typer.Option(help="command | codex | claude_code | qwen_code | pi")
    ] = "command",
    command: Annotated[str | None, typer.Option(help="the command harness's shell line")] = None,
    model: Annotated[str, typer.Option(help="model name the harness asks the backend for")] = (
        "policy"
    ),
    sessions: Annotated[int, typer.Option(help="sessions per instance")] = 1,
    runtime: Annotated[str, typer.Option(help="local | docker")] = "local",
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
    from polar.client.generate import GenerateSummary
    from polar.client.generate import generate as run_generate
    from polar.tasks.spec import RuntimeSpec
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
    try:
        harness_spec = HarnessSpec.model_validate(
            {"kind": harness, "model": model, **({"command": command} if command else {})}
        )
        runtime_spec = RuntimeSpec.model_validate(
            {"kind": runtime, **({"image": image} if image else {})}
        )
        if concurrency < 1 or sessions < 1:
            raise ValueError("--concurrency and --sessions must be at least 1")
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    if harness_spec.kind == "command" and not harness_spec.command:
        console.print("[red]--harness command needs --command[/red]")
        raise typer.Exit(2)
    if source_root is None and (dataset.parent / "repos").is_dir():
        source_root = str(dataset.parent / "repos")

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

            return await run_generate(
                polar,
                instances,
                harness=harness_spec,
                sessions_per_instance=sessions,
                runtime=runtime_spec,
                source_root=source_root,
                out=out,
                timeouts={"harness_s": harness_timeout} if harness_timeout else None,
                concurrency=concurrency,
                task_timeout_s=task_timeout,
                on_progress=progress,
                dataset=dataset,
            )

    summary = asyncio.run(go())
    table = Table(title=f"polar generate: {harness_spec.kind} ({harness_spec.model}) → {out}")
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
    console.print(table)
    console.print(
        f"attempted {summary.attempted}, resolved {summary.resolved}, "
        f"acceptance rate {summary.acceptance_rate:.1%}; kept {len(summary.kept_sessions)} "
        f"sessions: {summary.rl_rows} RL rows, {summary.sft_rows} SFT conversations"
    )
    for err in summary.task_errors:
        console.print(f"{err['instance_id']}: {err['error']}", style="yellow", markup=False)
    for kind, path in summary.files.items():
        console.print(f"  {kind}: {path}")


# ---------------------------------------------------------------------------- keys


@keys_app.command("mint")
def key_mint(
    session_id: Annotated[str, typer.Option(help="the session the key records calls into")],
    task_id: Annotated[str, typer.Option(help="the task the session belongs to")],
    ttl_s: Annotated[float, typer.Option(help="seconds the key stays valid")] = 24 * 3600.0,
    gateway_url: Annotated[
        str | None, typer.Option(help="the gateway's root as the harness reaches it")
    ] = None,
    model: Annotated[str, typer.Option(help="model name the harness is told to use")] = "policy",
    key_only: Annotated[bool, typer.Option("--key-only", help="print the key alone")] = False,
) -> None:
    """Mint a session key with the configured secret (POLAR_SESSION_SECRET) and print the
    `export` lines of every provider's variables pointed at the gateway, for a harness run
    by hand: eval "$(polar key mint --session-id s1 --task-id t1)"."""
    import math
    import shlex

    from activities.harnesses.command import gateway_env
    from polar.session_keys import SessionIdentity, mint_session_key

    errors = Console(stderr=True)

    def fail(text: str) -> None:  # plain text: an id or secret is never read as markup
        errors.print(text, markup=False, soft_wrap=True)

    if not (math.isfinite(ttl_s) and ttl_s > 0):
        fail(f"--ttl-s must be a positive number of seconds, not {ttl_s}")
        raise typer.Exit(2)
    settings = get_settings()
    try:
        api_key = mint_session_key(
            SessionIdentity(session_id, task_id), settings.session_secret, ttl_s=ttl_s
        )
    except ValueError as exc:  # an unsafe id (InvalidId), no secret
        fail(f"cannot mint a session key: {exc}")
        raise typer.Exit(2) from None
    if key_only:
        print(api_key)
        return
    env = gateway_env(
        gateway_url=gateway_url or settings.gateway_base_url,
        api_key=api_key,
        model=model,
        session_id=session_id,
        task_id=task_id,
    )
    print(f"# session {session_id} of task {task_id}; the key is valid for {ttl_s:g} s")
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")


@app.command()
def replay(
    target: Annotated[str, typer.Argument(help="a workflow id or a saved history .json")],
    save: Annotated[Path | None, typer.Option(help="also save the fetched history here")] = None,
) -> None:
    """Replay a workflow history against today's code and explain any non-determinism."""
    from workflows import replay as rp

    async def go() -> bool:
        path = Path(target)
        if path.suffix == ".json" and path.exists():
            history = rp.load_history(path)
        else:
            from polar.temporal_client import connect

            history = await rp.fetch_history(await connect(get_settings()), target)
        if save:
            rp.save_history(history, save)
        report = await rp.replay(history)
        colour = "green" if report.ok else "red"
        console.print(
            f"[{colour}]{report.workflow_type} {report.workflow_id} "
            f"({report.events} events): {report.explanation}[/{colour}]"
        )
        return report.ok

    if not asyncio.run(go()):
        raise typer.Exit(1)


@app.command()
def demo(
    sessions: Annotated[int, typer.Option(help="sessions in the demo group")] = 4,
) -> None:
    """The main job: bring the stack up, roll out the demo task, print the result."""
    import time

    dev_up(model=True, workers=1)
    spec = demo_task(sessions)
    from polar.client.sdk import PolarClient

    async def go() -> None:
        polar = await PolarClient.connect()
        started = time.monotonic()
        run = await polar.submit(spec)
        await _follow_and_print(run)
        console.print(f"submit → result: {time.monotonic() - started:.1f}s")

    asyncio.run(go())


def demo_task(sessions: int) -> TaskSpec:
    """The bundled demo: a multi-turn OpenAI-SDK agent on a tiny repo, graded by a command.

    The task and its repo come from a checkout's examples/demo or the installed package's
    data files (polar.assets); the repo is copied to `.polar/demo/repo` under the working
    directory, which the dev stack's worker may read (its source roots default to its working
    directory; never the data dir, which holds the stack's state)."""
    import shutil

    from polar.assets import asset_dir

    demo_dir = asset_dir("demo")
    spec = json.loads((demo_dir / "task.json").read_text())
    repo = Path(".polar", "demo", "repo").resolve()
    shutil.copytree(demo_dir / "repo", repo, dirs_exist_ok=True)
    spec["num_sessions"] = sessions
    spec["source"]["path"] = str(repo)
    return TaskSpec.model_validate(spec)


if __name__ == "__main__":
    app()
