"""How to run each real harness CLI offline against a gateway (polar-independent).

`harness_invocation` writes the harness's config files under a fresh HOME and
returns the argv, environment and working directory of one non-interactive run:
base URL at the gateway, the session key as the API key, telemetry, update
checks and other non-essential traffic off. The environment is built from
scratch (nothing inherited but what a CLI needs to start), so a developer's own
keys or base URLs never leak into a run. What each harness needs is documented
in ../shared/harnesses/README.md; the production adapters build on this.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HARNESS_DIR = REPO / "infra" / "harnesses"
BIN_DIR = HARNESS_DIR / "node_modules" / ".bin"

KEY_ENV = "POLAR_API_KEY"


@dataclass(frozen=True)
class HarnessInfo:
    name: str
    package: str
    binary: str
    api: str  # provider API the harness calls
    route: str  # gateway path it posts to


HARNESSES: dict[str, HarnessInfo] = {
    "codex": HarnessInfo("codex", "@openai/codex", "codex", "openai_responses", "/v1/responses"),
    "claude": HarnessInfo(
        "claude", "@anthropic-ai/claude-code", "claude", "anthropic_messages", "/v1/messages"
    ),
    "qwen": HarnessInfo(
        "qwen", "@qwen-code/qwen-code", "qwen", "openai_chat", "/v1/chat/completions"
    ),
    "pi": HarnessInfo(
        "pi", "@mariozechner/pi-coding-agent", "pi", "openai_chat", "/v1/chat/completions"
    ),
}


@dataclass
class HarnessInvocation:
    """One non-interactive run of a harness CLI."""

    harness: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    home: Path
    config_files: list[Path] = field(default_factory=list)


def binary(harness: str, bin_dir: Path = BIN_DIR) -> Path:
    return bin_dir / HARNESSES[harness].binary


def installed_version(harness: str) -> str | None:
    """The installed package version, or None if infra/harnesses/install.sh has not run."""
    manifest = HARNESS_DIR / "node_modules" / HARNESSES[harness].package / "package.json"
    if not manifest.exists() or not binary(harness).exists():
        return None
    return json.loads(manifest.read_text()).get("version")


def base_env(home: Path, bin_dir: Path = BIN_DIR) -> dict[str, str]:
    """A clean environment: fresh HOME and XDG dirs, a plain PATH, no proxies, no keys."""
    node_dir = Path(shutil.which("node") or "/usr/bin/node").parent
    path = [str(bin_dir), str(node_dir), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "HOME": str(home),
        "USER": os.environ.get("USER", "agent"),
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "no_proxy": "127.0.0.1,localhost,::1",
        "DO_NOT_TRACK": "1",
    }
    for name in ("NODE_EXTRA_CA_CERTS", "TMPDIR"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def _write(path: Path, text: str, files: list[Path]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    files.append(path)


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def harness_invocation(
    harness: str,
    *,
    prompt: str,
    workspace: Path,
    home: Path,
    gateway_url: str,
    api_key: str,
    model: str = "policy",
    bin_dir: Path = BIN_DIR,
) -> HarnessInvocation:
    """Write `harness`'s offline config under `home` and return how to run it in `workspace`.

    `gateway_url` is the gateway's root (no `/v1`).
    """
    if harness not in HARNESSES:
        raise ValueError(f"unknown harness {harness!r}: one of {sorted(HARNESSES)}")
    gateway = gateway_url.rstrip("/")
    home.mkdir(parents=True, exist_ok=True)
    env = base_env(home, bin_dir) | {KEY_ENV: api_key}
    files: list[Path] = []
    exe = str(binary(harness, bin_dir))

    if harness == "codex":
        codex_home = home / ".codex"
        config = f"""\
model = {_toml_str(model)}
model_provider = "polar"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
apps = false

[model_providers.polar]
name = "Polar gateway"
base_url = {_toml_str(gateway + "/v1")}
env_key = {_toml_str(KEY_ENV)}
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""
        _write(codex_home / "config.toml", config, files)
        env["CODEX_HOME"] = str(codex_home)
        argv = [exe, "exec", "--skip-git-repo-check", "--cd", str(workspace), prompt]

    elif harness == "claude":
        env |= {
            "ANTHROPIC_BASE_URL": gateway,
            "ANTHROPIC_API_KEY": api_key,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root
        }
        argv = [exe, "-p", prompt, "--dangerously-skip-permissions", "--output-format", "json"]

    elif harness == "qwen":
        settings = {
            "general": {"enableAutoUpdate": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ui": {"enableFollowupSuggestions": False, "enableCacheSharing": False},
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
            "model": {"skipNextSpeakerCheck": True},
        }
        _write(home / ".qwen" / "settings.json", json.dumps(settings, indent=2), files)
        env |= {
            "OPENAI_BASE_URL": gateway + "/v1",
            "OPENAI_API_KEY": api_key,
            "OPENAI_MODEL": model,
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
        argv = [exe, "--auth-type", "openai", "--yolo", prompt]

    else:  # pi
        agent_dir = home / ".pi" / "agent"
        models = {
            "providers": {
                "polar": {
                    "baseUrl": gateway + "/v1",
                    "api": "openai-completions",
                    "apiKey": KEY_ENV,
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": model}],
                }
            }
        }
        _write(agent_dir / "models.json", json.dumps(models, indent=2), files)
        env |= {"PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1"}
        argv = [exe, "--provider", "polar", "--model", model, "--no-session"]
        argv += ["--mode", "json", "-p", prompt]

    return HarnessInvocation(harness, argv, env, workspace, home, files)


# --------------------------------------------------------------------------- network audit

_CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_[A-Z0-9]+)(?P<rest>[^}]*)\}")
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_ADDR4 = re.compile(r'sin_addr=inet_addr\("([^"]+)"\)')
_ADDR6 = re.compile(r'inet_pton\(AF_INET6, "([^"]+)"')
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


@functools.cache
def _strace() -> str | None:
    """strace, if it is installed and may trace here (ptrace can be forbidden in containers)."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    probe = [strace, "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", os.devnull, "true"]
    ok = subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    return strace if ok else None


def traced(argv: list[str], trace_file: Path) -> list[str] | None:
    """`argv` under strace, logging every connect() of its process tree; None if it cannot."""
    strace = _strace()
    if strace is None:
        return None
    flags = ["-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", str(trace_file)]
    return [strace, *flags, *argv]


def network_connects(trace_file: Path) -> list[tuple[str, str, int]]:
    """(family, address, port) of every IP connect() in a strace log."""
    out = []
    text = trace_file.read_text() if trace_file.exists() else ""
    for m in _CONNECT.finditer(text):
        family, rest = m.group(1), m.group("rest")
        if family not in ("AF_INET", "AF_INET6"):
            continue
        port = _PORT.search(rest)
        addr = _ADDR4.search(rest) or _ADDR6.search(rest)
        out.append((family, addr.group(1) if addr else "?", int(port.group(1)) if port else -1))
    return out


def foreign_connects(trace_file: Path, allowed_port: int) -> list[tuple[str, str, int]]:
    """Connects to anything but the gateway (loopback, `allowed_port`)."""
    return [
        c for c in network_connects(trace_file) if not (c[1] in LOOPBACK and c[2] == allowed_port)
    ]
