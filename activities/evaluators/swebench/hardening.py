"""The swebench evaluator's pytest hardening: the task-owned paths a patch may not change,
the pytest sections of setup.cfg / pyproject.toml put back, Polar's runner and plugin put in
scratch, and the patch files that would shadow an importable module dropped."""

from __future__ import annotations

import configparser
import json
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from activities import safe_files
from activities.evaluators.base import GIT, EvaluatorError, run_in
from activities.evaluators.patches import patch_files, revision
from activities.evaluators.protected import PLUGIN_MODULE, PROTECTED
from activities.evaluators.swebench.commands import default_test_files, interpreter_argv
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.workspace_git import Content, WorkspaceGit
from activities.runtimes.base import Runtime
from polar.contracts import RuntimeHandle

__all__ = [
    "GRADING_DIR",
    "ModuleMap",
    "drop_shadowing",
    "install_grading_files",
    "probe_modules",
    "protected_paths",
    "restore_pytest_sections",
    "shadowing_files",
]

GRADING_DIR = "polar-grading"
"""The scratch folder of the runner, the plugin, the run's key and the signed results."""
EVALUATORS_DIR = Path(__file__).parent.parent
"""Where the runner (pytest_runner.py) and the plugin (pytest_results.py) are kept."""
MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")

# kept, unless the patch changes their pytest section
PYTEST_SECTION_FILES = ("setup.cfg", "pyproject.toml")


def protected_paths(spec: SweBenchConfig, extra: Sequence[str] = ()) -> list[str]:
    """Globs of what the session's patch may not change: PROTECTED, the task's own, the graded
    test files (those run, those of the test ids, the test patch's) and their `__init__.py`."""
    tests = [*(spec.test_files or []), *default_test_files(spec), *patch_files(spec.test_patch)]
    inits = [  # a test folder's package file runs before its tests (package code does not count)
        f"{folder}/__init__.py"
        for test in tests
        for folder in PurePosixPath(test).parents
        if "test" in folder.name.lower()
    ]
    return list(dict.fromkeys([*PROTECTED, *extra, *tests, *inits]))


def shadowing_files(
    added: Sequence[str], base_files: Sequence[str], importable: set[str]
) -> dict[str, str]:
    """Files the patch adds (absent at base) that would shadow an importable top-level module:
    path -> module. A file shadows where a folder on its way (the root included) is no package
    at base (no `__init__.py`: pytest may put it on sys.path) and the name right below that
    folder is importable in the runtime but is not the repository's own there at base."""
    base = set(base_files)
    inits = {str(PurePosixPath(f).parent) for f in base if PurePosixPath(f).name == "__init__.py"}
    own: dict[str, set[str]] = {}
    for f in base:
        parts = PurePosixPath(f).parts
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth]) or "."
            own.setdefault(folder, set()).add(_module_name(parts[depth], depth == len(parts) - 1))
    out: dict[str, str] = {}
    for path in added:
        if path in base:
            continue
        parts = PurePosixPath(path).parts
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth]) or "."
            if folder in inits:
                continue
            name = _module_name(parts[depth], depth == len(parts) - 1)
            if name and name in importable and name not in own.get(folder, set()):
                out[path] = name
                break
    return out


def _module_name(component: str, is_file: bool) -> str:
    """The module name a path component imports as ('' where it cannot be one)."""
    if not is_file:
        return component if component.isidentifier() else ""
    if not component.endswith(MODULE_SUFFIXES):
        return ""
    stem = component.split(".", 1)[0]
    return stem if stem.isidentifier() else ""


def _pytest_config(name: str, content: Content) -> Any:
    """The pytest section of a setup.cfg or pyproject.toml (None: the file is absent)."""
    if content is None:
        return None
    if isinstance(content, str):  # a link, not a regular file: why it was not read
        return ("not read", content)
    text = content.decode(errors="replace")
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.RawConfigParser()
        parser.read_string(text)
        return dict(parser["tool:pytest"]) if parser.has_section("tool:pytest") else None
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError) as exc:
        return ("unreadable", str(exc))


