"""The exit codes docs/errors.md lists are the CLI's (app/cli/exit_codes.py), each verdict has
its own, and the usage and not-found codes stay those Click and the CLI always gave."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from app.cli import app
from app.cli.exit_codes import VERDICT_CODES, ExitCode, verdict_fields
from polar.verdicts import Verdict
from tests.support.paths import REPO


def documented() -> dict[int, str]:
    """code -> name from the exit-code table of docs/errors.md."""
    text = (REPO / "docs" / "errors.md").read_text()
    table = text.split("| code | name | meaning |", 1)[1].split("\n\n", 1)[0]
    return {
        int(code): name
        for code, name in re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", table, flags=re.MULTILINE)
    }


def test_the_documented_codes_are_the_clis() -> None:
    assert documented() == {int(c): c.name.lower() for c in ExitCode}


def test_each_verdict_has_a_code_of_its_own() -> None:
    assert set(VERDICT_CODES) == {v.value for v in Verdict}
    assert len(set(VERDICT_CODES.values())) == len(Verdict)
    assert {VERDICT_CODES[v].name.lower() for v in Verdict} == {v.value for v in Verdict}
    assert verdict_fields("infra_error") == {"verdict": "infra_error", "exit_code": 5}


def test_usage_errors_keep_clicks_code() -> None:
    result = CliRunner().invoke(app, ["submit", "--no-such-flag"])
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
