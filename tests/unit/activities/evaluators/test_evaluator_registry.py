"""The evaluator registry (activities/evaluators) and the typed reports it writes
(each kind's report.py, on polar/evaluation_reports.py).

The registry serves every `EvaluatorSpec.kind` but `none`; the kinds the
workflows prewarm for are the evaluators' own declaration;
an unknown kind is refused by the `evaluate` activity without a retry. Reports
stored before the models (plain dicts, the same names) parse, and dump back
under the same names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.evaluators import (
    EVALUATORS,
    EvaluatorConfig,
    UnknownEvaluator,
    get_evaluator,
    kinds_needing_fresh_runtime,
    parse_report,
)
from activities.evaluators.command import CommandReport
from activities.evaluators.swebench.report import SweBenchReport
from activities.postrun_activities import PostrunActivities
from polar.contracts import EvaluateRequest, RuntimeHandle
from polar.evaluation_reports import EvaluationReport
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import EvaluatorSpec

# a report as the swebench evaluator wrote it before it had a model (a resolved instance)
LEGACY_SWEBENCH_REPORT = {
    "instance_id": "textkit__textkit-1",
    "resolved": True,
    "reward": 1.0,
    "empty_patch": False,
    "patch_applied": True,
    "patch_apply_failed": False,
    "apply_strategy": "git apply",
    "tests_timed_out": False,
    "evaluator_error": None,
    "patch_files": ["textkit/slug.py"],
    "dropped_files": ["textkit/__pycache__/slug.cpython-311.pyc"],
    "protected_files_dropped": [],
    "patch_bytes": 412,
    "test_command": "python -m pytest -rA -p no:cacheprovider tests/test_slug.py",
    "tests_exit_code": 0,
    "results_from": "pytest plugin",
    "FAIL_TO_PASS": {"success": ["tests/test_slug.py::test_a"], "failure": []},
    "PASS_TO_PASS": {"success": ["tests/test_slug.py::test_b"], "failure": []},
    "test_status": {"tests/test_slug.py::test_a": "PASSED", "tests/test_slug.py::test_b": "PASSED"},
    "extract_error": None,
    "apply_attempts": [{"strategy": "git apply", "exit_code": 0}],
    "collect_problems": {},
    "pytest_sessions": {"started": 1, "finished": 1, "exit_statuses": [0]},
    "duration_s": 1.234,
    "eval_runtime": "prewarmed",
}


def test_every_evaluator_owns_its_config_and_report_model() -> None:
    for kind, evaluator in EVALUATORS.items():
        assert evaluator.kind == kind and get_evaluator(kind) is evaluator
        assert isinstance(evaluator.needs_fresh_runtime, bool)
        assert issubclass(evaluator.report_model, EvaluationReport)
        assert issubclass(evaluator.config_model, EvaluatorConfig)
        # each kind's models live in its own folder
        folder = f"activities.evaluators.{kind}."
        assert evaluator.report_model.__module__.startswith(folder), kind
        assert evaluator.config_model.__module__.startswith(folder), kind
    assert "none" not in EVALUATORS  # the spec's own way of saying "not graded"


def test_the_fresh_runtime_kinds_are_the_evaluators_own_declaration() -> None:
    """The worker hands this to the workflows (RolloutTask.declare_evaluators): no workflow
    names an evaluator kind."""
    declared = {kind for kind, e in EVALUATORS.items() if e.needs_fresh_runtime}
    assert kinds_needing_fresh_runtime() == declared and "command" in declared


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(UnknownEvaluator, match="unknown evaluator kind 'rubric'") as info:
        get_evaluator("rubric")
    assert "command" in str(info.value) and "swebench" in str(info.value)


async def test_the_evaluate_activity_refuses_an_unknown_kind_without_retry(
    tmp_path: Path,
) -> None:
    """A spec from newer code (or built without validation) names a kind no evaluator serves:
    the activity fails at once, naming it, before it touches any runtime."""
    settings = Settings(data_dir=str(tmp_path))
    acts = PostrunActivities(settings, Storage(settings))
    request = EvaluateRequest(
        session_id="s-unknown-evaluator",
        task_id="t",
        runtime=RuntimeHandle(kind="local", session_id="s-unknown-evaluator", workdir="", host=""),
        evaluator=EvaluatorSpec.model_construct(kind="rubric", protected=[]),
        budget_s=60,
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.evaluate, request)
    assert info.value.non_retryable and info.value.type == "UnknownEvaluator"
    assert "'rubric'" in info.value.message
    assert not (tmp_path / "runtimes").exists()  # no runtime was prepared


def test_a_report_stored_before_the_models_parses_and_dumps_back_alike() -> None:
    stored = json.dumps(LEGACY_SWEBENCH_REPORT).encode()
    report = parse_report("swebench", stored)
    assert isinstance(report, SweBenchReport)
    assert report.resolved and report.reward == 1.0
    assert report.fail_to_pass.success == ["tests/test_slug.py::test_a"]
    assert report.apply_attempts[0].strategy == "git apply"
    assert report.pytest_sessions is not None and report.pytest_sessions.exit_statuses == [0]
    dumped = json.loads(report.to_json())
    # every key it had, under the same name and with the same value; the rest are defaults
    assert {k: dumped[k] for k in LEGACY_SWEBENCH_REPORT} == LEGACY_SWEBENCH_REPORT
    assert set(dumped) - set(LEGACY_SWEBENCH_REPORT) == {
        "invalid_reward",
        "rewards_clamped",
        "inconsistent",
        "apply_log",
        "results_problem",
        "tampered",
        "runner_non_dumpable",
    }


def test_a_report_may_be_written_by_python_name_or_json_name() -> None:
    by_name = SweBenchReport(fail_to_pass={"success": ["t::a"], "failure": []})
    by_alias = SweBenchReport.model_validate({"FAIL_TO_PASS": {"success": ["t::a"]}})
    assert by_name == by_alias
    assert json.loads(by_name.to_json())["FAIL_TO_PASS"] == {"success": ["t::a"], "failure": []}


def test_a_command_report_round_trips() -> None:
    report = CommandReport.model_validate(
        {
            "patch_files": ["hello.txt"],
            "baselines": {"session": "a" * 40, "eval": "a" * 40},
            "exit_code": 0,
            "reward_file": True,
            "eval_runtime": "fresh",
        }
    )
    again = parse_report("command", report.to_json())
    assert again == report and isinstance(again, CommandReport)
    assert again.baselines is not None and again.baselines.session == "a" * 40


def test_a_report_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown evaluator kind 'rubric'"):
        parse_report("rubric", b"{}")
    with pytest.raises(ValidationError):
        parse_report("swebench", b'{"resolved": "perhaps"}')
    with pytest.raises(ValidationError):
        parse_report("command", b"[1, 2]")
    assert EvaluationReport().model_dump(by_alias=True)["evaluator_error"] is None
