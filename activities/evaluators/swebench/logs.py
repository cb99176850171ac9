"""What the swebench evaluator's test run reported: the runner's signed results (checked
with the run's key), or the log parsed with the instance's swebench parser (trusting mode)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from activities import safe_files
from activities.evaluators.base import EvaluatorError
from activities.evaluators.statuses import PytestRun, verify_results
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.swebench.report import PytestSessions, SweBenchReport

__all__ = ["SuiteOutcome", "parse_test_log", "parser_hint", "read_or_none", "read_test_status"]

MAX_RESULTS_BYTES = 80 << 20


@dataclass
class SuiteOutcome:
    """What the test command did (its exit code, whether it timed out, its log) and what its
    tests reported: per-test status, the runner's run (None in trusting mode) and why the
    runner's results do not count (None where they do)."""

    code: int | None
    timed_out: bool
    log: str
    status: dict[str, str] = field(default_factory=dict)
    run: PytestRun | None = None
    problem: str | None = None


def parse_test_log(log: str, spec: SweBenchConfig) -> dict[str, str]:
    """Trusting mode: per-test status from the log, with the instance's swebench parser."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    assert spec.log_parser
    if spec.log_parser not in PARSER_REGISTRY:
        raise EvaluatorError(f"unknown log_parser {spec.log_parser!r}")
    return PARSER_REGISTRY[spec.log_parser](log, None)


def _repo_parsers() -> dict[str, Callable[..., dict[str, str]]]:
    """swebench's per-repository parsers (`MAP_REPO_TO_PARSER_*` of each language module)."""
    import importlib

    parsers: dict[str, Callable[..., dict[str, str]]] = {}
    for lang in ("python", "javascript", "c", "go", "java", "php", "ruby", "rust"):
        module = importlib.import_module(f"swebench.harness.log_parsers.{lang}")
        for name, value in vars(module).items():
            if name.startswith("MAP_REPO_TO_PARSER") and isinstance(value, dict):
                parsers.update(value)
    return parsers


def parser_hint(spec: SweBenchConfig) -> str:
    """The end of an error about tests pytest never ran: the log parser to set, if any."""
    parser = _repo_parsers().get(spec.repo)
    name = getattr(parser, "__name__", "")
    if name and name not in ("parse_log_pytest", "parse_log_pytest_v2"):
        return f"; for {spec.repo}, set log_parser to {name!r} (trusting mode)"
    return "; a test command that is not pytest needs log_parser (trusting mode)"


def read_or_none(base: Path, relative: str) -> bytes | None:
    """A file the runner (or the code under test) may have written in scratch, no-follow; None
    where it is absent or not a plain file."""
    try:
        return safe_files.read_bytes(base, relative, limit=MAX_RESULTS_BYTES)
    except (safe_files.UnsafePath, IsADirectoryError):
        return None


def read_test_status(
    scratch: Path,
    spec: SweBenchConfig,
    outcome: SuiteOutcome,
    key: bytes,
    files: tuple[str, str],
    report: SweBenchReport,
) -> None:
    """Fill `outcome` with what the tests reported: the log parser's statuses, or the runner's
    results verified with `key` (`files`: the key's and the results' paths in scratch), their
    run told in `report`; EvaluatorError where the runner never took its key."""
    if spec.log_parser:
        outcome.status = parse_test_log(outcome.log, spec)
        return
    key_file, results_file = files
    if read_or_none(scratch, key_file) is not None:  # the runner never took its key
        safe_files.remove(scratch, key_file)
        if not outcome.timed_out:
            raise EvaluatorError(
                f"Polar's pytest runner never started (exit code {outcome.code}; is there a "
                f"python3 in the runtime?): {outcome.log.strip()[-500:]}"
            )
    run, problem = verify_results(read_or_none(scratch, results_file), key)
    outcome.run, outcome.problem = run, problem
    report.results_problem = problem
    outcome.status = run.status if run else {}
    if run is not None:
        report.collect_problems = run.collect_problems
        report.pytest_sessions = PytestSessions(
            started=run.started, finished=run.finished, exit_statuses=run.exit_statuses
        )
        report.tampered = run.tampered
        report.runner_non_dumpable = run.non_dumpable
