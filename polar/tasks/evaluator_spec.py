"""How a session is scored: the evaluator spec and the parts of its kinds (SWE-bench
instances, Harbor verifiers) and of the rubric judge beside any kind."""

from __future__ import annotations

import math
import shlex
from typing import Literal

from pydantic import Field, field_validator, model_validator

from polar.host_paths import checked_host_path
from polar.rubric import FormulaError, parse_formula
from polar.tasks.runtime_spec import NetworkSpec, RuntimeSpec
from polar.tasks.sources import CommandAction, PrepareAction
from polar.tasks.strict import MAX_TIMEOUT_S, StrictModel, git_arg


class RubricSpec(StrictModel):
    """A judge model's score of the finished session, combined with the outcome evaluator's
    reward (activities/evaluators/rubric.py; docs/evaluation.md, "Rubric rewards").

    The judge is called through the gateway by `model`, a name a named pool serves
    (`POLAR_POOLS`, e.g. a `judge` pool: recorded, never trained). It reads the task, the
    session's final diff and its messages with `rubric`, and answers a score in [0, 1] and a
    reason. The session reward is `formula` of `outcome` (the outcome evaluator's reward)
    and `rubric` (the score), clamped to `reward_range`. The session's text reaches the judge
    as untrusted data, and only its final verdict scores. A judge call that fails is asked
    again, then a control without the session's text: if the control grades, the session's
    text caused the failure and its reward is 0; if it fails too, the outcome reward is kept.
    The report says which.
    """

    rubric: str = Field(min_length=1, description="what the judge scores the session on")
    model: str = Field(
        default="judge",
        min_length=1,
        description="the model name the judge is called by: one a gateway pool serves, never "
        "the policy's",
    )
    formula: str = Field(
        default="outcome + 0.2 * rubric",
        description="the session reward: numbers, `outcome`, `rubric`, + - * /, parentheses, "
        "min(), max() (polar/rubric.py)",
    )
    per_trace: bool = Field(
        default=False,
        description="also judge each trace on its own messages: its reward is the formula of "
        "its outcome reward and its own score (process-reward style)",
    )
    timeout_s: float = Field(default=120, gt=0, le=3600, allow_inf_nan=False)
    max_tokens: int = Field(default=1024, ge=16, le=65536, description="of the judge's answer")
    max_input_chars: int = Field(
        default=60_000,
        ge=2_000,
        le=4_000_000,
        description="the diff and the messages shown to the judge, head and tail",
    )

    @field_validator("formula")
    @classmethod
    def _known_formula(cls, v: str) -> str:
        try:
            parse_formula(v)
        except FormulaError as exc:
            raise ValueError(str(exc)) from None
        return v.strip()

    @field_validator("model")
    @classmethod
    def _not_the_policy(cls, v: str) -> str:
        if v == "policy":
            raise ValueError(
                "rubric.model 'policy' is the policy's own name: name the judge's pool model "
                "(e.g. 'judge', served by a POLAR_POOLS pool)"
            )
        return v


