"""Polar's pytest plugin: pytest's own per-test reports, one JSON line each, to a file.

The swebench evaluator copies this file as `polar_pytest_results.py` into
the evaluator runtime's scratch folder (outside the workspace) and loads it
into the instance's test command with `PYTEST_PLUGINS=polar_pytest_results`
and that folder on `PYTHONPATH`; `POLAR_PYTEST_RESULTS` names the output
file, also in scratch. Lines:

    {"event": "start", "pid": 12}
    {"event": "collect", "nodeid": "tests/test_x.py", "outcome": "failed", "why": "..."}
    {"event": "test", "nodeid": "...", "when": "call", "outcome": "passed", "xfail": false}
    {"event": "finish", "exitstatus": 1}

Statuses are then made from these lines (activities/evaluators/statuses.py),
never from the test log. Standard library and pytest hooks only; it must run
on any Python a repository's image has.
"""

import json
import os

_PATH = os.environ.get("POLAR_PYTEST_RESULTS")
_state: dict = {"out": None, "on": True}  # the open results file, and whether to write


def _write(record):
    if not _PATH or not _state["on"]:
        return
    if _state["out"] is None:
        _state["out"] = open(_PATH, "a", encoding="utf-8")  # noqa: SIM115 - kept open
    _state["out"].write(json.dumps(record) + "\n")
    _state["out"].flush()


def pytest_configure(config):
    # an xdist worker's reports reach the controller, which writes them
    if hasattr(config, "workerinput"):
        _state["on"] = False
        return
    _write({"event": "start", "pid": os.getpid()})


def pytest_collectreport(report):
    if report.failed or report.skipped:
        why = str(getattr(report, "longrepr", "") or "")[-500:]
        _write({"event": "collect", "nodeid": report.nodeid, "outcome": report.outcome, "why": why})


def pytest_runtest_logreport(report):
    _write(
        {
            "event": "test",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "xfail": hasattr(report, "wasxfail"),
        }
    )


def pytest_sessionfinish(session, exitstatus):
    _write({"event": "finish", "exitstatus": int(exitstatus)})


def pytest_unconfigure(config):
    if _state["out"] is not None:
        _state["out"].close()
        _state["out"] = None
