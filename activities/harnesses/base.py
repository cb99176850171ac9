"""The harness adapter interface: configure an agent program in a fresh HOME and launch it.

An adapter turns a session (gateway URL, session key, model, instruction) into
one non-interactive launch of its harness: it writes the harness's own config
files into the session's fresh HOME (base URL at the gateway, the session key
as the API key, telemetry, update checks, plugins and auto-memory off) and
returns the command line and environment the runtime runs in the workspace.
After the run it names the harness's native logs (session transcripts) to
keep as session artifacts next to stdout and stderr.

Paths: `home` is where the worker writes the config; `ctx.home_in_runtime` is
the same directory as the harness sees it (equal on the `local` runtime; a
container runtime mounts `home` elsewhere). Every path an adapter puts into the
environment or the command line is expressed in the runtime's view.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from activities import safe_files
from activities.harnesses.artifacts import unkeyable
from activities.harnesses.mcp import header_env
from activities.harnesses.skills import with_skills
from polar.tasks.spec import HarnessSpec
from polar.tasks.strict import StrictModel

log = logging.getLogger("polar.harness")

KEY_ENV = "POLAR_API_KEY"
"""The variable holding the session key; configs that name a key variable use this one."""


class HarnessNotInstalled(RuntimeError):
    """The harness CLI is not where the worker was told to find it."""


class HarnessConfig(StrictModel):
    """The base of a harness kind's config model: it validates what the task spec holds for
    the kind, by default the object under the key the kind's name gives (`{"kind": "mine",
    "mine": {...}}`; a kind without config has this empty model). What every kind shares
    (`model`, `args`, `env`, `unknown_models`) the core checks (polar/tasks/spec.py).
    `needs_instruction`: the kind cannot run without the task's instruction (a CLI that
    takes it as its prompt); `check_harness` refuses an empty one. `mcp_refused`: why the
    kind cannot take the spec's `mcp_servers` (None: it can); `check_harness` refuses them.
    `mcp_transports`: the MCP transports its client speaks, and `mcp_transport_refused` why
    it speaks no other; a server on another is refused the same way."""

    needs_instruction: ClassVar[bool] = False
    mcp_refused: ClassVar[str | None] = None
    mcp_transports: ClassVar[tuple[str, ...]] = ("stdio", "sse", "streamable-http")
    mcp_transport_refused: ClassVar[str] = ""

    @classmethod
    def written(cls, spec: HarnessSpec) -> dict[str, Any] | None:
        """The kind's config as the spec holds it (None: the spec gives none)."""
        return spec.kind_config()

    @classmethod
    def where(cls, spec: HarnessSpec) -> str:
        """Where the spec holds it, for messages (`harness.mine`)."""
        return f"harness.{spec.kind}"

    @classmethod
    def refusal(cls, spec: HarnessSpec) -> str | None:
        """Why `spec` holds a field this kind does not take (None: it holds none): by
        default the top-level `command`, which only kind `command` runs."""
        if spec.command is None:
            return None
        return (
            f"harness.command: harness kind {spec.kind!r} runs its own program: 'command' is "
            "only for kind 'command' (use 'args' for extra arguments)"
        )

    @classmethod
    def mcp_refusal(cls, spec: HarnessSpec) -> str | None:
        """Why this kind cannot run `spec`'s MCP servers (None: it can, or there are none)."""
        if not spec.mcp_servers:
            return None
        if cls.mcp_refused is not None:
            return f"harness.mcp_servers: harness kind {spec.kind!r} takes no MCP servers: " + (
                cls.mcp_refused
            )
        for i, server in enumerate(spec.mcp_servers):
            if server.transport not in cls.mcp_transports:
                return (
                    f"harness.mcp_servers[{i}].transport: harness kind {spec.kind!r} cannot "
                    f"reach MCP server {server.name!r} over {server.transport!r}: "
                    f"{cls.mcp_transport_refused}"
                )
        return None

    def written_into(self, spec: HarnessSpec) -> HarnessSpec:
        """`spec` holding this config as the model writes it (defaults filled in): what
        `polar submit` sends. A kind given no config and taking none is left as written."""
        config = self.model_dump(mode="json")
        if not config and self.written(spec) is None:
            return spec
        return spec.model_copy(update={spec.kind: config})

    @classmethod
    def of(cls, spec: HarnessSpec) -> Self:
        """The kind's config, validated (pydantic's ValidationError where it is invalid)."""
        return cls.model_validate(cls.written(spec) or {})

    @classmethod
    def instruction_refusal(cls, kind: str, instruction: str) -> str | None:
        """Why the task's `instruction` cannot serve this kind (None: it can)."""
        if not cls.needs_instruction or instruction.strip():
            return None
        return (
            f"instruction: harness kind {kind!r} runs its CLI non-interactively on the task's "
            "instruction: give a non-empty 'instruction' (kind 'command' runs without one)"
        )


class AgentCliConfig(HarnessConfig):
    """The config of an agent CLI's kind (codex, claude_code, qwen_code, pi): none of its own
    (the shared fields only), and the task's instruction, its prompt, is required."""

    needs_instruction: ClassVar[bool] = True


@dataclass(frozen=True)
class HarnessContext:
    """What an adapter needs to know about the session it launches."""

    spec: HarnessSpec
    instruction: str
    gateway_url: str  # the gateway's root as the harness reaches it, without /v1
    api_key: str  # the session key (HMAC-signed, names session, task and attempt)
    session_id: str
    task_id: str
    bin_dir: Path | None = None  # where the CLI binaries are; None: on the runtime's PATH
    home_in_runtime: str | None = None  # HOME as the harness sees it; None: same as `home`
    step: str | None = None  # a multi-step task's step (POLAR_STEP); None: one-step

    @property
    def gateway(self) -> str:
        return self.gateway_url.rstrip("/")

    @property
    def model(self) -> str:
        return self.spec.model


@dataclass
class Launch:
    """One non-interactive run: the shell command line and the environment it runs with."""

    command: str
    env: dict[str, str]
    argv: list[str] | None = None  # the same command as an argv, when it is one program
    config_files: list[Path] = field(default_factory=list)


def polar_env(ctx: HarnessContext) -> dict[str, str]:
    """The POLAR_* variables every harness gets (any script or tool inside may read them)."""
    return {
        "POLAR_GATEWAY_URL": ctx.gateway,
        "POLAR_BASE_URL": f"{ctx.gateway}/v1",
        KEY_ENV: ctx.api_key,
        "POLAR_MODEL": ctx.model,
        "POLAR_SESSION_ID": ctx.session_id,
        "POLAR_TASK_ID": ctx.task_id,
        "POLAR_INSTRUCTION": ctx.instruction,
    } | ({"POLAR_STEP": ctx.step} if ctx.step else {})


def write_config(home: Path, relative: str, text: str, files: list[Path]) -> None:
    """Write `home/relative` afresh, no-follow (activities/safe_files.py): HOME may be the
    sandbox user's, and hold a link its last run planted."""
    safe_files.write_bytes(home, relative, text.encode())
    files.append(home / relative)


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class CliAdapter:
    """A harness CLI from npm (infra/harnesses/): its package, binary, API and native logs."""

    kind: ClassVar[str]
    config_model: ClassVar[type[HarnessConfig]] = AgentCliConfig  # the shared fields only
    package: ClassVar[str]  # npm package
    binary: ClassVar[str]  # executable name in node_modules/.bin
    api: ClassVar[str]  # provider API it calls (polar/providers)
    route: ClassVar[str]  # gateway path it posts to
    log_globs: ClassVar[tuple[str, ...]] = ()  # native logs, relative to HOME

    # ------------------------------------------------------------------ installation
    def executable(self, ctx: HarnessContext) -> str:
        if ctx.bin_dir is None:
            return self.binary
        path = Path(ctx.bin_dir) / self.binary
        if not path.exists():
            raise HarnessNotInstalled(
                f"{self.kind}: {path} not found; run infra/harnesses/install.sh "
                "or point POLAR_HARNESS_BIN_DIR at the directory holding the CLIs"
            )
        return str(path)

    def installed_version(self, bin_dir: Path) -> str | None:
        """The installed package's version (node_modules next to `bin_dir`), or None."""
        manifest = Path(bin_dir).parent / self.package / "package.json"
        if not manifest.exists() or not (Path(bin_dir) / self.binary).exists():
            return None
        return json.loads(manifest.read_text()).get("version")

    # ------------------------------------------------------------------ launch
    def base_env(self, home: str, ctx: HarnessContext) -> dict[str, str]:
        """A quiet, offline environment: XDG dirs in HOME, no colours, no proxies, no tracking."""
        return {
            "HOME": home,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "NO_PROXY": "127.0.0.1,localhost,::1",
            "no_proxy": "127.0.0.1,localhost,::1",
            "DO_NOT_TRACK": "1",
        } | polar_env(ctx)

    def configure(
        self, home: Path, home_rt: str, workdir: str, ctx: HarnessContext, files: list[Path]
    ) -> tuple[list[str], dict[str, str]]:
        """Write config under `home`; return (arguments after the executable, extra env)."""
        raise NotImplementedError

    def mcp_config(
        self, home: Path, home_rt: str, ctx: HarnessContext, files: list[Path]
    ) -> list[str]:
        """Write the spec's MCP servers (`ctx.spec.mcp_servers`: stdio ones the harness spawns
        in the sandbox, URL ones it reaches) into this harness's own MCP config under `home`,
        after `configure`, their header values named by variable (activities/harnesses/mcp.py
        `header_refs`, set by `prepare`); return the arguments its command line needs for
        them. A kind that takes none, or not a transport, says why in its config model
        (`mcp_refused`, `mcp_transports`: refused before any run)."""
        raise ValueError(f"harness {self.kind!r} takes no MCP servers")

    def skills_folder(self, home_rt: str) -> str | None:
        """Where this harness reads Agent Skills, in the runtime's view (HOME there is
        `home_rt`): the task's `skills_dir` is copied there before it starts
        (activities/harnesses/skills.py). None: it reads none; the dir is named in
        $POLAR_SKILLS_DIR."""
        return None

    def prepare(self, home: Path, workdir: str, ctx: HarnessContext) -> Launch:
        if not ctx.instruction.strip():
            raise ValueError(f"harness {self.kind!r} needs a non-empty task instruction")
        home.mkdir(parents=True, exist_ok=True)
        home_rt = ctx.home_in_runtime or str(home)
        files: list[Path] = []
        args, extra = self.configure(home, home_rt, workdir, ctx, files)
        if ctx.spec.mcp_servers:
            args = [*args, *self.mcp_config(home, home_rt, ctx, files)]
            extra |= header_env(ctx.spec.mcp_servers, ctx.spec.env)
        argv = [self.executable(ctx), *args, *ctx.spec.args]
        env = self.base_env(home_rt, ctx) | extra | ctx.spec.env
        launch = Launch(command=shlex.join(argv), env=env, argv=argv, config_files=files)
        return with_skills(launch, ctx.spec.skills_dir, self.skills_folder(home_rt))

    # ------------------------------------------------------------------ after the run
    def native_logs(self, home: Path) -> list[tuple[str, Path]]:
        """(artifact name, file) of each native log the run left in `home`."""
        found: dict[str, Path] = {}
        for pattern in self.log_globs:
            for path in sorted(home.glob(pattern)):
                if path.is_file():
                    name = path.relative_to(home).as_posix().lstrip(".")
                    if (problem := unkeyable(name)) is not None:  # S3 could not take it
                        log.warning("native log %s left out: %s", ascii(name)[:120], problem)
                        continue
                    found[name] = path
        return sorted(found.items())
