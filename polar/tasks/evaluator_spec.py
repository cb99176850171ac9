"""How a session is scored: the evaluator spec (a kind by name, its config under the key
the kind names) and the rubric judge beside any kind."""

from __future__ import annotations

import math
import shlex
from typing import Any

from pydantic import Field, field_validator, model_validator

from polar.rubric import FormulaError, parse_formula
from polar.tasks.collect_spec import CollectSpec
from polar.tasks.runtime_spec import RuntimeSpec, Sidecar
from polar.tasks.sources import CommandAction, PrepareAction
from polar.tasks.strict import KindSpec, StrictModel

NO_EVALUATOR = "none"
"""The evaluator kind of a task that is not graded (no evaluator runs)."""


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


_HEAD_IS = """# no git in the image: the workspace's HEAD must already be base_commit (its full id)
[ -f .git/HEAD ] || {{ echo "polar: the workspace is no git checkout (no .git/HEAD)" >&2; exit 1; }}
head=; read -r head < .git/HEAD || [ -n "$head" ] || exit 1
case $head in "ref: "*)
  ref=${{head#ref: }}; head=
  if [ -f ".git/$ref" ]; then read -r head < ".git/$ref" || true
  elif [ -f .git/packed-refs ]; then
    while read -r id name; do [ "$name" = "$ref" ] && head=$id; done < .git/packed-refs
  fi;;
esac
if [ "$head" != {base} ]; then
  echo "polar: the image has no git to check out base_commit" {base} "and the workspace's" \\
    "HEAD is ${{head:-unknown}}: give base_commit as HEAD's full id, or an image with git" >&2
  exit 1
fi"""
"""The swebench checkout where the image has no git (sh alone): HEAD read from `.git`."""


class EvaluatorSpec(KindSpec):
    """How a session is scored: an evaluator `kind` by name, and its config, validated by
    the kind's own model where the evaluators are (activities/evaluators/<kind>/: the
    worker at the session's stages, `polar submit` / `polar tasks load` before submitting).

    A kind's config goes under the key its name gives (`{"kind": "swebench", "swebench":
    {...}}`, `{"kind": "harbor", "harbor": {...}}`); the `command` kind's are the top-level
    `command` and `reward_command`. `command`: exit code 0 means reward 1, else 0; an
    optional `reward_command` then computes the reward (and per-trace rewards) from the
    command's exit code and the session's traces. `swebench`: the instance's tests on the
    session's patch in a fresh runtime. `harbor`: a Harbor task's `tests/test.sh` in a fresh
    runtime, its reward read from `/logs/verifier`. `none`: not graded. What is common to
    every kind (`protected`, `reward_range`, `rubric`) is checked here.
    """

    kind: str = Field(
        default=NO_EVALUATOR,
        min_length=1,
        description="an evaluator kind the worker registers (activities/evaluators: command, "
        "swebench, harbor), or `none`",
    )
    command: str | None = Field(default=None, description="(command) the grading command")
    reward_command: str | None = Field(
        default=None,
        description="(command) run after `command` and every process it left is gone, outside "
        "the workspace, with PYTHONSAFEPATH=1: reads POLAR_TRACES_FILE, "
        "POLAR_COMMAND_EXIT_CODE and POLAR_WORKSPACE (the workspace's path), may write "
        "POLAR_REWARD_FILE (JSON: reward, trace_rewards, detail). Only it is told where the "
        "reward goes: the code under test never is",
    )
    swebench: dict[str, Any] | None = Field(
        default=None,
        description="(swebench) the instance: activities/evaluators/swebench/config.py",
    )
    # left out of the JSON when unset, so older workers still read every other task
    harbor: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="(harbor) the verifier: activities/evaluators/harbor/config.py",
    )
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
    def _common_checks(self) -> EvaluatorSpec:
        extra = set(self.model_extra or {})
        if self.harbor is not None:
            extra.add("harbor")
        if extra - {self.kind}:
            key = sorted(extra - {self.kind})[0]
            raise ValueError(f"{key!r} goes with evaluator kind {key!r}, and only with it")
        if self.reward_command is not None and self.kind != "command":
            raise ValueError("'reward_command' belongs to evaluator kind 'command'")
        lo, hi = self.reward_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"reward_range must be finite with lo < hi, not {self.reward_range}")
        if self.rubric is not None and self.kind == NO_EVALUATOR:
            raise ValueError(
                "'rubric' combines a judge's score with an outcome evaluator's reward: give "
                "an evaluator kind (e.g. command) beside it"
            )
        return self

    def eval_runtime_spec(self, runtime: RuntimeSpec) -> RuntimeSpec:
        """The spec of the evaluator's fresh runtime: the task's, then (swebench) the checkout
        of `base_commit` and the instance's install as prepare actions, so they run while
        the harness does; (harbor) a separate verifier's own image with its own services
        (none of the task's prepare actions, sidecars, collection or harness user: they
        are the agent's environment's).
        Workflow code calls it (the prewarm), so it reads the keys it
        needs from the config as written; the kind's model has checked them at submit and
        checks them again when grading."""
        harbor = (self.harbor or {}) if self.kind == "harbor" else {}
        own = harbor.get("resources")  # a separate verifier's cpus, memory, disk
        if isinstance(own, dict) and own:
            runtime = runtime.model_copy(
                update={k: own[k] for k in ("cpus", "memory", "disk") if k in own}
            )
        image = harbor.get("image")
        if isinstance(image, str) and image:  # a separate verifier's own environment
            sidecars = [Sidecar.model_validate(s) for s in harbor.get("sidecars", [])]
            return runtime.model_copy(
                update={
                    "image": image,
                    "prepare": [],
                    "sidecars": sidecars,
                    "depends_on": dict(harbor.get("depends_on") or {}),
                    "collect": CollectSpec(),
                    "harness_user": None,
                }
            )
        config = self.swebench if self.kind == "swebench" else None
        base_commit = (config or {}).get("base_commit")
        if not isinstance(base_commit, str) or not base_commit:
            return runtime
        base = shlex.quote(base_commit)
        git = "git -c safe.directory=* -c core.hooksPath=/dev/null"
        # rev-list reads the commit after --end-of-options as a revision, never as an option;
        # rev-parse and checkout (no --end-of-options before git 2.44) get its hash
        checkout = (
            "if command -v git >/dev/null 2>&1; then "
            f"commit=$({git} rev-list -n 1 --end-of-options {base}^{{commit}} --) && "
            f'{{ [ "$({git} rev-parse HEAD)" = "$commit" ] || {git} checkout --quiet "$commit"; }}'
            f"\nelse {_HEAD_IS.format(base=base)}\nfi"
        )
        actions: list[PrepareAction] = [CommandAction(command=checkout, timeout_s=300)]
        install = (config or {}).get("install")
        if isinstance(install, str) and install:
            actions.append(CommandAction(command=install))
        return runtime.model_copy(update={"prepare": [*runtime.prepare, *actions]})
