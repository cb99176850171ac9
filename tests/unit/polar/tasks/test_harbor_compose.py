"""A Harbor task's compose services as sidecars (polar/tasks/harbor_compose.py): a sidecar
built from the task's own files is tagged by its content; what cannot run is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_compose import read_compose
from polar.tasks.harbor_environment import IMAGE_REPO, environment_hash
from polar.tasks.harbor_toml import HarborTaskError, read_harbor_task
from tests.support.paths import REPO

TASK = REPO / "examples" / "harbor-features" / "compose-lookup"
COMPOSE = "environment/docker-compose.yaml"


def _task(tmp_path: Path, lookup: str) -> Path:
    """compose-lookup with its `lookup` service's keys replaced by `lookup` (YAML lines)."""
    task = Path(shutil.copytree(TASK, tmp_path / "lookup"))
    (task / COMPOSE).write_text(
        "services:\n  main:\n    environment:\n      LOOKUP_URL: http://lookup:8000/word.txt\n"
        "  lookup:\n" + "".join(f"    {line}\n" for line in lookup.splitlines())
    )
    return task


def test_a_sidecar_built_from_a_folder_of_the_task_is_tagged_by_its_content(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path, "build: ./lookup-image\ncommand: ['python3', '-m', 'http.server']")
    folder = task / "environment" / "lookup-image"
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM polar/runtime:py311\nRUN echo hi > /srv/word.txt\n")
    (spec,) = load_harbor_tasks(task)
    harbor = read_harbor_task(task)
    (sidecar,) = spec.runtime.sidecars
    assert sidecar.image == f"{IMAGE_REPO}:{environment_hash(harbor, None, folder)[:20]}"
    assert sidecar.image != spec.runtime.image
    (build,) = read_compose(harbor).builds
    assert (build.service, build.image, build.context) == ("lookup", sidecar.image, folder)
    (folder / "Dockerfile").write_text("FROM polar/runtime:py311\nRUN echo other > /w\n")
    (again,) = load_harbor_tasks(task)
    assert again.runtime.sidecars[0].image != sidecar.image  # keyed on the folder's content


def test_another_dockerfile_of_the_environment_is_another_image(tmp_path: Path) -> None:
    task = _task(tmp_path, "build:\n  context: .\n  dockerfile: Dockerfile.lookup\nimage: x:1")
    (task / "environment" / "Dockerfile.lookup").write_text("FROM polar/runtime:py311\n")
    (spec,) = load_harbor_tasks(task)
    (sidecar,) = spec.runtime.sidecars
    assert sidecar.image.startswith(IMAGE_REPO) and sidecar.image != spec.runtime.image
    (build,) = read_compose(read_harbor_task(task)).builds
    assert build.dockerfile == "Dockerfile.lookup"


@pytest.mark.parametrize(
    ("lookup", "field"),
    [
        ("build: ../../..", "lookup.build"),  # outside the task
        ("build: ./missing", "lookup.build"),
        ("build:\n  context: .\n  args: {A: '1'}", "lookup.build.args"),
        ("image: polar/runtime:py311\nports: ['8000:8000']", "lookup.ports"),
        ("command: ['true']", "lookup.image"),  # neither image nor build
    ],
)
def test_what_cannot_run_is_named(tmp_path: Path, lookup: str, field: str) -> None:
    task = _task(tmp_path, lookup)
    with pytest.raises(HarborTaskError) as err:
        load_harbor_tasks(task)
    assert err.value.field is not None and err.value.field.endswith(field), err.value
