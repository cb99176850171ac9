"""Polar's pytest plugin and pytest's entry point: per-test reports, one JSON line each, to a pipe.

Polar's runner (pytest_runner.py) starts it as `INTERPRETER polar_pytest_results.py FD --
PYTEST_ARGS`, with the write end of a pipe as fd FD (by number on argv: nothing of the
channel is in the environment). At load the fd is made non-inheritable (the tests'
subprocesses do not get it). `sys.path` holds no workspace entry while pytest, its
dependencies and this plugin are imported; the workspace (what `python -m pytest` puts first)
is inserted only then, and pytest runs with this module as a plugin. Lines:

    {"event": "boot"}                                   pytest imported, plugin loaded
    {"event": "start", "pid": 12}
    {"event": "collect", "nodeid": "tests/test_x.py", "outcome": "failed", "why": "..."}
    {"event": "test", "nodeid": "...", "when": "call", "outcome": "passed", "xfail": false}
    {"event": "tampered", "why": "..."}
    {"event": "finish", "exitstatus": 1}

Tamper checks (code under test shares this process: see docs/threat-model.md for what they
cannot catch): the functions that make, log and count reports (`_pytest.reports`,
`_pytest.runner`, `_pytest.skipping`, `_pytest.main`, pluggy's hook calling) are fingerprinted
(identity and code) before any conftest or test module is imported and checked at each report
and at the session's end; each report's outcome is cross-checked with the call's raw
`excinfo` (a raised call never "passed") by an outermost `pytest_runtest_makereport`
wrapper, and at `pytest_runtest_logreport` with what that wrapper saw. A mismatch is a
`tampered` line: the run does not count.

Statuses are then made from these lines (activities/evaluators/statuses.py), never from the
test log. Standard library, pytest and pluggy only; it must run on any Python >= 3.6 a repository's
image has.
"""

import hashlib
import json
import os
import sys

_state: dict = {"fd": None, "on": True, "xdist": False}
_seen: dict = {}  # (nodeid, when) -> outcome made by makereport (outermost wrapper)
_prints: list = []  # (owner, attribute name, object, code, code hash)
_flagged: set = set()


def _write(record):
    if _state["fd"] is None or not _state["on"]:
        return
    data = (json.dumps(record) + "\n").encode("utf-8")
    while data:
        data = data[os.write(_state["fd"], data) :]


def _tampered(why):
    if why not in _flagged:
        _flagged.add(why)
        _write({"event": "tampered", "why": why})


# --------------------------------------------------------------------------- fingerprints

_TARGETS = (
    (
        "_pytest.runner",
        (
            "pytest_runtest_protocol",
            "runtestprotocol",
            "call_and_report",
            "call_runtest_hook",
            "check_interactive_exception",
            "pytest_runtest_makereport",
            "CallInfo.from_call",
        ),
    ),
    (
        "_pytest.reports",
        (
            "TestReport.from_item_and_call",
            "TestReport.__init__",
            "BaseReport.passed",
            "BaseReport.failed",
            "BaseReport.skipped",
            "CollectReport.__init__",
            "pytest_report_from_serializable",
        ),
    ),
    ("_pytest.skipping", ("pytest_runtest_makereport",)),
    (
        "_pytest.main",
        (
            "pytest_runtestloop",
            "wrap_session",
            "Session.pytest_runtest_logreport",
            "Session.pytest_collectreport",
        ),
    ),
    ("_pytest.outcomes", ("fail", "skip", "exit")),
    ("pluggy._callers", ("_multicall",)),
    ("pluggy.callers", ("_multicall",)),
    ("pluggy._hooks", ("HookCaller.__call__", "_HookCaller.__call__")),
    ("pluggy.hooks", ("_HookCaller.__call__",)),
    ("pluggy._manager", ("PluginManager._hookexec",)),
    ("pluggy.manager", ("PluginManager._hookexec",)),
)


def _code_of(obj):
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)
    return getattr(obj, "__code__", None)


def _digest(code):
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_consts).encode("utf-8", "replace"))
    h.update(repr(code.co_names).encode("utf-8", "replace"))
    return h.hexdigest()