async def restore_pytest_sections(git: WorkspaceGit, base: str, files: Sequence[str]) -> list[str]:
    """Restore (from commit `base`, the baseline) each setup.cfg / pyproject.toml whose pytest
    section the patch changed; the files restored. A file that is now a link or not a
    regular file counts as changed."""
    candidates = [f for f in files if PurePosixPath(f).name in PYTEST_SECTION_FILES]
    if not candidates:
        return []
    changed = []
    versions = await git.versions(base, candidates)
    for f, (before, after) in zip(candidates, versions, strict=True):
        name = PurePosixPath(f).name
        if _pytest_config(name, before) != _pytest_config(name, after):
            changed.append(f)
    if changed:
        code, log = await git.restore(base, changed, "swebench-restore", 60)
        if code != 0:
            raise EvaluatorError(f"cannot restore the pytest configuration: {log.strip()}")
    return [f"{f} (pytest section)" for f in changed]


def install_grading_files(runtime: Runtime, handle: RuntimeHandle) -> Path:
    """Polar's runner and plugin in the evaluator's scratch (written no-follow, fresh); the
    folder."""
    scratch = runtime.scratch(handle)
    for name, source in (
        ("pytest_runner.py", "pytest_runner.py"),
        (f"{PLUGIN_MODULE}.py", "pytest_results.py"),
    ):
        safe_files.write_bytes(
            scratch, f"{GRADING_DIR}/{name}", (EVALUATORS_DIR / source).read_bytes()
        )
    for stale in ("key", "results.json", "importable.json"):
        safe_files.remove(scratch, f"{GRADING_DIR}/{stale}")
    return scratch / GRADING_DIR


@dataclass
class ModuleMap:
    """What decides which patch files shadow a module: the importable top-level names of the
    runtime's Python (outside the workspace), and the files of the workspace at base."""

    importable: set[str]
    base_files: list[str]


async def probe_modules(
    runtime: Runtime, handle: RuntimeHandle, git: WorkspaceGit, folder: Path, argv: Sequence[str]
) -> ModuleMap:
    """List the base's files (with the workspace's `git`) and the importable modules (the test
    command's interpreter, run by the runner, in the evaluator's runtime) before the patch
    is applied."""
    base_files = git.out / "base-files"
    listing_command = (
        f"{GIT} ls-tree -r --name-only -z {revision(handle.baseline or 'HEAD')} "
        f"> {shlex.quote(str(base_files))}"
    )
    listed, log = await git.read_only(listing_command, "swebench-files", 120)
    listing = safe_files.read_bytes(git.out, base_files.name, limit=256 << 20)
    safe_files.remove(git.out, base_files.name)  # a runtime's scratch is copied in each time
    if listed != 0 or listing is None:
        raise EvaluatorError(f"cannot list the files at base (exit {listed}): {log.strip()[-500:]}")
    interp = " ".join(shlex.quote(a) for a in interpreter_argv(argv))
    runner = shlex.quote(str(folder / "pytest_runner.py"))
    command = (
        "py=$(command -v python3 || command -v python) || exit 127\n"
        f'"$py" -I {runner} probe {shlex.quote(str(folder))} -- {interp}'
    )
    code, _, log = await run_in(runtime, handle, command, "swebench-probe", 120)
    scratch = runtime.scratch(handle)
    names = safe_files.read_bytes(scratch, f"{GRADING_DIR}/importable.json", limit=32 << 20)
    safe_files.remove(scratch, f"{GRADING_DIR}/importable.json")
    if code != 0 or names is None:
        raise EvaluatorError(
            f"cannot list the runtime's importable modules (exit {code}): {log.strip()[-500:]}"
        )
    try:
        importable = {str(n) for n in json.loads(names)}
    except ValueError as exc:
        raise EvaluatorError(f"the module probe's output does not parse: {exc}") from exc
    base = [f for f in listing.decode("utf-8", "surrogateescape").split("\0") if f]
    return ModuleMap(importable, base)


async def drop_shadowing(git: WorkspaceGit, files: Sequence[str], modules: ModuleMap) -> list[str]:
    """Remove the applied patch's files that would shadow an importable module; the report's
    lines for them."""
    shadows = shadowing_files(files, modules.base_files, modules.importable)
    if not shadows:
        return []
    code, log = await git.remove(list(shadows), "swebench-shadows")
    if code != 0:
        raise EvaluatorError(f"cannot remove the shadowing files: {log.strip()[-500:]}")
    return [f"{f} (shadows the importable module {m!r})" for f, m in shadows.items()]
