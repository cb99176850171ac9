"""Adding an evaluator kind is its own folder and one registration line (issue 33, item 2).

The `parity` kind below is defined wholly in this file (its config model, its evaluate and
its report model) and joins with one line, `EVALUATORS.register("parity", ...)`: no product
file is touched. With it, the task spec takes `{"kind": "parity", "parity": {...}}`, the
worker's and the CLI's checks validate the config by the kind's own model, the lists of
kinds and reports are derived from the registry, and an unknown kind or an invalid config
is refused with a message naming the known kinds or the field.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import Field
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.evaluators import (
    EVALUATORS,
    Evaluation,
    EvaluationJob,
    EvaluatorConfig,
    InvalidKindConfig,
    UnknownEvaluator,
    check_evaluator,
    kinds_needing_fresh_runtime,
    parse_report,
)
from activities.postrun_activities import PostrunActivities
from activities.task_kinds import check_task_kinds
from polar.contracts import EvaluateRequest, RuntimeHandle
from polar.evaluation_reports import EvaluationReport
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import EvaluatorSpec, TaskSpec


class ParityConfig(EvaluatorConfig):
    """`{"kind": "parity", "parity": {"modulus": 2}}`."""

    modulus: int = Field(ge=2)
    remainder: int = 0


class ParityReport(EvaluationReport):
    """What the parity evaluator reports."""

    modulus: int = 0


class ParityEvaluator:
    """Reward 1 (a trivial kind: grades without any runtime)."""

    kind: ClassVar[str] = "parity"
    needs_fresh_runtime: ClassVar[bool] = False
    needs_traces: ClassVar[bool] = False
    report_model: ClassVar[type[EvaluationReport]] = ParityReport
    config_model: ClassVar[type[EvaluatorConfig]] = ParityConfig

    async def evaluate(self, job: EvaluationJob) -> Evaluation:
        config = ParityConfig.of(job.spec)
        return Evaluation(reward=1.0, detail="even", report=ParityReport(modulus=config.modulus))

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        return {}


@pytest.fixture
def parity() -> Iterator[None]:
    EVALUATORS.register("parity", ParityEvaluator())  # the one registration line
    try:
        yield
    finally:
        EVALUATORS.unregister("parity")


def _task(evaluator: dict[str, object]) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": "t",
            "instruction": "x",
            "harness": {"kind": "command", "command": "true"},
            "evaluator": evaluator,
        }
    )


def test_the_kind_is_defined_in_this_file_alone() -> None:
    """The files the new kind needed: this test only, no product file."""
    files = {Path(inspect.getfile(c)) for c in (ParityConfig, ParityReport, ParityEvaluator)}
    product_files_touched = files - {Path(__file__)}
    assert len(product_files_touched) == 0


def test_a_registered_kind_is_validated_by_its_own_model(parity: None) -> None:
    task = _task({"kind": "parity", "parity": {"modulus": 2}})
    checked = check_task_kinds(task)  # what `polar submit` runs
    config = check_evaluator(checked.evaluator)  # what the worker runs before it grades
    assert isinstance(config, ParityConfig) and config.modulus == 2
    # written back as its model writes it, under the kind's key
    assert checked.evaluator.model_dump()["parity"] == {"modulus": 2, "remainder": 0}
    assert "parity" in EVALUATORS.kinds() and "parity" not in kinds_needing_fresh_runtime()
    report = parse_report("parity", ParityReport(modulus=2).to_json())
    assert isinstance(report, ParityReport) and report.modulus == 2


def test_an_invalid_config_names_the_field(parity: None) -> None:
    with pytest.raises(InvalidKindConfig, match=r"evaluator\.parity\.modulus: Input should"):
        check_task_kinds(_task({"kind": "parity", "parity": {"modulus": 1}}))
    with pytest.raises(InvalidKindConfig, match=r"evaluator\.parity\.modulus: Field required"):
        check_task_kinds(_task({"kind": "parity"}))
    with pytest.raises(ValueError, match="unknown field 'parity'.*here 'command'"):
        _task({"kind": "command", "command": "true", "parity": {"modulus": 2}})
    with pytest.raises(ValueError, match="unknown field 'parities'"):
        _task({"kind": "parity", "parities": {"modulus": 2}})


def test_an_unknown_kind_names_the_known_ones() -> None:
    """Without its registration line the kind is unknown; the message lists the registry."""
    with pytest.raises(UnknownEvaluator) as info:
        check_task_kinds(_task({"kind": "parity", "parity": {"modulus": 2}}))
    message = str(info.value)
    assert message.startswith("evaluator.kind: unknown evaluator kind 'parity'")
    assert all(kind in message for kind in EVALUATORS.kinds()) and "'none'" in message


async def test_the_evaluate_activity_refuses_an_invalid_config_without_retry(
    parity: None, tmp_path: Path
) -> None:
    settings = Settings(data_dir=str(tmp_path))
    acts = PostrunActivities(settings, Storage(settings))
    request = EvaluateRequest(
        session_id="s-parity",
        task_id="t",
        runtime=RuntimeHandle(kind="local", session_id="s-parity", workdir="", host=""),
        evaluator=EvaluatorSpec.model_validate({"kind": "parity", "parity": {"modulus": 0}}),
        budget_s=60,
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.evaluate, request)
    assert info.value.non_retryable and info.value.type == "InvalidTaskSpec"
    assert "evaluator.parity.modulus" in info.value.message
    assert not (tmp_path / "runtimes").exists()  # no runtime was prepared