class SweBenchSpec(StrictModel):
    """A SWE-bench-style instance's grading (activities/evaluators/swebench/).

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


class HarborVerifierSpec(StrictModel):
    """A Harbor task's verifier (polar/tasks/harbor.py, activities/evaluators/harbor.py).

    `tests_dir` (a folder of the worker host) is copied to `/tests` of the evaluator's fresh
    runtime only for grading; `/tests/{test_script}` runs there as `user` (None: the image's
    user) with `env`, within `timeout_s`, and the reward is read only from a `/logs/verifier`
    made fresh for it (`reward.json`, else `reward.txt`).
    """

    task: str = Field(min_length=1, description="the Harbor task's name (for messages)")
    tests_dir: str = Field(min_length=1)
    test_script: str = Field(default="test.sh", pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]*$|^[0-9]+$")
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        exclude_if=lambda v: v.sealed,  # left out while sealed: older workers read the spec
        description="what test.sh may reach (as `runtime.network`; default: nothing)",
    )

    @field_validator("tests_dir")
    @classmethod
    def _allowed_tests_dir(cls, v: str) -> str:
        return checked_host_path(v, "harbor.tests_dir")


class EvaluatorSpec(StrictModel):
    """How a session is scored.

    `command`: exit code 0 means reward 1, else 0; an optional `reward_command` then
    computes the reward (and per-trace rewards) from the command's exit code and the
    session's traces. `swebench`: the instance's tests on the session's patch in a fresh
    runtime (`swebench` required). `harbor`: a Harbor task's `tests/test.sh` in a fresh
    runtime, its reward read from `/logs/verifier` (`harbor` required).
    """

    kind: Literal["command", "swebench", "harbor", "none"] = "none"
    command: str | None = None
    reward_command: str | None = Field(
        default=None,
        description="(command) run after `command` and every process it left is gone, outside "
        "the workspace, with PYTHONSAFEPATH=1: reads POLAR_TRACES_FILE, "
        "POLAR_COMMAND_EXIT_CODE and POLAR_WORKSPACE (the workspace's path), may write "
        "POLAR_REWARD_FILE (JSON: reward, trace_rewards, detail). Only it is told where the "
        "reward goes: the code under test never is",
    )
    swebench: SweBenchSpec | None = None
    # left out of the JSON when unset, so older workers still read every other task
    harbor: HarborVerifierSpec | None = Field(default=None, exclude_if=lambda v: v is None)
    protected: list[str] = Field(
        default_factory=list,
        description="task-owned paths (globs: `*` within a name, `**/` any folders) restored "
        "before grading: the harness's changes to them are dropped from its patch",
    )
    reward_range: tuple[float, float] = Field(
        default=(0.0, 1.0), description="rewards (session and per-trace) are clamped to it"
    )
    rubric: RubricSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # left out unset: older workers read the spec
        description="(command, swebench) a judge's score combined with the outcome reward",
    )

    @model_validator(mode="after")
    def _command_needed(self) -> EvaluatorSpec:
        if self.kind == "command" and not self.command:
            raise ValueError("evaluator kind 'command' needs a non-empty 'command'")
        if self.kind == "swebench" and self.swebench is None:
            raise ValueError("evaluator kind 'swebench' needs its 'swebench' instance fields")
        if (self.kind == "harbor") != (self.harbor is not None):
            raise ValueError("'harbor' goes with evaluator kind 'harbor', and only with it")
        if self.reward_command is not None and self.kind != "command":
            raise ValueError("'reward_command' belongs to evaluator kind 'command'")
        lo, hi = self.reward_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"reward_range must be finite with lo < hi, not {self.reward_range}")
        return self

    @model_validator(mode="after")
    def _rubric_wraps_an_outcome(self) -> EvaluatorSpec:
        if self.rubric is not None and self.kind == "none":
            raise ValueError(
                "'rubric' combines a judge's score with an outcome evaluator's reward: give "
                "an evaluator kind (e.g. command) beside it"
            )
        return self

    def eval_runtime_spec(self, runtime: RuntimeSpec) -> RuntimeSpec:
        """The spec of the evaluator's fresh runtime: the task's, then (swebench) the checkout
        of `base_commit` and the instance's install as prepare actions, so they run while
        the harness does."""
        if self.kind != "swebench" or self.swebench is None:
            return runtime
        base = shlex.quote(self.swebench.base_commit)
        git = "git -c safe.directory=* -c core.hooksPath=/dev/null"
        # rev-list reads the commit after --end-of-options as a revision, never as an option;
        # rev-parse and checkout (no --end-of-options before git 2.44) get its hash
        checkout = (
            f"commit=$({git} rev-list -n 1 --end-of-options {base}^{{commit}} --) && "
            f'{{ [ "$({git} rev-parse HEAD)" = "$commit" ] || {git} checkout --quiet "$commit"; }}'
        )
        actions: list[PrepareAction] = [CommandAction(command=checkout, timeout_s=300)]
        if self.swebench.install:
            actions.append(CommandAction(command=self.swebench.install))
        return runtime.model_copy(update={"prepare": [*runtime.prepare, *actions]})
