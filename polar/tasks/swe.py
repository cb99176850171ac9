"""SWE-bench / SWE-Gym instances: the instance model, a JSONL loader, instance → TaskSpec.

An instance is one line of a SWE-bench-format JSONL file:

    {"instance_id": "owner__name-123", "repo": "owner/name", "base_commit": "<sha>",
     "problem_statement": "...", "patch": "<gold diff>", "test_patch": "<diff adding tests>",
     "FAIL_TO_PASS": ["tests/test_x.py::test_bug"], "PASS_TO_PASS": ["..."],
     "image": null, "install": null, "test_cmd": null}

`FAIL_TO_PASS` / `PASS_TO_PASS` are lists or, as SWE-bench ships them,
JSON-encoded strings of lists. Other fields (`version`, `created_at`,
`hints_text`, `environment_setup_commit`, ...) are kept as they are.

`instance_to_task` makes a TaskSpec whose instruction is the problem
statement, whose source is the repository at `base_commit` and whose
evaluator is `swebench` with the instance's tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from polar.tasks.spec import HarnessSpec, RuntimeSpec, TaskSpec

_IMAGE_ALIASES = ("image_name", "docker_image")


class InvalidInstance(ValueError):
    """A JSONL line that is not a SWE-bench-format instance."""


class SweInstance(BaseModel):
    """One SWE-bench / SWE-Gym instance."""

    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1, description="owner/name")
    base_commit: str = Field(min_length=4)
    problem_statement: str = ""
    patch: str = Field(default="", description="the gold patch")
    test_patch: str = ""
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    image: str | None = None
    install: str | None = None
    test_cmd: str | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                v = json.loads(v) if v.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test ids: {exc}") from exc
        return v

    @model_validator(mode="before")
    @classmethod
    def _image_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("image"):
            for alias in _IMAGE_ALIASES:
                if data.get(alias):
                    data = {**data, "image": data[alias]}
                    break
        return data

    def to_json(self, *, encode_lists: bool = False) -> str:
        """One JSONL line; `encode_lists` writes the test lists as SWE-bench does (strings)."""
        data = self.model_dump(mode="json", exclude_none=True)
        if encode_lists:
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                data[key] = json.dumps(data[key])
        return json.dumps(data, ensure_ascii=False)


def iter_instances(path: str | Path) -> Iterator[SweInstance]:
    """Instances of a JSONL file, one a line (blank lines skipped)."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield SweInstance.model_validate_json(line)
            except ValidationError as exc:
                raise InvalidInstance(f"{path}:{lineno}: {exc}") from exc


def load_instances(path: str | Path, ids: Iterable[str] | None = None) -> list[SweInstance]:
    """All instances of a JSONL file, or those whose `instance_id` is in `ids`."""
    wanted = set(ids) if ids is not None else None
    return [i for i in iter_instances(path) if wanted is None or i.instance_id in wanted]


def dump_instances(
    instances: Iterable[SweInstance], path: str | Path, *, encode_lists: bool = False
) -> None:
    """Write instances as JSONL (the loader reads it back unchanged)."""
    text = "".join(i.to_json(encode_lists=encode_lists) + "\n" for i in instances)
    Path(path).write_text(text, encoding="utf-8")


def repo_dir_name(repo: str) -> str:
    """Where a local mirror of `owner/name` lives under a source root: `owner__name`."""
    return repo.replace("/", "__")


def source_url(repo: str, source_root: str | Path | None) -> str:
    """The git URL of `repo`: GitHub by default, `{root}/{repo}.git` for a URL root, or
    a local clone `{root}/owner__name` (or `{root}/owner/name`) for a directory root."""
    if source_root is None:
        return f"https://github.com/{repo}.git"
    root = str(source_root)
    if "://" in root:
        return f"{root.rstrip('/')}/{repo}.git"
    base = Path(root).resolve()
    flat = base / repo_dir_name(repo)
    nested = base / repo
    return str(nested if not flat.exists() and nested.exists() else flat)


def task_id_for(instance_id: str) -> str:
    """A TaskSpec id from an instance id (SWE-bench ids already fit; others are cleaned)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", instance_id).lstrip("._-") or "instance"
    return cleaned[:128]


def instance_to_task(
    instance: SweInstance,
    *,
    harness: HarnessSpec | dict[str, Any],
    num_sessions: int = 1,
    source_root: str | Path | None = None,
    runtime: RuntimeSpec | dict[str, Any] | None = None,
    task_id: str | None = None,
    **extra: Any,
) -> TaskSpec:
    """A TaskSpec running `harness` on `instance`, graded by its tests.

    `extra` goes to TaskSpec as is (builder, timeouts, metadata, ...); the
    instance's `image`, when it has one, is the image of a `docker` runtime.
    """
    if isinstance(harness, BaseModel):
        harness = harness.model_dump(mode="json", exclude_none=True)
    runtime_data: dict[str, Any] = (
        runtime.model_dump(mode="json") if isinstance(runtime, BaseModel) else dict(runtime or {})
    )
    if instance.image and runtime_data.get("kind") == "docker":
        runtime_data["image"] = instance.image
    metadata = {
        "dataset": "swebench",
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        **extra.pop("metadata", {}),
    }
    return TaskSpec.model_validate(
        {
            "task_id": task_id or task_id_for(instance.instance_id),
            "instruction": instance.problem_statement,
            "num_sessions": num_sessions,
            "source": {
                "type": "git",
                "url": source_url(instance.repo, source_root),
                "ref": instance.base_commit,
            },
            "runtime": runtime_data,
            "harness": harness,
            "evaluator": {"kind": "swebench", "swebench": evaluator_fields(instance)},
            "metadata": metadata,
            **extra,
        }
    )


def evaluator_fields(instance: SweInstance) -> dict[str, Any]:
    """The `swebench` evaluator config of an instance (activities/evaluators/swebench/config.py)."""
    fields: dict[str, Any] = {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        "test_patch": instance.test_patch,
        "fail_to_pass": instance.FAIL_TO_PASS,
        "pass_to_pass": instance.PASS_TO_PASS,
    }
    for key in ("test_cmd", "install"):
        if getattr(instance, key):
            fields[key] = getattr(instance, key)
    extra = instance.model_extra or {}
    for key in ("test_files", "log_parser"):
        if extra.get(key):
            fields[key] = extra[key]
    return fields
