"""The suite hands its longest test files to the xdist workers first, each file's tests together
and in their own order; the figures come from the lanes' JUnit reports."""

from __future__ import annotations

from pathlib import Path

from tests.support.module_order import UNKNOWN_S, longest_first, seconds_from_junit


def test_files_go_longest_first_each_in_its_own_order() -> None:
    items = ["a::1", "a::2", "b::1", "c::1", "c::2", "d::1"]
    file_of = {id(i): i.split("::")[0] for i in items}
    seconds = {"a": 5.0, "b": 300.0, "c": 40.0}  # d: unknown, counts as UNKNOWN_S
    assert UNKNOWN_S < 40.0
    assert longest_first(items, file_of, seconds) == [
        "b::1",
        "c::1",
        "c::2",
        "d::1",
        "a::1",
        "a::2",
    ]


def test_seconds_per_file_from_junit(tmp_path: Path) -> None:
    report = tmp_path / "system.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.system.test_task_audit" name="test_a" time="300.5"/>'
        '<testcase classname="tests.system.test_task_audit" name="test_b" time="20"/>'
        '<testcase classname="tests.system.test_x.TestGroup" name="test_c" time="1.25"/>'
        "</testsuite></testsuites>"
    )
    assert seconds_from_junit([report]) == {
        "tests/system/test_task_audit.py": 320.5,
        "tests/system/test_x.py": 1.2,
    }
