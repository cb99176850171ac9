"""The `swebench` evaluator's config: a SWE-bench-style instance (`evaluator.swebench`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from activities.evaluators.base import EvaluatorConfig
from polar.tasks.strict import git_arg


class SweBenchConfig(EvaluatorConfig):
    """A SWE-bench-style instance's grading (`{"kind": "swebench", "swebench": {...}}`).

    The session's patch (`git diff` of its workspace against `base_commit`,
    junk filtered) is applied in a fresh runtime of the same source, then the
    `test_patch`, then the tests run; reward 1 only if every `fail_to_pass`
    test passes and every `pass_to_pass` test still passes.
    """

    instance_id: str
    repo: str = ""
    base_commit: str = Field(min_length=4)
    test_patch: str = ""
    fail_to_pass: list[str] = Field(min_length=1)
    pass_to_pass: list[str] = Field(default_factory=list)
    test_cmd: str | None = Field(
        default=None,
        description="test command; `{test_files}` is replaced by the test files, else they "
        "are appended (default: python -m pytest -rA -p no:cacheprovider)",
    )
    test_files: list[str] | None = Field(
        default=None, description="default: the files of the test ids and of the test patch"
    )
    install: str | None = Field(
        default=None,
        description="run while preparing the evaluator's runtime (during the harness, within "
        "`timeouts.prepare_s`), before the patches; a failure is an evaluator error",
    )
    log_parser: str | None = Field(
        default=None,
        description="trusting mode, for test commands that are not pytest: a swebench "
        "PARSER_REGISTRY name whose parser reads per-test status from the test log (which the "
        "code under test can print to). Default: pytest's own reports, written by Polar's "
        "plugin to a file outside the workspace",
    )
    exclude: list[str] = Field(
        default_factory=list, description="extra junk globs left out of the session's patch"
    )

    @field_validator("base_commit")
    @classmethod
    def _safe_commit(cls, v: str) -> str:
        return git_arg(v, "swebench.base_commit")