def fingerprint():
    """Record each target (module attribute or class attribute) that exists here."""
    import importlib

    for module_name, names in _TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for dotted in names:
            owner: object = module
            *path, name = dotted.split(".")
            for part in path:
                owner = getattr(owner, part, None)
            if owner is None:
                continue
            if name not in vars(owner):
                continue
            obj = vars(owner)[name]
            code = _code_of(obj)
            _prints.append((module_name, owner, name, obj, code, code and _digest(code)))
        _prints.append((module_name, None, None, module, None, None))


def check_prints(where):
    for module_name, owner, name, obj, code, digest in _prints:
        if owner is None:
            if sys.modules.get(module_name) is not obj:
                _tampered(f"module {module_name} replaced in sys.modules ({where})")
            continue
        now = vars(owner).get(name)
        label = "{}.{}".format(getattr(owner, "__qualname__", module_name), name)
        if now is not obj:
            _tampered(f"{label} was replaced ({where})")
        elif code is not None and (_code_of(now) is not code or _digest(code) != digest):
            _tampered(f"the code of {label} was changed ({where})")


def check_hookimpls(config, where):
    """pytest's own implementations of the report hooks are still its own functions."""
    builtin = {(m, n): o for m, _, n, o, _, _ in _prints if n is not None}
    for hook in (
        "pytest_runtest_makereport",
        "pytest_runtest_logreport",
        "pytest_runtest_protocol",
    ):
        caller = getattr(config.hook, hook, None)
        impls = caller.get_hookimpls() if caller is not None else []
        for impl in impls:
            name = getattr(impl.plugin, "__name__", "")
            want = builtin.get((name, hook))
            if want is not None and impl.function is not want:
                _tampered(f"{name}'s {hook} implementation was replaced ({where})")


# --------------------------------------------------------------------------- hooks


def pytest_configure(config):
    # an xdist worker's reports reach the controller, which writes them
    if hasattr(config, "workerinput"):
        _state["on"] = False
        return
    _state["xdist"] = bool(getattr(config.option, "numprocesses", None)) or bool(
        getattr(config.option, "dist", "no") not in ("no", None)
    )
    _write({"event": "start", "pid": os.getpid()})


def pytest_collectreport(report):
    if report.failed or report.skipped:
        why = str(getattr(report, "longrepr", "") or "")[-500:]
        _write({"event": "collect", "nodeid": report.nodeid, "outcome": report.outcome, "why": why})


def _makereport_wrapper(item, call):
    outcome = yield
    try:
        report = outcome.get_result()
    except BaseException:  # noqa: BLE001 - pytest reports the hook's own error
        return
    raised = call.excinfo is not None
    if raised and report.outcome == "passed":
        _tampered(
            f"{item.nodeid} ({call.when}) raised {call.excinfo.typename} but its report says passed"
        )
    _seen[(report.nodeid, report.when)] = report.outcome


def pytest_runtest_logreport(report):
    check_prints(f"at {report.nodeid}")
    made = _seen.pop((report.nodeid, report.when), None)
    if made is None and not _state["xdist"]:
        _tampered(f"a report of {report.nodeid} ({report.when}) that pytest never made")
    elif made is not None and made != report.outcome:
        _tampered(
            f"the report of {report.nodeid} ({report.when}) changed from {made} to "
            f"{report.outcome} after it was made"
        )
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
    check_prints("at the session's end")
    check_hookimpls(session.config, "at the session's end")
    _write({"event": "finish", "exitstatus": int(exitstatus)})


# --------------------------------------------------------------------------- entry point


def main():
    fd, dash, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    assert dash == "--"
    os.set_inheritable(fd, False)
    _state["fd"] = fd
    # the plugin's own folder (scratch) is not a place to import from either
    while sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(
        os.path.realpath(__file__)
    ):
        del sys.path[0]
    import pytest

    me = sys.modules[__name__]
    wrapper = pytest.hookimpl(hookwrapper=True, tryfirst=True)(_makereport_wrapper)
    setattr(me, "pytest_runtest_makereport", wrapper)  # noqa: B010 - hooks found by name
    fingerprint()
    _write({"event": "boot"})
    # what `python -m pytest` does: the working directory first, now that pytest is loaded
    sys.path.insert(0, os.getcwd())
    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py")] + args
    code = pytest.main(args, plugins=[me])
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
