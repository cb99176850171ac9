"""activities/evaluators/protected.py: the command evaluator protects the grading code its
command names, never the artefact it grades."""

from activities.evaluators.protected import command_path_candidates


def test_scripts_and_tests_the_command_names_are_protected() -> None:
    command = "python3 score.py && pytest -q tests/test_calc.py::test_add --rootdir=ci/run.sh"
    found = command_path_candidates(command)  # which exist at base is git's to say
    assert {"score.py", "tests/test_calc.py", "ci/run.sh"} <= set(found)


def test_the_graded_artefact_is_not() -> None:
    assert command_path_candidates("grep -q fixed hello.txt") == []
    assert command_path_candidates("diff -q out/result.json expected/answer.txt") == []
