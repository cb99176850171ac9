"""The `harbor` evaluator's config: a Harbor task's verifier (`evaluator.harbor`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from activities.evaluators.base import EvaluatorConfig
from polar.host_paths import checked_host_path
from polar.tasks.runtime_spec import Sidecar
from polar.tasks.sidecar_spec import Condition
from polar.tasks.spec import NetworkSpec
from polar.tasks.strict import MAX_TIMEOUT_S


class HarborConfig(EvaluatorConfig):
    """A Harbor task's verifier (`{"kind": "harbor", "harbor": {...}}`, written by
    polar/tasks/harbor.py).

    `tests_dir` (a folder of the worker host) is copied to `/tests` of the evaluator's fresh
    runtime only for grading; `/tests/{test_script}` runs there as `user` (None: the image's
    user) with `env`, within `timeout_s`, and the reward is read only from a `/logs/verifier`
    made fresh for it (`reward.json`, else `reward.txt`).
    """

    task: str = Field(min_length=1, description="the Harbor task's name (for messages)")
    tests_dir: str = Field(min_length=1)
    step_tests_dir: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="a multi-step task's step's own tests/, copied over `tests_dir` in /tests "
        "(Harbor's order: the step's test script, else the task's)",
    )
    test_script: str = Field(default="test.sh", pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]*$|^[0-9]+$")
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    reward_key: str | None = Field(
        default=None,
        min_length=1,
        exclude_if=lambda v: v is None,  # left out when unset: older workers read the spec
        description="which named reward of reward.json is the session's reward (None: "
        "`reward`, else the only one, else the mean of all, as Harbor reads them)",
    )
    workspace_changes: bool = Field(
        default=True,
        exclude_if=lambda v: v,  # left out when set: older workers read the spec
        description="False: Harbor's separate verifier (`[verifier].environment_mode = "
        "'separate'`, or a `[verifier.environment]`): its fresh runtime gets the session's "
        "collected artifacts, never its workspace changes",
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        exclude_if=lambda v: v is None,
        description="a separate verifier's own image (`[verifier.environment].docker_image`, "
        "or built from tests/Dockerfile); None: the task's",
    )
    sidecars: list[Sidecar] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="a separate verifier's own compose services (its tests/docker-compose.yaml), "
        "beside `image`",
    )
    depends_on: dict[str, Condition] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="what a separate verifier's `main` waits for among `sidecars` "
        "(RuntimeSpec.depends_on)",
    )
    resources: dict[str, float | str] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="a separate verifier's own `cpus`, `memory`, `disk` (its "
        "[verifier.environment]'s), over the task's runtime's",
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        exclude_if=lambda v: v.sealed,  # left out while sealed: older workers read the spec
        description="what test.sh may reach (as `runtime.network`; default: nothing)",
    )

    @field_validator("tests_dir")
    @classmethod
    def _allowed_tests_dir(cls, v: str) -> str:
        return checked_host_path(v, "harbor.tests_dir")

    @field_validator("step_tests_dir")
    @classmethod
    def _allowed_step_tests_dir(cls, v: str | None) -> str | None:
        return None if v is None else checked_host_path(v, "harbor.step_tests_dir")
