"""The kinds a task names, checked before submit (activities/task_kinds.py): each kind's
config comes out as the JSON the core wrote when it held the kinds' models, byte for byte,
and that JSON (stored histories hold it) reads back through the core unchanged."""

from __future__ import annotations

import pytest

from activities.task_kinds import check_task_kinds
from polar.tasks.spec import EvaluatorSpec, HarnessSpec, TaskSpec

# `evaluator` as the core dumped it before the kinds' config models left it (the models
# were polar/tasks/evaluator_spec.py's SweBenchSpec and HarborVerifierSpec), each beside
# the evaluator as a user writes it
WRITTEN_AND_STORED = [
    (
        {
            "kind": "swebench",
            "swebench": {
                "instance_id": "i",
                "base_commit": "abcd1234",
                "fail_to_pass": ["a::b"],
                "install": "pip install -e .",
            },
            "protected": ["x"],
        },
        '{"kind":"swebench","command":null,"reward_command":null,"swebench":{"instance_id":"i",'
        '"repo":"","base_commit":"abcd1234","test_patch":"","fail_to_pass":["a::b"],'
        '"pass_to_pass":[],"test_cmd":null,"test_files":null,"install":"pip install -e .",'
        '"log_parser":null,"exclude":[]},"protected":["x"],"reward_range":[0.0,1.0]}',
    ),
    (
        {"kind": "harbor", "harbor": {"task": "t", "tests_dir": "/tmp", "user": "root"}},
        '{"kind":"harbor","command":null,"reward_command":null,"swebench":null,"harbor":'
        '{"task":"t","tests_dir":"/tmp","test_script":"test.sh","user":"root","env":{},'
        '"timeout_s":600.0},"protected":[],"reward_range":[0.0,1.0]}',
    ),
    (
        {
            "kind": "harbor",
            "harbor": {"task": "t", "tests_dir": "/tmp", "timeout_s": 60, "network": {}},
        },
        '{"kind":"harbor","command":null,"reward_command":null,"swebench":null,"harbor":'
        '{"task":"t","tests_dir":"/tmp","test_script":"test.sh","user":null,"env":{},'
        '"timeout_s":60.0},"protected":[],"reward_range":[0.0,1.0]}',
    ),
    (
        {
            "kind": "harbor",
            "harbor": {"task": "t", "tests_dir": "/tmp", "network": {"mode": "public"}},
        },
        '{"kind":"harbor","command":null,"reward_command":null,"swebench":null,"harbor":'
        '{"task":"t","tests_dir":"/tmp","test_script":"test.sh","user":null,"env":{},'
        '"timeout_s":600.0,"network":{"mode":"public","allowed_hosts":[]}},"protected":[],'
        '"reward_range":[0.0,1.0]}',
    ),
    (
        {"kind": "command", "command": "pytest", "reward_command": "python r.py"},
        '{"kind":"command","command":"pytest","reward_command":"python r.py","swebench":null,'
        '"protected":[],"reward_range":[0.0,1.0]}',
    ),
]


@pytest.mark.parametrize(("written", "stored"), WRITTEN_AND_STORED)
def test_a_checked_config_dumps_as_the_core_dumped_it(written: dict, stored: str) -> None:
    task = TaskSpec.model_validate(
        {"task_id": "t", "instruction": "x", "harness": {"kind": "pi"}, "evaluator": written}
    )
    assert check_task_kinds(task).evaluator.model_dump_json() == stored


@pytest.mark.parametrize(("written", "stored"), WRITTEN_AND_STORED)
def test_stored_json_reads_back_unchanged(written: dict, stored: str) -> None:
    assert EvaluatorSpec.model_validate_json(stored).model_dump_json() == stored


# `harness` as the core dumped it when its kinds were a Literal, beside it as written
HARNESS_WRITTEN_AND_STORED = [
    (
        {"kind": "command", "command": "python agent.py", "args": ["-v"]},
        '{"kind":"command","command":"python agent.py","model":"policy","args":["-v"],"env":{},'
        '"unknown_models":"policy"}',
    ),
    (
        {"command": "true"},
        '{"kind":"command","command":"true","model":"policy","args":[],"env":{},'
        '"unknown_models":"policy"}',
    ),
    (
        {"kind": "codex", "model": "m", "env": {"A": "1"}, "unknown_models": "refuse"},
        '{"kind":"codex","command":null,"model":"m","args":[],"env":{"A":"1"},'
        '"unknown_models":"refuse"}',
    ),
]


@pytest.mark.parametrize(("written", "stored"), HARNESS_WRITTEN_AND_STORED)
def test_a_checked_harness_dumps_as_the_core_dumped_it(written: dict, stored: str) -> None:
    task = TaskSpec.model_validate({"task_id": "t", "instruction": "x", "harness": written})
    assert check_task_kinds(task).harness.model_dump_json() == stored
    assert HarnessSpec.model_validate_json(stored).model_dump_json() == stored
