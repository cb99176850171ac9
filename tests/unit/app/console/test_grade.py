"""The grade section read from the evaluators' own report models: per-test results with what
the task required, reward components, the rubric judge's score and reason, dropped files."""

from __future__ import annotations

from pathlib import Path

from activities.evaluators.harbor.report import HarborReport
from activities.evaluators.swebench.report import SweBenchReport, TestOutcomes
from app.console.grade import grade_facts
from app.console.safety import Redactor, template_environment
from polar.evaluation_reports import RubricReport
from polar.settings import ConsoleSettings


def dumped(report: object) -> str:
    return report.model_dump_json(by_alias=True)  # type: ignore[attr-defined]


def test_swebench_tests_are_listed_with_what_the_task_required() -> None:
    report = SweBenchReport(
        FAIL_TO_PASS=TestOutcomes(success=["t::fixed"], failure=["t::still_broken"]),
        PASS_TO_PASS=TestOutcomes(success=["t::kept"], failure=[]),
        test_status={"t::fixed": "PASSED", "t::kept": "PASSED", "t::extra": "FAILED"},
        protected_files_dropped=["tests/test_t.py"],
        tampered=["conftest.py"],
    )
    facts = grade_facts(dumped(report))
    assert [(t.test, t.required, t.status) for t in facts.tests] == [
        ("t::fixed", "FAIL_TO_PASS", "PASSED"),
        ("t::still_broken", "FAIL_TO_PASS", "missing"),
        ("t::kept", "PASS_TO_PASS", "PASSED"),
        ("t::extra", "", "FAILED"),
    ]
    assert facts.protected_dropped == ["tests/test_t.py"]
    assert facts.problems == ["tampered: conftest.py"]


def test_components_and_the_rubric_judge() -> None:
    rubric = RubricReport(
        model="judge",
        formula="0.5*outcome + 0.5*score",
        outcome=1.0,
        score=0.5,
        reason="tests pass but the code is <b>odd</b>",
        reward=0.75,
    )
    report = HarborReport(reward=0.75, components={"tests": 1.0, "style": 0.5}, rubric=rubric)
    facts = grade_facts(dumped(report))
    assert facts.components == {"tests": 1.0, "style": 0.5}
    assert facts.rubric is not None and facts.rubric.score == 0.5
    assert facts.rubric.reason == "tests pass but the code is <b>odd</b>" and not facts.tests


def test_nothing_from_what_is_not_a_json_object() -> None:
    assert not grade_facts("{not json") and not grade_facts("[1, 2]") and not grade_facts("{}")


def test_the_macro_shows_them_escaped(tmp_path: Path) -> None:
    settings = ConsoleSettings(data_dir=tmp_path)
    env = template_environment(settings, Redactor(settings))
    macro = env.from_string('{% from "macros.html" import grade_facts %}{{ grade_facts(g) }}')
    rubric = RubricReport(score=0.5, reason="<script>alert(1)</script>", outcome=1.0, reward=0.75)
    report = SweBenchReport(
        FAIL_TO_PASS=TestOutcomes(success=["t::fixed"]),
        test_status={"t::fixed": "PASSED"},
        rubric=rubric,
        protected_files_dropped=["tests/test_t.py"],
    )
    html = macro.render(g=grade_facts(dumped(report)))
    assert '<td class="test-status">PASSED</td>' in html and "FAIL_TO_PASS" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert '<dd class="judge-score">0.500</dd>' in html
    assert '<span class="path">tests/test_t.py</span>' in html
