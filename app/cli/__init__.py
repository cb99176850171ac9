"""The `polar` command line: the dev stack, submitting and following tasks, processes.

The Typer `app` (the console script `polar = "app.cli:app"`) assembled from its command
groups, one module each: `main` (the process: global flags, console, exit), `services`
(gateway, worker), `console`, `submit` (submit, status, result), `sessions` (logs, show,
a session's result), `export`, `generate`, `replay`, `demo`, `image_shell` (`shell`), and
the sub-commands `dev`, `key` (`keys`) and `tasks`."""

from __future__ import annotations

from app.cli import demo, export, generate, image_shell, replay, services, sessions, submit
from app.cli.console import console_command
from app.cli.dev import dev_app
from app.cli.keys import keys_app
from app.cli.main import PolarApp, main
from app.cli.tasks import tasks_app

__all__ = ["app"]

app = PolarApp(help="Polar: rollouts of real agent harnesses on Temporal.", no_args_is_help=True)
app.callback()(main)
app.add_typer(dev_app, name="dev")
app.add_typer(keys_app, name="key")
app.add_typer(tasks_app, name="tasks")
app.command()(services.gateway)
app.command()(services.worker)
app.command("console")(console_command)
app.command()(submit.submit)
app.command()(submit.status)
app.command()(submit.result)
app.command()(sessions.logs)
app.command()(sessions.show)
app.command()(export.export)
app.command()(generate.generate)
app.command()(replay.replay)
app.command()(demo.demo)
app.command("shell")(image_shell.shell)
